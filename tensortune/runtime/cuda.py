"""Running CUDA kernels: load a cubin, launch it on numpy arrays, time it with CUDA events.

The driver API is reached through NVIDIA's maintained binding, ``cuda-python`` (``cuda.bindings.driver``;
``pip install "tensortune[cuda]"``), imported on first use only: tensortune imports and builds CUDA
kernels without it (and without a GPU). The timed loop of launches is native code (a small C library
that calls the driver's ``cuLaunchKernel``), so Python's per-launch overhead is not measured; CUDA events
around it give the GPU's time.

A kernel's arrays live on the GPU for the life of its ``CudaModule``: a call copies the inputs (and the
output, so that elements the kernel forgets keep the caller's poison) to the GPU, launches once and copies
the output back; a timing copies once, then launches repeatedly.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import TensortuneError
from ..lower.gpu import Launch
from ..target import ISA, Target
from .compiler import compile_shared, load_library
from .module import ArgSpec, BaseModule, KernelRuntimeError

INSTALL_HINT = 'pip install "tensortune[cuda]" (NVIDIA\'s cuda-python), on a machine with an NVIDIA GPU and driver'
DEFAULT_SHARED_BYTES = 48 << 10  # what a launch may use without the kernel opting in
#: driver errors after which the context is unusable (illegal address, trap, misaligned access, launch failure...)
STICKY_ERRORS = frozenset({700, 714, 715, 716, 717, 718, 719})


class CudaUnavailableError(TensortuneError, RuntimeError):
    """CUDA kernels cannot run here: no cuda-python binding, no driver, or no GPU."""


class CudaLaunchError(KernelRuntimeError):
    """A CUDA call of a kernel failed. ``ends_process``: the error is sticky (the context is lost), so a
    measuring process must be replaced before it runs another kernel."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code
        self.ends_process = code in STICKY_ERRORS


def _binding() -> Any:
    """``cuda.bindings.driver`` (cuda-python 12.6 and later), or the older ``cuda.cuda``."""
    for name in ("cuda.bindings.driver", "cuda.cuda"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise CudaUnavailableError(f"running CUDA kernels needs NVIDIA's cuda-python binding; {INSTALL_HINT}")


class _Driver:
    """The few driver calls tensortune makes, each checked (a ``CudaLaunchError`` carrying the driver's code)."""

    def __init__(self) -> None:
        self.cu = _binding()
        try:
            initialised = self.cu.cuInit(0)
        except RuntimeError as e:  # the binding found no driver library (libcuda) to load: no NVIDIA driver
            raise CudaUnavailableError(f"the CUDA driver library cannot be loaded ({e}); {INSTALL_HINT}") from e
        self.check(initialised, "cuInit")
        count = self.check(self.cu.cuDeviceGetCount(), "cuDeviceGetCount")
        if int(count) < 1:
            raise CudaUnavailableError("the CUDA driver reports no GPU on this machine")
        self.device = self.check(self.cu.cuDeviceGet(0), "cuDeviceGet")
        self.context = self.check(self.cu.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self.check(self.cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def check(self, result: Any, what: str) -> Any:
        """The value of a binding call's ``(error, value...)`` result; raises on an error."""
        err, *values = result if isinstance(result, tuple) else (result,)
        code = int(err.value if hasattr(err, "value") else err)
        if code != 0:
            name = getattr(err, "name", str(code))
            raise CudaLaunchError(f"{what} failed: {name} ({code})", code)
        return values[0] if len(values) == 1 else tuple(values)

    def name(self) -> str:
        raw = self.check(self.cu.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        return bytes(raw).split(b"\0", 1)[0].decode(errors="replace")

    def attribute(self, name: str) -> int:
        attr = getattr(self.cu.CUdevice_attribute, name)
        return int(self.check(self.cu.cuDeviceGetAttribute(attr, self.device), f"cuDeviceGetAttribute({name})"))


@functools.cache
def driver() -> _Driver:
    """The driver, initialised once per process (its primary context on GPU 0 made current)."""
    return _Driver()


def gpu_available() -> tuple[bool, str]:
    """(whether CUDA kernels can run here, why not): for tests and benchmarks that need a GPU."""
    try:
        d = driver()
        return True, d.name()
    except (CudaUnavailableError, CudaLaunchError) as e:
        return False, str(e)


def device_name() -> str:
    """The name of GPU 0 (``NVIDIA H200``)."""
    return driver().name()


# ------------------------------------------------------------------------------------------ timed loop

LAUNCH_LOOP_SOURCE = r"""
#include <stdint.h>
#include <dlfcn.h>

typedef int (*tt_launch_fn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                            void**, void**);
typedef int (*tt_record_fn)(void*, void*);
static tt_launch_fn tt_launch;
static tt_record_fn tt_record;

/* 0 once the driver's functions are found, else -1 (no libcuda.so.1) or -2 (a symbol is missing). */
int tt_cuda_loop_init(void) {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return -1;
    tt_launch = (tt_launch_fn)dlsym(h, "cuLaunchKernel");
    tt_record = (tt_record_fn)dlsym(h, "cuEventRecord");
    return tt_launch && tt_record ? 0 : -2;
}

/* Record `start`, launch f `count` times on the default stream, record `stop`; the first nonzero driver
   error code, else 0. dims: grid x, y, z, block x, y, z. */
int tt_cuda_launch_loop(void* f, const uint32_t* dims, uint32_t shared, void** params, int64_t count,
                        void* start, void* stop) {
    int rc = tt_record(start, 0);
    if (rc) return rc;
    for (int64_t i = 0; i < count; i++) {
        rc = tt_launch(f, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], shared, 0, params, 0);
        if (rc) return rc;
    }
    return tt_record(stop, 0);
}
"""


@functools.cache
def _launch_loop() -> Callable[..., int]:
    host = Target.host()
    lib = load_library(compile_shared(LAUNCH_LOOP_SOURCE, Target(ISA.SCALAR, host.num_cores, host.arch)))
    init = lib.tt_cuda_loop_init
    init.restype = ctypes.c_int
    if init() != 0:
        raise CudaUnavailableError("the native launch loop cannot find the CUDA driver (libcuda.so.1)")
    loop = lib.tt_cuda_launch_loop
    loop.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint32,
                     ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    loop.restype = ctypes.c_int
    return loop


# ------------------------------------------------------------------------------------------ module

class CudaModule(BaseModule):
    """A CUDA kernel (a cubin) loaded on GPU 0, with its arrays' device memory; ``close()`` frees both."""

    def __init__(self, lib_path: Path | str, entry: str, args: tuple[ArgSpec, ...],
                 workspaces: tuple[ArgSpec, ...] = (), source: str = "", num_threads: int | None = None,
                 target: Target | None = None, *, launch: Launch):
        self.launch = launch
        self._drv: _Driver | None = None
        self._memory: list[Any] = []
        self._module = None
        super().__init__(lib_path, entry, args, workspaces, source, num_threads, target)

    def _open(self) -> None:
        d = self._drv = driver()
        cu = d.cu
        self._module = d.check(cu.cuModuleLoadData(Path(self.lib_path).read_bytes()), "cuModuleLoadData")
        self._function = d.check(cu.cuModuleGetFunction(self._module, self.entry.encode()), "cuModuleGetFunction")
        shared = self.launch.shared_bytes
        if shared > DEFAULT_SHARED_BYTES:
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            d.check(cu.cuFuncSetAttribute(self._function, attr, shared), "cuFuncSetAttribute(shared memory)")
        for spec in self.args + self.workspaces:
            nbytes = max(1, int(np.prod(spec.shape, dtype=np.int64)) * spec.dtype.bytes)
            ptr = d.check(cu.cuMemAlloc(nbytes), "cuMemAlloc")
            self._memory.append(ptr)
            d.check(cu.cuMemsetD8(ptr, 0, nbytes), "cuMemsetD8")
        # kernel parameters: an array of pointers, each to a device pointer (what cuLaunchKernel copies)
        self._pointer_values = (ctypes.c_uint64 * len(self._memory))(*(int(p) for p in self._memory))
        self._params = (ctypes.c_void_p * max(1, len(self._memory)))(
            *(ctypes.addressof(self._pointer_values) + 8 * i for i in range(len(self._memory))))
        self._dims = (ctypes.c_uint32 * 6)(*self.launch.grid, *self.launch.block)

    def close(self) -> None:
        """Free the device memory and unload the kernel (it cannot be called again)."""
        d = self._drv
        if d is None:
            return
        self._drv = None
        for ptr in self._memory:
            d.cu.cuMemFree(ptr)
        self._memory = []
        if self._module is not None:
            d.cu.cuModuleUnload(self._module)
            self._module = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def _upload(self, arrays: tuple[np.ndarray, ...]) -> None:
        d = self._live()
        for spec, a, ptr in zip(self.args, arrays, self._memory):
            d.check(d.cu.cuMemcpyHtoD(ptr, a.ctypes.data, a.nbytes), f"copying '{spec.name}' to the GPU")

    def _download(self, arrays: tuple[np.ndarray, ...]) -> None:
        d = self._live()
        for spec, a, ptr in zip(self.args, arrays, self._memory):
            if spec.is_output:
                d.check(d.cu.cuMemcpyDtoH(a.ctypes.data, ptr, a.nbytes), f"copying '{spec.name}' from the GPU")

    def _live(self) -> _Driver:
        if self._drv is None:
            raise KernelRuntimeError(f"kernel '{self.entry}' was closed")
        return self._drv

    def _launch(self) -> None:
        d = self._live()
        g, b = self.launch.grid, self.launch.block
        d.check(d.cu.cuLaunchKernel(self._function, *g, *b, self.launch.shared_bytes, 0,
                                    ctypes.addressof(self._params), 0), f"launching kernel '{self.entry}'")

    def _synchronize(self) -> None:
        d = self._live()
        d.check(d.cu.cuCtxSynchronize(), f"running kernel '{self.entry}'")

    def __call__(self, *arrays: np.ndarray, num_threads: int | None = None) -> None:
        """Run the kernel on ``arrays`` (inputs and outputs, in the order of ``self.args``)."""
        self._check(arrays)
        self._upload(arrays)
        self._launch()
        self._synchronize()
        self._download(arrays)

    @contextlib.contextmanager
    def _timed_calls(self, arrays: tuple[np.ndarray, ...], threads: int,
                     fresh_input: bool = False) -> Iterator[Callable[[int], float]]:
        d = self._live()
        cu = d.cu
        self._upload(arrays)
        loop = _launch_loop()
        start = d.check(cu.cuEventCreate(0), "cuEventCreate")
        stop = d.check(cu.cuEventCreate(0), "cuEventCreate")
        function = int(self._function) if not isinstance(self._function, int) else self._function

        def run(count: int) -> float:
            rc = loop(function, self._dims, self.launch.shared_bytes, self._params, count, int(start), int(stop))
            if rc != 0:
                raise CudaLaunchError(f"launching kernel '{self.entry}' failed with driver error {rc}", rc)
            d.check(cu.cuEventSynchronize(stop), f"running kernel '{self.entry}'")
            ms = d.check(cu.cuEventElapsedTime(start, stop), "cuEventElapsedTime")
            return float(ms) * 1e-3

        try:
            yield run
        finally:
            cu.cuEventDestroy(start)
            cu.cuEventDestroy(stop)
