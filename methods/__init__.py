"""Optimizers behind one registry: ``methods.REGISTRY`` maps a name to its class."""
from methods.base import REGISTRY, Consumption, Method, StepResult, get_method, make_method
from methods import es  # noqa: F401  (registers)

__all__ = ["REGISTRY", "Consumption", "Method", "StepResult", "get_method", "make_method"]
