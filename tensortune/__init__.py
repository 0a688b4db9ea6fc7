"""tensortune: declare tensor operators, schedule them, generate C, and tune them."""

__version__ = "0.1.0"

from . import te  # noqa: E402
from .build import build  # noqa: E402
from .lower import lower  # noqa: E402
from .target import Target  # noqa: E402
from .schedule import create_schedule  # noqa: E402
from .network import compile, load  # noqa: E402  (whole networks: tensortune.compile(model), tensortune.load(path))

__all__ = ["__version__", "build", "compile", "create_schedule", "load", "lower", "te", "Target"]
