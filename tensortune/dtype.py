"""Scalar data types of tensors and expressions: their sizes, C types, numpy types and comparison tolerances.

numpy has no bfloat16; ``ml_dtypes`` provides the numpy type (``ml_dtypes.bfloat16``), so a bfloat16 tensor is a
numpy array like any other. In generated C a bfloat16 element is stored as its 16 bits (``uint16_t``), converted to
and from float32 by the code generator; float16 is C's ``_Float16``.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """How close a result must be to its reference: ``|out - expected| <= atol * scale + rtol * |expected|``, with
    ``scale`` the largest ``|expected|`` (at least 1), so that one rule fits small and large outputs."""

    rtol: float
    atol: float

    def check(self, out: np.ndarray, expected: np.ndarray) -> tuple[bool, float]:
        """Whether ``out`` is close enough to ``expected``, and the allowed absolute error (NaN never matches)."""
        scale = max(1.0, float(np.max(np.abs(np.asarray(expected, np.float64)), initial=0.0)))
        allowed = self.atol * scale
        ok = bool(np.allclose(np.asarray(out, np.float64), np.asarray(expected, np.float64), rtol=self.rtol,
                              atol=allowed))
        return ok, allowed


class DType(Enum):
    """A scalar type. ``bool`` is the type of comparisons and of boolean tensors (one byte per element, 0 or 1)."""

    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"
    int8 = "int8"
    uint8 = "uint8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    bool = "bool"

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def bytes(self) -> int:
        return _BYTES[self]

    @property
    def c_type(self) -> str:
        return _C_TYPES[self]

    @property
    def numpy(self) -> np.dtype:
        if self is DType.bfloat16:
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.value)

    @property
    def tolerance(self) -> Tolerance:
        """How close a kernel's result must be to its reference in this type (exact for integers and bools)."""
        return _TOLERANCES[self]

    @staticmethod
    def of(value: "DType | str | np.dtype | type") -> "DType":
        """Convert a dtype given as DType, a string or a numpy dtype (``ml_dtypes.bfloat16`` too)."""
        if isinstance(value, DType):
            return value
        try:
            return DType(value if isinstance(value, str) and value == "bfloat16" else np.dtype(value).name)
        except (TypeError, ValueError):
            pass
        from .errors import DTypeError

        names = ", ".join(d.value for d in DType)
        raise DTypeError(f"unsupported dtype {value!r}; use one of {names}")

    def __str__(self) -> str:
        return self.value


_FLOATS = frozenset({DType.float16, DType.bfloat16, DType.float32, DType.float64})
_INTS = frozenset({DType.int8, DType.uint8, DType.int16, DType.int32, DType.int64})
_BYTES = {DType.float16: 2, DType.bfloat16: 2, DType.float32: 4, DType.float64: 8, DType.int8: 1, DType.uint8: 1,
          DType.int16: 2, DType.int32: 4, DType.int64: 8, DType.bool: 1}
_C_TYPES = {
    DType.float16: "_Float16",
    DType.bfloat16: "uint16_t",  # the bits; arithmetic converts to float32 (codegen)
    DType.float32: "float",
    DType.float64: "double",
    DType.int8: "int8_t",
    DType.uint8: "uint8_t",
    DType.int16: "int16_t",
    DType.int32: "int32_t",
    DType.int64: "int64_t",
    DType.bool: "uint8_t",  # numpy's bool: one byte, 0 or 1
}
_EXACT = Tolerance(0.0, 0.0)
_TOLERANCES = {
    DType.float16: Tolerance(1e-2, 1e-2),
    DType.bfloat16: Tolerance(2e-2, 2e-2),  # 8 bits of mantissa
    DType.float32: Tolerance(1e-3, 1e-3),
    DType.float64: Tolerance(1e-3, 1e-3),
    **{d: _EXACT for d in (DType.int8, DType.uint8, DType.int16, DType.int32, DType.int64, DType.bool)},
}
