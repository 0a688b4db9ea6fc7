"""Building for and running on another CPU architecture than this machine's: which tools it takes.

A target is *foreign* when its architecture is not this machine's: its kernels are built by a cross
compiler and can only run here under a user-mode emulator (their timings then mean nothing).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..target import Target, TargetKind


@dataclass(frozen=True, slots=True)
class CrossTools:
    """The tools (and the Debian packages that ship them) that build and run ``arch`` code on another machine."""

    arch: str
    compiler: str  # cross C compiler, a name on PATH
    compiler_package: str
    emulator: str  # user-mode emulator, a name on PATH
    emulator_package: str
    sysroot: str  # the target's dynamic loader and libraries (libc, libgomp), for the emulator's -L
    libc_package: str  # the target's C library to link against (crti.o, libm), which the compiler only recommends

    def can_link(self) -> bool:
        """Whether the target's C library to link against is installed (its start files, crti.o)."""
        return Path(self.sysroot, "lib", "crti.o").is_file()


#: arch -> its cross tools
CROSS_TOOLS: dict[str, CrossTools] = {
    "aarch64": CrossTools("aarch64", "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu", "qemu-aarch64", "qemu-user",
                          "/usr/aarch64-linux-gnu", "libc6-dev-arm64-cross"),
}


def is_foreign(target: Target) -> bool:
    """Whether ``target``'s architecture differs from this machine's (it needs cross tools). A GPU target is
    never foreign: its kernels run on a GPU of this machine, not under an emulator."""
    return target.kind is TargetKind.C and target.arch != Target.host().arch
