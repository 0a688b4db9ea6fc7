"""The ARM target of the tests and what running its kernels here needs (a cross compiler and qemu on x86)."""
from __future__ import annotations

import shutil

import pytest

from tensortune.runtime.cross import CROSS_TOOLS, is_foreign
from tensortune.target import Target

NEON_TEXT = "c -isa=neon -cores=2 -arch=aarch64"
NEON = Target.parse(NEON_TEXT)
EMULATED = is_foreign(NEON)
TOOLS = CROSS_TOOLS["aarch64"]
MISSING = [pkg for name, pkg in ((TOOLS.compiler, TOOLS.compiler_package), (TOOLS.emulator, TOOLS.emulator_package))
           if EMULATED and shutil.which(name) is None]
MISSING += [TOOLS.libc_package] if EMULATED and not TOOLS.can_link() else []
PACKAGES = f"{TOOLS.compiler_package}, {TOOLS.libc_package} and {TOOLS.emulator_package}"
needs_tools = pytest.mark.skipif(bool(MISSING), reason=f"running aarch64 kernels here needs Debian's {PACKAGES} "
                                                       f"(missing: {', '.join(MISSING)}; `.ci/run` installs them)")
only_emulated = pytest.mark.skipif(not EMULATED, reason="this machine is aarch64: nothing is emulated")
