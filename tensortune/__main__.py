"""``python -m tensortune``: the same command line as ``tensortune`` (see ``tensortune.cli``)."""
import sys

from .cli import main

sys.exit(main())
