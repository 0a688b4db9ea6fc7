"""Scalar data types of tensors and expressions."""
from __future__ import annotations

from enum import Enum

import numpy as np


class DType(Enum):
    """A scalar type. ``bool`` is the type of comparisons and is not a tensor storage type."""

    float32 = "float32"
    float64 = "float64"
    int32 = "int32"
    int64 = "int64"
    bool = "bool"

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.float64)

    @property
    def is_int(self) -> bool:
        return self in (DType.int32, DType.int64)

    @property
    def bytes(self) -> int:
        return _BYTES[self]

    @property
    def c_type(self) -> str:
        return _C_TYPES[self]

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value)

    @staticmethod
    def of(value: "DType | str | np.dtype | type") -> "DType":
        """Convert a dtype given as DType, a string or a numpy dtype."""
        if isinstance(value, DType):
            return value
        try:
            return DType(np.dtype(value).name)
        except (TypeError, ValueError):
            pass
        from .errors import DTypeError

        names = ", ".join(d.value for d in DType if d is not DType.bool)
        raise DTypeError(f"unsupported dtype {value!r}; use one of {names}")

    def __str__(self) -> str:
        return self.value


_BYTES = {DType.float32: 4, DType.float64: 8, DType.int32: 4, DType.int64: 8, DType.bool: 1}
_C_TYPES = {
    DType.float32: "float",
    DType.float64: "double",
    DType.int32: "int32_t",
    DType.int64: "int64_t",
    DType.bool: "int",
}
