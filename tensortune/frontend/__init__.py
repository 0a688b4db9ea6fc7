"""Reading models into the graph IR: ONNX (``onnx.import_onnx``)."""
from .onnx import SUPPORTED_OPERATORS, import_onnx, load_model

__all__ = ["SUPPORTED_OPERATORS", "import_onnx", "load_model"]
