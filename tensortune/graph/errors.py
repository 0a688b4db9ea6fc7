"""Errors of reading a model and of compiling a graph: each says what was wrong and how to fix it."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TensortuneError


class ModelError(TensortuneError, ValueError):
    """A model cannot be read: not an ONNX file, truncated, or malformed (a node reads an undefined value)."""


class InputShapeError(TensortuneError, ValueError):
    """A graph input has a dynamic dimension and no static shape was given for it."""


class GraphError(TensortuneError, ValueError):
    """A graph breaks a structural rule (a value defined twice, read before it is defined, a wrong shape)."""


@dataclass(frozen=True)
class Unsupported:
    """One node tensortune cannot compile, and why."""

    op_type: str
    name: str
    opset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.op_type} '{self.name}' (opset {self.opset}): {self.reason}"


class UnsupportedModelError(TensortuneError, ValueError):
    """The model uses operators or attributes tensortune does not support; lists every such node."""

    def __init__(self, nodes: list[Unsupported]):
        self.nodes = tuple(nodes)
        listing = "; ".join(str(n) for n in nodes)
        super().__init__(f"the model has {len(nodes)} unsupported node(s): {listing}")


class NetworkCompileError(TensortuneError, ValueError):
    """A graph node cannot be compiled (a kind of node, input or target the kernels do not handle); the message
    says which and what to do."""
