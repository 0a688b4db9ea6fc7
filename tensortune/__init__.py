"""tensortune: declare tensor operators, schedule them, generate C, and tune them."""

from .version import __version__
from . import te  # noqa: E402
from .build import build  # noqa: E402
from .lower import lower  # noqa: E402
from .target import Target  # noqa: E402
from .schedule import create_schedule  # noqa: E402


def __getattr__(name: str):
    """``tensortune.compile(model)``, ``tensortune.compile_buckets(model, sizes)`` and ``tensortune.load(path)``
    (whole networks), imported on first use so that ``import tensortune`` stays as light as it was (build workers
    import it)."""
    if name in ("compile", "compile_buckets", "load"):
        from . import network

        return getattr(network, name)
    raise AttributeError(f"module 'tensortune' has no attribute {name!r}")


__all__ = ["__version__", "build", "compile", "compile_buckets", "create_schedule", "load", "lower", "te", "Target"]
