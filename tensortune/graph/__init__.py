"""The graph IR of whole networks: values with static types and layouts, nodes applying operators (whose kinds
``tensortune.operators`` defines), constants, and a numpy reference executor."""
from .errors import GraphError, InputShapeError, ModelError, NetworkCompileError, Unsupported, UnsupportedModelError
from .interpret import interpret
from .ir import PLAIN, Graph, GraphBuilder, Layout, Node, TensorType, Value
from .op import LayoutRule, Op, Pattern

__all__ = ["Graph", "GraphBuilder", "GraphError", "InputShapeError", "Layout", "LayoutRule", "ModelError",
           "NetworkCompileError", "Node", "Op", "PLAIN", "Pattern", "TensorType", "Unsupported",
           "UnsupportedModelError", "Value", "interpret"]
