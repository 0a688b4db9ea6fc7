"""Loop IR: buffers, loads, stores, loops (each printing itself), one visitor/mutator traversal, a verifier."""
from .nodes import (Allocate, Barrier, Buffer, For, ForKind, IfThenElse, Load, Prefetch, PrimFunc, Scope, Seq, Stmt,
                    Store)
from .verify import IRVerifyError, verify
from .visitor import Mutator, Visitor

__all__ = ["Allocate", "Barrier", "Buffer", "For", "ForKind", "IfThenElse", "IRVerifyError", "Load", "Mutator",
           "Prefetch", "PrimFunc",
           "Scope", "Seq", "Stmt", "Store", "Visitor", "verify"]
