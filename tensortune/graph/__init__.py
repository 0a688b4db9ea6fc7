"""Whole networks as graphs: the graph IR, ONNX import, a numpy reference executor, graph passes and tasks."""
from .errors import GraphError, InputShapeError, ModelError, Unsupported, UnsupportedModelError
from .interpret import interpret
from .ir import PLAIN, Graph, GraphBuilder, Layout, Node, Value
from .onnx_import import import_onnx
from .ops import TensorType

__all__ = ["GraphError", "Graph", "GraphBuilder", "InputShapeError", "Layout", "ModelError", "Node", "PLAIN",
           "TensorType", "Unsupported", "UnsupportedModelError", "Value", "import_onnx", "interpret"]
