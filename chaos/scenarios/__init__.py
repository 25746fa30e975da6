"""The catalogue of scenarios (split by family in the next commit)."""

from .masters import CATALOGUE, LOCK, NAMES, _loop, clock_rate_trial, find, restart_after

__all__ = ["CATALOGUE", "LOCK", "NAMES", "_loop", "clock_rate_trial", "find", "restart_after"]
