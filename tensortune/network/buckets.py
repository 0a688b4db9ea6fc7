"""One module for several sizes of a symbolic dimension (a transformer's sequence length, for serving).

``compile_buckets(model, {"sequence": [32, 64, 128]})`` compiles the model once per size (each cached like any
``compile``). A run takes the size of its inputs' ``sequence`` axes, pads them at the end to the smallest size that
holds it (``pad_values``, default 0: the padding token and an attention mask that hides it), runs that size's
module and crops the outputs' ``sequence`` axes back. Padding at the end leaves the real positions' outputs as
they were only where the model hides the padding from them: an attention mask input (BERT's), a causal mask
(GPT-2's), or per-token layers; that is the model's contract, as for any padded batch.

The sizes share what is equal between them: the constants (one copy in memory and on disk when every size
packs them alike, as transformers' dense layers are) and one workspace of the largest size (runs are serialized).

The folder ``export`` writes and ``load`` reads::

    buckets.json    format, the symbol and its sizes, the padded axes of each input and output, pad values
    <size>/         each size's compiled network (``module.py``'s folder), identical constants hard-linked
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..errors import ArgumentError, TensortuneError
from ..frontend.onnx import import_onnx, load_model
from ..graph.errors import NetworkCompileError
from ..runtime.module import ALIGNMENT
from .module import CONSTANTS, ExportError, NetworkLoadError, NetworkModule, aligned_bytes
from .module import load as load_network

BUCKETS = "buckets.json"
FORMAT = 1


class BucketError(TensortuneError, ValueError):
    """An input does not fit the module's sizes: longer than the largest, or its padded axes disagree."""


@dataclass(frozen=True)
class BucketLayout:
    """What pads and crops: ``symbol``'s ``sizes`` (ascending), the axes of each input and output that have the
    symbol's size, and the value each input is padded with."""

    symbol: str
    sizes: tuple[int, ...]
    input_axes: Mapping[str, tuple[int, ...]]
    output_axes: Mapping[str, tuple[int, ...]]
    pad_values: Mapping[str, float]

    def to_json(self) -> dict:
        return {"format": FORMAT, "symbol": self.symbol, "sizes": list(self.sizes),
                "input_axes": {k: list(v) for k, v in self.input_axes.items()},
                "output_axes": {k: list(v) for k, v in self.output_axes.items()},
                "pad_values": dict(self.pad_values)}

    @staticmethod
    def from_json(obj: dict) -> "BucketLayout":
        return BucketLayout(str(obj["symbol"]), tuple(int(s) for s in obj["sizes"]),
                            {k: tuple(int(a) for a in v) for k, v in obj["input_axes"].items()},
                            {k: tuple(int(a) for a in v) for k, v in obj["output_axes"].items()},
                            {k: float(v) for k, v in obj["pad_values"].items()})


class BucketedModule:
    """Modules of one network for several sizes of one symbolic dimension, run as one (see the module's doc).
    ``module.run(feeds)`` returns ``{name: array}`` with the inputs' own size; ``module(*inputs)`` the output(s)."""

    def __init__(self, layout: BucketLayout, modules: Mapping[int, NetworkModule]):
        self.layout = layout
        self.modules = {s: modules[s] for s in layout.sizes}
        _share_memory(list(self.modules.values()))  # their constants are shared where they were compiled or loaded

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.layout.sizes

    @property
    def inputs(self):
        """The largest size's input specs (the padded axes take any size up to it)."""
        return self.modules[self.sizes[-1]].inputs

    @property
    def outputs(self):
        return self.modules[self.sizes[-1]].outputs

    def bucket_for(self, length: int) -> int:
        """The size that runs inputs of ``length`` along the padded axes: the smallest that holds it."""
        for s in self.sizes:
            if length <= s:
                return s
        raise BucketError(f"the inputs have {self.layout.symbol} = {length}, more than the largest size compiled "
                          f"({self.sizes[-1]}); compile with a size of at least {length}, e.g. --buckets "
                          f"{self.layout.symbol}={','.join(map(str, self.sizes + (length,)))}")

    def length_of(self, feeds: Mapping[str, np.ndarray]) -> int:
        """The inputs' size along their padded axes (all must agree)."""
        seen: dict[int, str] = {}
        for name, axes in self.layout.input_axes.items():
            a = feeds.get(name)
            if a is None:
                continue
            a = np.asarray(a)
            for ax in axes:
                if ax >= a.ndim:
                    raise ArgumentError(f"input '{name}' has shape {list(a.shape)}; the network pads its axis {ax} "
                                        f"({self.layout.symbol})")
                seen.setdefault(int(a.shape[ax]), f"'{name}' axis {ax}")
        if not seen:
            raise ArgumentError(f"the network takes inputs {[s.name for s in self.inputs]}; none of those padded "
                                f"along {self.layout.symbol} ({sorted(self.layout.input_axes)}) was given")
        if len(seen) != 1:
            raise BucketError(f"the inputs disagree on {self.layout.symbol}: "
                              + ", ".join(f"{where} has {n}" for n, where in sorted(seen.items())))
        return next(iter(seen))

    def run(self, feeds: Mapping[str, np.ndarray], num_threads: int | None = None) -> dict[str, np.ndarray]:
        """The outputs by name for ``feeds`` (by name), each padded axis the inputs' size."""
        length = self.length_of(feeds)
        size = self.bucket_for(length)
        padded = {name: self._pad(name, np.asarray(a), size) for name, a in feeds.items()}
        outs = self.modules[size].run(padded, num_threads)
        return {name: self._crop(name, y, length) for name, y in outs.items()}

    def __call__(self, *inputs: np.ndarray, num_threads: int | None = None):
        names = [s.name for s in self.inputs]
        if len(inputs) != len(names):
            raise ArgumentError(f"the network takes {len(names)} input(s) ({', '.join(names)}), got {len(inputs)}")
        outs = list(self.run(dict(zip(names, inputs)), num_threads).values())
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _pad(self, name: str, a: np.ndarray, size: int) -> np.ndarray:
        axes = self.layout.input_axes.get(name, ())
        if not axes or all(a.shape[ax] == size for ax in axes):
            return a
        width = [(0, size - a.shape[ax] if ax in axes else 0) for ax in range(a.ndim)]
        return np.pad(a, width, constant_values=np.asarray(self.layout.pad_values.get(name, 0), a.dtype))

    def _crop(self, name: str, y: np.ndarray, length: int) -> np.ndarray:
        axes = self.layout.output_axes.get(name, ())
        if not axes:
            return y
        return np.ascontiguousarray(y[tuple(slice(0, length) if ax in axes else slice(None) for ax in range(y.ndim))])

    def __repr__(self) -> str:
        first = self.modules[self.sizes[0]]
        return (f"BucketedModule({first.manifest.name}: {self.layout.symbol} in {list(self.sizes)}, "
                f"inputs {', '.join(s.name for s in self.inputs)})")

    def close(self) -> None:
        for m in self.modules.values():
            m.close()

    def export(self, path: str | os.PathLike) -> Path:
        """Write every size and the layout as one folder ``load`` reads (replacing an earlier export)."""
        dest = Path(path)
        if dest.exists() and not (dest.is_dir() and (dest / BUCKETS).is_file()):
            raise ExportError(f"cannot export to {dest}: it exists and is not an exported bucketed network; choose "
                              "another path")
        parent = dest.parent if str(dest.parent) else Path(".")
        if not parent.is_dir():
            raise ExportError(f"cannot export to {dest}: the directory {parent} does not exist")
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=parent))
        try:
            written: dict[int, Path] = {}  # id of a constants array -> its file
            for size, m in self.modules.items():
                folder = m.export(tmp / str(size))
                first = written.setdefault(id(m.constants), folder / CONSTANTS)
                if first != folder / CONSTANTS:  # shared in memory: one file, hard-linked where the system can
                    os.remove(folder / CONSTANTS)
                    try:
                        os.link(first, folder / CONSTANTS)
                    except OSError:
                        shutil.copyfile(first, folder / CONSTANTS)
            (tmp / BUCKETS).write_text(json.dumps(self.layout.to_json(), indent=1) + "\n")
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ExportError(f"cannot export to {dest}: {e.strerror or e}") from None
        return dest


def compile_buckets(model, sizes: Mapping[str, Sequence[int]], target=None, log: str | os.PathLike | None = None,
                    shapes: Mapping[str, Sequence[int] | int] | None = None, num_threads: int | None = None,
                    pad_values: Mapping[str, float] | None = None) -> BucketedModule:
    """``model`` (an ONNX path, bytes or ``ModelProto``) compiled for each size of one symbolic dimension of its
    inputs, e.g. ``sizes={"sequence": [32, 64, 128]}``; ``shapes`` gives its other dynamic dimensions, ``log`` its
    tuned configs (each size uses the records of its own shapes), ``pad_values`` what each input is padded with
    (default 0)."""
    from ..build import resolve_target
    from .compile_model import load_program, network_program
    from .program import ConstantArena
    from .tuned import TunedKernels

    if len(sizes) != 1:
        raise BucketError(f"give the sizes of exactly one symbolic dimension, got {sorted(sizes) or 'none'}")
    ((symbol, wanted),) = sizes.items()
    ordered = tuple(sorted({int(s) for s in wanted}))
    if not ordered or ordered[0] < 1:
        raise BucketError(f"the sizes of '{symbol}' must be positive integers, got {list(wanted)}")
    if shapes and symbol in shapes:
        raise BucketError(f"'{symbol}' is given both sizes and a shape; give it only sizes")
    proto = load_model(model)
    input_axes = _symbol_axes(proto.graph.input, symbol)
    if not input_axes:
        symbols = sorted({d.dim_param for i in proto.graph.input for d in i.type.tensor_type.shape.dim
                          if d.dim_param})
        raise BucketError(f"no input of the model has the symbolic dimension '{symbol}'; its inputs' symbolic "
                          f"dimensions are {', '.join(symbols) or 'none'} (export it with a dynamic axis)")
    unknown = sorted(set(pad_values or {}) - set(input_axes))
    if unknown:
        raise BucketError(f"pad values given for {unknown}, which have no '{symbol}' axis; padded inputs: "
                          f"{sorted(input_axes)}")
    tgt = resolve_target(target)
    choose = TunedKernels(log, tgt) if log is not None else None
    arena = ConstantArena(by_content=True)  # the sizes' equal constants (all their weights, often) stored once
    programs = [network_program(proto, tgt, choose, {**(shapes or {}), symbol: s}, arena=arena) for s in ordered]
    whole = replace(programs[0], constants=arena.constants, constants_bytes=arena.top)
    packed = whole.constant_arena()
    if packed.ctypes.data % ALIGNMENT:  # aligned once here, or each module would realign a copy of its own
        aligned = aligned_bytes(packed.nbytes)
        aligned[:] = packed
        packed = aligned
    modules = {s: load_program(replace(p, constants=whole.constants, constants_bytes=whole.constants_bytes), tgt,
                               num_threads, packed) for s, p in zip(ordered, programs)}
    for spec in modules[ordered[0]].inputs:  # an integer input (token ids) takes an integer pad value
        value = (pad_values or {}).get(spec.name)
        if value is not None and not spec.dtype.is_float and float(value) != int(value):
            raise BucketError(f"input '{spec.name}' is {spec.dtype}: pad it with an integer, not {value}")
    output_axes = _output_axes(proto, shapes or {}, modules, symbol)
    layout = BucketLayout(symbol, ordered, input_axes, output_axes,
                          {k: float(v) for k, v in (pad_values or {}).items()})
    return BucketedModule(layout, modules)


def load(path: str | os.PathLike, num_threads: int | None = None) -> NetworkModule | BucketedModule:
    """A compiled network's folder, ready to run: one exported by ``BucketedModule.export`` or by
    ``NetworkModule.export`` (``tensortune.load``)."""
    if (Path(path) / BUCKETS).is_file():
        return load_buckets(path, num_threads)
    return load_network(path, num_threads)


def load_buckets(path: str | os.PathLike, num_threads: int | None = None) -> BucketedModule:
    """A bucketed network exported by ``BucketedModule.export`` (``tensortune.load`` calls this for its folders)."""
    folder = Path(path)
    try:
        meta = json.loads((folder / BUCKETS).read_text())
        if meta.get("format") != FORMAT:
            raise NetworkLoadError(f"{folder} has bucket format {meta.get('format')}, this tensortune reads "
                                   f"{FORMAT}; recompile the model")
        layout = BucketLayout.from_json(meta)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise NetworkLoadError(f"{folder / BUCKETS} cannot be read ({e}); export the network again") from None
    pool: dict[str, np.ndarray] = {}
    return BucketedModule(layout, {s: load_network(folder / str(s), num_threads, pool) for s in layout.sizes})


def _symbol_axes(values, symbol: str) -> dict[str, tuple[int, ...]]:
    axes = {v.name: tuple(k for k, d in enumerate(v.type.tensor_type.shape.dim) if d.dim_param == symbol)
            for v in values}
    return {k: v for k, v in axes.items() if v}


def _output_axes(proto, shapes: Mapping, modules: Mapping[int, NetworkModule], symbol: str) -> dict[str, tuple[int, ...]]:
    """The axes of each output that have the symbol's size: those whose size follows it from one size to the next
    (exporters name output dimensions unreliably). With one size, the model's graph is imported once more at the
    next size to compare with (its declared output dimensions where that import fails). An axis that grows
    otherwise (twice the length) cannot be cropped: an error."""
    sizes = sorted(modules)
    shapes_at = {s: {o.name: o.shape for o in modules[s].outputs} for s in sizes}
    if len(sizes) == 1:
        probe = sizes[0] + 1
        try:
            g = import_onnx(proto, {**shapes, symbol: probe})
        except TensortuneError:
            return _symbol_axes(proto.graph.output, symbol)
        shapes_at[probe] = {name: g.values[name].shape for name in g.outputs}
        sizes.append(probe)
    axes: dict[str, tuple[int, ...]] = {}
    for name, first in shapes_at[sizes[0]].items():
        varying = [ax for ax in range(len(first)) if len({shapes_at[s][name][ax] for s in sizes}) > 1]
        bad = [ax for ax in varying if any(shapes_at[s][name][ax] != s for s in sizes)]
        if bad:
            raise NetworkCompileError(
                f"output '{name}' axis {bad[0]} has sizes {[shapes_at[s][name][bad[0]] for s in sizes]} for "
                f"{symbol} = {sizes}: not the length itself, so a padded run's output cannot be cropped back; "
                f"compile each length on its own (shapes={{'{symbol}': n}})")
        if varying:
            axes[name] = tuple(varying)
    return axes


def _share_memory(modules: list[NetworkModule]) -> None:
    """One workspace (the largest) and one lock for all sizes: a run uses one of them at a time."""
    largest = max(modules, key=lambda m: m.manifest.workspace_bytes)
    for m in modules:
        if m is not largest:
            m.share_workspace(largest)
