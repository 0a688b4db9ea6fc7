"""Loop IR: buffers, loads, stores, loops; a printer and a verifier."""
from .nodes import Allocate, Buffer, For, ForKind, IfThenElse, Load, PrimFunc, Scope, Seq, Stmt, Store
from .verify import IRVerifyError, verify

__all__ = ["Allocate", "Buffer", "For", "ForKind", "IfThenElse", "IRVerifyError", "Load", "PrimFunc", "Scope",
           "Seq", "Stmt", "Store", "verify"]
