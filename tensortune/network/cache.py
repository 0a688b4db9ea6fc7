"""Build caches of whole networks, on disk under the settings' cache directory (``networks/``).

* The network cache: a model file (or bytes) compiled before with the same shapes, target and tuning log is
  loaded as it was exported, without importing ONNX or compiling anything. Its key covers the model's bytes.
* The program cache: a network's generated source, calls and memory plan, kept by a key of everything that
  decides them, so that a network of the same structure (other weights, or a graph given directly) skips
  lowering and code generation (the C compiler's own cache then returns the library at once); its constants
  are packed again.

Both keys cover the cache format and a fingerprint of tensortune's own code, so an edited schedule never returns
an old network.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..env import settings
from ..graph.ir import Graph
from ..target import Target
from ..version import __version__
from .plan import Call, KernelInfo, Place, Slot

FORMAT = 1


@dataclass(frozen=True)
class CachedProgram:
    source: str
    calls: list
    workspace_bytes: int
    buffers_bytes: int
    kernels: list


@functools.cache
def code_fingerprint() -> str:
    """sha256 over the source files of the tensortune package."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def program_key(g: Graph, target: Target, steps, const_at: dict[int, int]) -> str:
    """The key of the program a ``network_steps`` result generates with its constants at ``const_at`` (offsets by
    ``id(array)``)."""
    calls = []
    for node_name, kd in steps.steps:
        where = []
        for arg in kd.args:
            if arg.const is not None:
                where.append(["const", list(arg.const.shape), arg.const.dtype.name, const_at[id(arg.const)]])
            else:
                r = steps.root[arg.value]
                where.append(["input", steps.input_of[r]] if r in steps.input_of else
                             ["output", steps.output_of[r]] if r in steps.output_of else ["value", r])
        calls.append([node_name, repr(kd.key), where])
    text = json.dumps([FORMAT, __version__, code_fingerprint(), str(target), g.name, calls])
    return hashlib.sha256(text.encode()).hexdigest()


def _path(key: str) -> Path:
    return settings().cache_dir / "networks" / f"{key}.json"


def network_key(model, target: Target, log, shapes) -> str | None:
    """The network cache's key of a model given as a path or bytes (None for other forms: not cached)."""
    if isinstance(model, (bytes, bytearray)):
        data = bytes(model)
    elif isinstance(model, (str, os.PathLike)) and os.path.isfile(model):
        data = Path(model).read_bytes()
    else:
        return None
    log_digest = hashlib.sha256(Path(log).read_bytes()).hexdigest() if log is not None and os.path.isfile(log) else log
    parts = [FORMAT, __version__, code_fingerprint(), str(target), hashlib.sha256(data).hexdigest(), log_digest,
             sorted((k, list(v)) for k, v in (shapes or {}).items())]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


def network_dir(key: str) -> Path:
    return settings().cache_dir / "networks" / key


def load(key: str) -> CachedProgram | None:
    """The cached program of ``key``, or None (absent or unreadable: then it is built again)."""
    try:
        obj = json.loads(_path(key).read_text())
        calls = [Call(c[0], c[1], tuple(Slot(Place(p), o) for p, o in c[2])) for c in obj["calls"]]
        kernels = [KernelInfo(k[0], k[1], tuple(k[2]), k[3], k[4]) for k in obj["kernels"]]
        return CachedProgram(obj["source"], calls, obj["workspace_bytes"], obj["buffers_bytes"], kernels)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def store(key: str, program) -> None:
    """Keep ``program``'s generated parts under ``key`` (written atomically; a failure only loses the cache)."""
    obj = {"source": program.source, "workspace_bytes": program.workspace_bytes,
           "buffers_bytes": program.buffers_bytes,
           "calls": [[c.function, c.node, [[s.place.value, s.offset] for s in c.slots]] for c in program.calls],
           "kernels": [[k.function, k.kind, list(k.nodes), k.flops, k.template] for k in program.kernels]}
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}-", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f)
        os.replace(tmp, path)
    except OSError:
        pass
