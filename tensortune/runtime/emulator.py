"""Running kernels of another architecture (aarch64 on an x86 machine) under a user-mode emulator (qemu).

A ctypes module cannot load a foreign library, so ``EmulatedModule`` runs it in a small driver program,
cross-compiled once (and cached like kernels) and started under the emulator for each call or timing:
the arrays go to the driver through a shared data file, the driver calls the kernel (a timed loop of
calls in native code, as ``Module`` does) and the outputs come back through the same file. Results are
exact; timings are the emulator's and mean nothing for the target CPU, so they are marked ``emulated``.
"""
from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..errors import EmulatorNotFoundError
from ..target import ISA, Target
from .compiler import compile_program
from .cross import CROSS_TOOLS
from .module import ALIGNMENT, BaseModule, KernelRuntimeError
from .timer import TIMER_SOURCE

ERROR_LINES = 20  # lines of the driver's stderr kept in an error message

DRIVER_SOURCE = TIMER_SOURCE + r"""
/* tensortune's driver: runs one kernel of a shared library, for a caller on another architecture.
   usage: driver LIBRARY ENTRY NUM_THREADS DATA_FILE OFFSET...
   The kernel's buffers (arguments, then workspaces) lie in DATA_FILE at the byte OFFSETs; the file is
   mapped shared, so what the kernel writes lands in it. Each line "COUNT" on stdin calls the kernel
   COUNT times and answers one line: the seconds taken, or "error RC" for a nonzero return code. */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>

int main(int argc, char** argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s LIBRARY ENTRY NUM_THREADS DATA_FILE OFFSET...\n", argv[0]);
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* die with the process that started us (a killed measurement worker) */
    void* lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "cannot load the kernel library: %s\n", dlerror());
        return 2;
    }
    tt_kernel kernel = (tt_kernel)dlsym(lib, argv[2]);
    if (!kernel) {
        fprintf(stderr, "no entry point %s in %s\n", argv[2], argv[1]);
        return 2;
    }
    int32_t num_threads = (int32_t)atoi(argv[3]);
    struct stat st;
    int fd = open(argv[4], O_RDWR);
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror(argv[4]);
        return 2;
    }
    char* data = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    int n = argc - 5;
    void** args = calloc(n > 0 ? n : 1, sizeof(void*));
    for (int i = 0; i < n; i++) args[i] = data + atoll(argv[5 + i]);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        double seconds = tt_time_calls(kernel, args, num_threads, atoll(line));
        if (seconds < 0)
            printf("error %d\n", tt_last_error());
        else
            printf("%.9e\n", seconds);
        fflush(stdout);
    }
    return 0;
}
"""


class EmulatedTimingWarning(UserWarning):
    """A kernel was timed under an emulator: its timings say nothing about the target CPU."""


@dataclass(frozen=True, slots=True)
class Emulator:
    """A user-mode emulator for one architecture, with that architecture's libraries and the driver built for it."""

    name: str
    path: str
    sysroot: str  # the target's loader, libc and libgomp (qemu's -L)
    driver: Path

    def command(self, *argv: str) -> list[str]:
        """The command line that runs the driver with ``argv`` under the emulator."""
        return [self.path, "-L", self.sysroot, str(self.driver), *argv]


def find_emulator(target: Target) -> Emulator:
    """The emulator that runs ``target``'s kernels here, with its driver (cross-compiled on first use).

    Raises ``EmulatorNotFoundError`` (naming the package to install) when the emulator or the target's
    libraries are missing, ``CompilerNotFoundError`` when the cross compiler is.
    """
    host = Target.host().arch
    tools = CROSS_TOOLS.get(target.arch)
    if tools is None:
        raise EmulatorNotFoundError(f"tensortune cannot run {target.arch} kernels on this {host} machine (it can "
                                    f"emulate {', '.join(CROSS_TOOLS)}); run them on a {target.arch} machine")
    path = shutil.which(tools.emulator)
    if path is None:
        raise EmulatorNotFoundError(f"running {target.arch} kernels on this {host} machine needs {tools.emulator}, "
                                    f"which is not on PATH: install Debian's {tools.emulator_package} "
                                    f"(`apt-get install {tools.emulator_package}`)")
    if not Path(tools.sysroot, "lib").is_dir():
        raise EmulatorNotFoundError(f"running {target.arch} kernels needs the {target.arch} C library in "
                                    f"{tools.sysroot}: install Debian's {tools.compiler_package} "
                                    f"(`apt-get install {tools.compiler_package}`)")
    driver = compile_program(DRIVER_SOURCE, Target(ISA.SCALAR, 1, target.arch))
    return Emulator(tools.emulator, path, tools.sysroot, driver)


class EmulatedModule(BaseModule):
    """A kernel of another architecture, called and timed under an emulator (same interface as ``Module``).

    Each call (and each ``time_evaluator`` evaluation) starts the driver under the emulator: expect tens of
    milliseconds per call on top of the emulated kernel. Timings are marked ``emulated`` and warn.
    """

    emulated = True

    def _open(self) -> None:
        self.emulator = find_emulator(self.target)

    def __call__(self, *arrays: np.ndarray, num_threads: int | None = None) -> None:
        """Run the kernel on ``arrays`` (inputs and outputs, in the order of ``self.args``)."""
        self._check(arrays)
        with self._driver(arrays, self._threads(num_threads)) as driver:
            driver.run(1)
            driver.read_outputs(arrays)

    @contextlib.contextmanager
    def _timed_calls(self, arrays: tuple[np.ndarray, ...], threads: int,
                     fresh_input: bool = False) -> Iterator[Callable[[int], float]]:
        warnings.warn(f"timing kernel '{self.entry}' under {self.emulator.name}: the seconds are the emulator's and "
                      "say nothing about the target CPU", EmulatedTimingWarning, stacklevel=4)
        with self._driver(arrays, threads) as driver:
            yield driver.run

    @contextlib.contextmanager
    def _driver(self, arrays: tuple[np.ndarray, ...], threads: int) -> Iterator[_Driver]:
        with tempfile.TemporaryDirectory(prefix="tensortune-emulated-") as tmp:
            driver = _Driver(self, arrays, threads, Path(tmp))
            try:
                yield driver
            except BaseException:
                driver.process.kill()
                raise
            finally:
                driver.close()


class _Driver:
    """One run of the driver program: the arrays (and zeroed workspaces) in a shared data file, calls on request."""

    def __init__(self, module: EmulatedModule, arrays: tuple[np.ndarray, ...], threads: int, tmp: Path):
        self.module = module
        self.data = tmp / "data"
        self.errors = tmp / "stderr"
        sizes = [a.nbytes for a in arrays] + [int(np.prod(w.shape, dtype=np.int64)) * w.dtype.bytes
                                              for w in module.workspaces]
        self.offsets = [0] * len(sizes)
        end = 0
        for i, size in enumerate(sizes):
            self.offsets[i] = end
            end += -(-size // ALIGNMENT) * ALIGNMENT
        with open(self.data, "wb") as f:
            for a, offset in zip(arrays, self.offsets):
                f.seek(offset)
                f.write(a.tobytes())
            f.truncate(max(end, ALIGNMENT))  # workspaces read as zeros; mmap refuses an empty file
        command = module.emulator.command(str(module.lib_path), module.entry, str(threads), str(self.data),
                                          *map(str, self.offsets))
        with open(self.errors, "wb") as err:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                            text=True)

    def run(self, count: int) -> float:
        """Seconds taken by ``count`` calls of the kernel."""
        try:
            self.process.stdin.write(f"{count}\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # the driver is gone: the empty reply below says why
        reply = self.process.stdout.readline().strip()
        if reply.startswith("error "):
            raise KernelRuntimeError(f"kernel '{self.module.entry}' returned error code {reply.split()[1]}")
        if not reply:
            raise KernelRuntimeError(self._death())
        return float(reply)

    def read_outputs(self, arrays: tuple[np.ndarray, ...]) -> None:
        """Copy what the kernel wrote into the output arrays."""
        for spec, a, offset in zip(self.module.args, arrays, self.offsets):
            if spec.is_output:
                a[...] = np.fromfile(self.data, a.dtype, a.size, offset=offset).reshape(a.shape)

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()  # end of requests: the driver exits
        self.process.wait()
        self.process.stdout.close()

    def _death(self) -> str:
        code = self.process.wait()
        how = (f"signal {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
               else f"exit code {code}")
        lines = self.errors.read_text(errors="replace").strip().splitlines()[-ERROR_LINES:]
        output = "".join(f"\n  {line}" for line in lines)
        return f"kernel '{self.module.entry}' crashed under {self.module.emulator.name} ({how}){output}"
