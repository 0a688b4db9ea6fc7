"""Tuners: propose configs to measure (``next_batch``) and learn from the results (``update``)."""
from .evolution import EvolutionTuner
from .ga import GATuner
from .index_based import GridTuner, RandomTuner
from .tuner import Tuner
from .xgb import XGBRegTuner, XGBTuner

__all__ = ["EvolutionTuner", "GATuner", "GridTuner", "RandomTuner", "Tuner", "XGBRegTuner", "XGBTuner"]
