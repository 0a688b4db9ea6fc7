"""The operators of the graph IR: one module per operator family, each declaring everything about its operators
once (``graph.op`` lists what): their attributes, ONNX converters per opset, shape and dtype inference, numpy
reference, fusion pattern, layout rule, kernel and default schedule, and the tuning tasks that apply.

Importing this package imports every module in it, which registers their ONNX converters; a new operator is a new
module here (``softplus.py`` is an elementwise one, ``layer_norm.py`` a new kind) and needs no other edit (the
names below are re-exported for convenience; an operator added later is imported from its module).
Shared pieces: ``kernel`` (kernel arguments, reads of blocked storage, default schedules), ``map_op`` (operators
computed element by element, which fuse into one another), ``epilogue`` (the stages of a fused epilogue), ``math``
(the functions formulas use), ``onnx_convert`` (the converter registry), ``window`` (windowed operators' geometry).
"""
import importlib as _importlib
import pkgutil as _pkgutil

for _module in _pkgutil.iter_modules(__path__):
    _importlib.import_module(f"{__name__}.{_module.name}")

from .constants import Cast  # noqa: E402
from .conv import Conv, ConvLike  # noqa: E402
from .elementwise import (Add, Binary, Clip, Div, Elementwise, EpilogueStep, HardSigmoid, HardSwish,  # noqa: E402
                          LeakyRelu, Mul, PRelu, Relu, Sigmoid, Sub, Tanh, Unary, WithEpilogue)
from .expansion import ExpandDepthwise  # noqa: E402
from .fused import Fused  # noqa: E402
from .indexing import Gather  # noqa: E402
from .map_op import MapOp  # noqa: E402
from .matmul import Dense, MatMul  # noqa: E402
from .movement import Concat, Pad, PadMode, Slice, Transpose  # noqa: E402
from .normalization import LRN, BatchNorm  # noqa: E402
from .onnx_convert import supported_operators  # noqa: E402
from .pool import Pool, PoolKind  # noqa: E402
from .reshape import Identity, Relayout, Reshape  # noqa: E402
from .softmax import Softmax  # noqa: E402

__all__ = ["Add", "BatchNorm", "Binary", "Cast", "Clip", "Concat", "Conv", "ConvLike", "Dense", "Div", "Elementwise",
           "EpilogueStep", "ExpandDepthwise", "Fused", "Gather", "HardSigmoid", "HardSwish", "Identity", "LRN",
           "LeakyRelu", "MapOp", "MatMul", "Mul", "PRelu", "Pad", "PadMode", "Pool", "PoolKind", "Relayout", "Relu",
           "Reshape", "Sigmoid", "Slice", "Softmax", "Sub", "Tanh", "Transpose", "Unary", "WithEpilogue",
           "supported_operators"]
