"""A compiled network, loaded: numpy arrays in and out, one native call per run, and its export folder.

The folder ``export(path)`` writes and ``load(path)`` reads (no recompiling, no pickle)::

    manifest.json    format version, target, inputs and outputs, sizes, checksums, kernels
    network.so       every kernel and the entry point ``network_run``
    network.c        its source, for reading
    constants.bin    the constants, already packed in the kernels' layouts, laid out as the library reads them
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from ..errors import ArgumentError, TensortuneError
from ..runtime.compiler import cached_library, load_library
from ..runtime.module import ALIGNMENT, ArgSpec, BaseModule, KernelRuntimeError, check_array, entry_point, native_timer
from ..target import ISA, Target
from ..version import __version__
from .backends import ENTRY, PROFILE_ENTRY
from .plan import KernelInfo

FORMAT = 1
MANIFEST, LIBRARY, SOURCE, CONSTANTS = "manifest.json", "network.so", "network.c", "constants.bin"


class NetworkLoadError(TensortuneError, ValueError):
    """An exported network cannot be loaded (missing or damaged files, another format, another machine)."""


class ExportError(TensortuneError, OSError):
    """A compiled network cannot be written where asked."""


@dataclass(frozen=True)
class Manifest:
    """What a compiled network is: everything but the library and the constants themselves."""

    name: str
    target: str
    inputs: tuple[ArgSpec, ...]
    outputs: tuple[ArgSpec, ...]
    constants_bytes: int
    workspace_bytes: int
    kernels: tuple[KernelInfo, ...]
    calls: int
    call_order: tuple[str, ...] = ()  # the node of each call, in order
    buffers_bytes: int = 0  # the workspace's buffers without sharing memory
    version: str = __version__

    def to_json(self, library_sha256: str, constants_sha256: str) -> dict:
        return {
            "format": FORMAT, "tensortune": self.version, "name": self.name, "target": self.target, "entry": ENTRY,
            "inputs": [spec_json(s) for s in self.inputs], "outputs": [spec_json(s) for s in self.outputs],
            "constants_bytes": self.constants_bytes, "workspace_bytes": self.workspace_bytes, "calls": self.calls,
            "call_order": list(self.call_order), "buffers_bytes": self.buffers_bytes,
            "library_sha256": library_sha256, "constants_sha256": constants_sha256,
            "kernels": [{"function": k.function, "kind": k.kind, "nodes": list(k.nodes), "flops": k.flops,
                         "template": k.template} for k in self.kernels],
        }

    @staticmethod
    def from_json(obj: dict) -> "Manifest":
        def spec(d, output):
            return ArgSpec(str(d["name"]), tuple(int(x) for x in d["shape"]), str(d["dtype"]), output)

        return Manifest(str(obj["name"]), str(obj["target"]), tuple(spec(d, False) for d in obj["inputs"]),
                        tuple(spec(d, True) for d in obj["outputs"]), int(obj["constants_bytes"]),
                        int(obj["workspace_bytes"]),
                        tuple(KernelInfo(k["function"], k["kind"], tuple(k["nodes"]), int(k["flops"]), k["template"])
                              for k in obj["kernels"]), int(obj["calls"]), tuple(obj["call_order"]),
                        int(obj["buffers_bytes"]), str(obj["tensortune"]))


def aligned_bytes(n: int) -> np.ndarray:
    """``n`` zero bytes starting on an ``ALIGNMENT``-byte boundary."""
    raw = np.zeros(n + ALIGNMENT, np.uint8)
    off = -raw.ctypes.data % ALIGNMENT
    return raw[off:off + n]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class NetworkModule(BaseModule):
    """A compiled network, on the runtime's module base (``runtime.module.BaseModule``): its library, entry point,
    argument specs (the inputs, then the outputs), source, target, threads and ``time_evaluator``. ``module(x)``
    returns the output (a tuple when there are several); ``module.run({"input": x})`` returns ``{name: array}``.
    Batch size and shapes are those compiled for.

    Calls on one module are serialized (they share the workspace); use one module per thread for parallel runs.
    """

    def __init__(self, library: Path, manifest: Manifest, constants: np.ndarray, source: str = "",
                 num_threads: int | None = None):
        self.manifest = manifest
        if constants.nbytes != manifest.constants_bytes:
            raise NetworkLoadError(f"the constants hold {constants.nbytes} bytes, the network needs "
                                   f"{manifest.constants_bytes}")
        self._constants = constants if constants.ctypes.data % ALIGNMENT == 0 else _realign(constants)
        self._workspace = aligned_bytes(manifest.workspace_bytes)
        self._lock = threading.Lock()
        super().__init__(library, ENTRY, manifest.inputs + manifest.outputs, (), source, num_threads or None,
                         Target.parse(manifest.target))  # 0 or None: the settings' threads

    def _open(self) -> None:
        try:
            self._fn = entry_point(self.lib_path, ENTRY)
        except (OSError, AttributeError) as e:
            raise NetworkLoadError(f"cannot load the network library {self.lib_path}: {e}") from e

    @property
    def library(self) -> Path:
        return self.lib_path

    @property
    def constants(self) -> np.ndarray:
        """The constant arena (bytes, packed as the kernels read them)."""
        return self._constants

    def share_workspace(self, other: "NetworkModule") -> None:
        """Run in ``other``'s workspace (at least as large) under its lock: modules never run at once share one."""
        if other._workspace.nbytes < self.manifest.workspace_bytes:
            raise ArgumentError(f"a workspace of {other._workspace.nbytes} bytes cannot hold this network's "
                                f"{self.manifest.workspace_bytes}")
        self._workspace, self._lock = other._workspace, other._lock

    # ------------------------------------------------------------------ running
    @property
    def inputs(self) -> tuple[ArgSpec, ...]:
        return self.manifest.inputs

    @property
    def outputs(self) -> tuple[ArgSpec, ...]:
        return self.manifest.outputs

    def run(self, feeds: Mapping[str, np.ndarray], num_threads: int | None = None) -> dict[str, np.ndarray]:
        """The outputs by name for the inputs ``feeds`` (by name)."""
        names = [s.name for s in self.inputs]
        unknown = sorted(set(feeds) - set(names))
        missing = [n for n in names if n not in feeds]
        if unknown or missing:
            raise ArgumentError(f"the network takes inputs {names}; " + (f"unknown: {unknown}" if unknown else "")
                                + ("; " if unknown and missing else "") + (f"missing: {missing}" if missing else ""))
        outs = self._execute([feeds[n] for n in names], num_threads)
        return {s.name: a for s, a in zip(self.outputs, outs)}

    def __call__(self, *inputs: np.ndarray, num_threads: int | None = None) -> np.ndarray | tuple[np.ndarray, ...]:
        """The output(s) for ``inputs`` (in the order of ``self.inputs``)."""
        outs = self._execute(list(inputs), num_threads)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _execute(self, inputs: list, num_threads: int | None) -> list[np.ndarray]:
        self._check(tuple(inputs))
        arrays = [np.ascontiguousarray(a) for a in inputs]
        outs = [np.empty(s.shape, s.dtype.numpy) for s in self.outputs]
        pointers = self._pointers(arrays, outs)
        with self._lock:
            rc = self._fn(pointers, self._threads(num_threads))
        if rc != 0:
            raise KernelRuntimeError(f"network '{self.manifest.name}' returned error code {rc}")
        return outs

    def _check(self, arrays: tuple[np.ndarray, ...]) -> None:
        """The inputs (only: a network allocates its outputs) must match the specs compiled for."""
        if len(arrays) != len(self.inputs):
            raise ArgumentError(f"the network takes {len(self.inputs)} input(s) "
                                f"({', '.join(str(s) for s in self.inputs)}), got {len(arrays)}")
        for spec, a in zip(self.inputs, arrays):
            check_array(spec, a, "input", " (the shape compiled for)")

    @contextlib.contextmanager
    def _timed_calls(self, arrays: tuple[np.ndarray, ...], threads: int,
                     fresh_input: bool = False) -> Iterator[Callable[[int], float]]:
        inputs = [np.ascontiguousarray(a) for a in arrays]
        outs = [np.empty(s.shape, s.dtype.numpy) for s in self.outputs]
        yield native_timer(self._fn, self._pointers(inputs, outs), threads, f"network '{self.manifest.name}'",
                           self._lock, rewrite=inputs[0] if fresh_input and inputs else None)

    def profile(self, *inputs: np.ndarray, repeat: int = 10, num_threads: int | None = None) -> list[dict]:
        """Seconds per run of each call (mean of ``repeat`` runs after a warm-up), with its node and kernel."""
        self._check(inputs)
        arrays = [np.ascontiguousarray(a) for a in inputs]
        outs = [np.empty(s.shape, s.dtype.numpy) for s in self.outputs]
        pointers = self._pointers(arrays, outs)
        fn = load_library(self.lib_path)[PROFILE_ENTRY]
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32, ctypes.POINTER(ctypes.c_double)]
        fn.restype = ctypes.c_int32
        calls = [(k, node) for k in self.manifest.kernels for node in k.nodes]
        order = sorted(calls, key=lambda c: self.manifest.call_order.index(c[1])) if self.manifest.call_order else calls
        seconds = (ctypes.c_double * len(order))()
        threads = self._threads(num_threads)
        with self._lock:
            self._fn(pointers, threads)
            for _ in range(repeat):
                fn(pointers, threads, seconds)
        return [{"node": node, "function": k.function, "kind": k.kind, "flops": k.flops,
                 "seconds": seconds[i] / repeat} for i, (k, node) in enumerate(order)]

    def _pointers(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> ctypes.Array:
        data = [a.ctypes.data for a in (*inputs, *outputs, self._constants, self._workspace)]
        return (ctypes.c_void_p * len(data))(*data)

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.inputs)
        outs = ", ".join(str(s) for s in self.outputs)
        return (f"NetworkModule({self.manifest.name}: ({ins}) -> ({outs}), {len(self.manifest.kernels)} kernels, "
                f"{self.manifest.calls} calls, constants {self.manifest.constants_bytes / 2**20:.1f} MiB, "
                f"workspace {self.manifest.workspace_bytes / 2**20:.1f} MiB)")

    # ------------------------------------------------------------------ export
    def export(self, path: str | os.PathLike) -> Path:
        """Write the network as a folder ``load`` reads back (replacing an earlier export at ``path``)."""
        dest = Path(path)
        if dest.exists() and not (dest.is_dir() and (dest / MANIFEST).exists()):
            raise ExportError(f"cannot export to {dest}: it exists and is not an exported network; choose another path")
        parent = dest.parent if str(dest.parent) else Path(".")
        if not parent.is_dir():
            raise ExportError(f"cannot export to {dest}: the directory {parent} does not exist")
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=parent))
        except OSError as e:
            raise ExportError(f"cannot export to {dest}: {e.strerror or e}") from None
        try:
            shutil.copyfile(self.lib_path, tmp / LIBRARY)
            self._constants.tofile(tmp / CONSTANTS)
            (tmp / SOURCE).write_text(self.source)
            meta = self.manifest.to_json(_sha256(tmp / LIBRARY), _sha256(tmp / CONSTANTS))
            (tmp / MANIFEST).write_text(json.dumps(meta, indent=1) + "\n")
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ExportError(f"cannot export to {dest}: {e.strerror or e}") from None
        return dest


def _realign(a: np.ndarray) -> np.ndarray:
    out = aligned_bytes(a.nbytes)
    out[:] = a.view(np.uint8).reshape(-1)
    return out


def spec_json(s: ArgSpec) -> dict:
    return {"name": s.name, "shape": list(s.shape), "dtype": str(s.dtype)}


def load(path: str | os.PathLike, num_threads: int | None = None, constants_pool: dict | None = None
         ) -> NetworkModule:
    """A network exported by ``NetworkModule.export``, ready to run (nothing is compiled); ``tensortune.load``
    reads bucketed folders too (``buckets.load``). ``constants_pool``: constant arenas by checksum, read once for
    all the networks loaded with it."""
    folder = Path(path)
    if not (folder / MANIFEST).is_file():
        raise NetworkLoadError(f"{folder} is not an exported tensortune network (no {MANIFEST}); create one with "
                               "'tensortune compile model.onnx -o PATH'")
    try:
        meta = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise NetworkLoadError(f"{folder / MANIFEST} cannot be read: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise NetworkLoadError(f"{folder} has format {meta.get('format') if isinstance(meta, dict) else '?'}, this "
                               f"tensortune reads format {FORMAT}; recompile the model")
    try:
        manifest = Manifest.from_json(meta)
    except (KeyError, TypeError, ValueError) as e:
        raise NetworkLoadError(f"{folder / MANIFEST} is malformed ({e}); recompile the model") from None
    _check_machine(Target.parse(manifest.target), folder)
    for name, key in ((LIBRARY, "library_sha256"), (CONSTANTS, "constants_sha256")):
        if not (folder / name).is_file():
            raise NetworkLoadError(f"{folder} lacks {name}; export the network again")
        if _sha256(folder / name) != meta.get(key):
            raise NetworkLoadError(f"{folder / name} does not match its checksum in the manifest (damaged or "
                                   "replaced); export the network again")
    # loaded from the cache by content, so that a network exported again to the same path is never confused
    # with the library this process loaded from there before
    library = cached_library(meta["library_sha256"], (folder / LIBRARY).read_bytes())
    constants = (constants_pool or {}).get(meta["constants_sha256"])
    if constants is None:
        constants = aligned_bytes(manifest.constants_bytes)
        with open(folder / CONSTANTS, "rb") as f:
            if f.readinto(memoryview(constants)) != manifest.constants_bytes:
                raise NetworkLoadError(f"{folder / CONSTANTS} is truncated; export the network again")
        if constants_pool is not None:
            constants_pool[meta["constants_sha256"]] = constants
    source = (folder / SOURCE).read_text() if (folder / SOURCE).is_file() else ""
    return NetworkModule(library, manifest, constants, source, num_threads)


_ISA_ORDER = {ISA.SCALAR: 0, ISA.NEON: 1, ISA.AVX2: 1, ISA.AVX512: 2}


def random_inputs(module: NetworkModule, seed: int = 0) -> list[np.ndarray]:
    """Inputs of ``module``'s shapes and dtypes: uniform in [-1, 1) for floats, zeros for integers."""
    rng = np.random.default_rng(seed)
    out = []
    for spec in module.inputs:
        dt = spec.dtype.numpy
        out.append(rng.uniform(-1, 1, spec.shape).astype(dt) if spec.dtype.is_float else np.zeros(spec.shape, dt))
    return out


def runs_here(target: Target) -> bool:
    """Whether this machine runs code compiled for ``target`` (same architecture, no wider ISA)."""
    host = Target.host()
    return target.arch == host.arch and (target.isa is host.isa or _ISA_ORDER[target.isa] <= _ISA_ORDER[host.isa])


def _check_machine(target: Target, folder: Path) -> None:
    host = Target.host()
    if not runs_here(target):
        raise NetworkLoadError(f"{folder} was compiled for '{target}', which this machine ('{host}') cannot run; "
                               "compile the model again here")
