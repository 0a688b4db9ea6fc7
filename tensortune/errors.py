"""User-facing error types. Internal invariants use ``assert`` instead."""


class TensortuneError(Exception):
    """Base class of every error tensortune raises on purpose."""


class DTypeError(TensortuneError, TypeError):
    """Operands of an expression (or a call argument) have the wrong dtype."""


class ShapeError(TensortuneError, ValueError):
    """A tensor is indexed with the wrong number of indices, or an array has the wrong shape."""


class ExprError(TensortuneError, ValueError):
    """An expression is malformed (for example a reduction nested inside arithmetic)."""


class ScheduleError(TensortuneError, ValueError):
    """A schedule step breaks a rule. The message names the stage, the axis and the rule."""

    def __init__(self, stage: str, axis: str | None, rule: str):
        where = f"stage '{stage}'" + (f", axis '{axis}'" if axis else "")
        super().__init__(f"{where}: {rule}")
        self.stage = stage
        self.axis = axis
        self.rule = rule


class LoweringError(TensortuneError, ValueError):
    """A schedule is well formed step by step but cannot be lowered as a whole."""


class CodegenError(TensortuneError, ValueError):
    """Lowered IR cannot be written in the target's language (for example a kernel name that is a keyword)."""


class CompilerNotFoundError(TensortuneError, RuntimeError):
    """No C compiler could be found."""


class CompileError(TensortuneError, RuntimeError):
    """The C compiler rejected generated source. Carries the compiler's output."""

    def __init__(self, message: str, source: str = "", output: str = ""):
        super().__init__(message)
        self.source = source
        self.output = output


class CompileTimeoutError(CompileError):
    """The compiler did not finish within the allowed time."""


class ArgumentError(TensortuneError, ValueError):
    """A compiled kernel was called with arrays of the wrong number, shape, dtype or layout."""


class EmulatorNotFoundError(TensortuneError, RuntimeError):
    """Kernels of another architecture cannot run here: no emulator (or no libraries for it) is installed."""
