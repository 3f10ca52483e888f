"""Optimizers behind one registry: ``methods.REGISTRY`` maps a name to its class."""
from methods.base import REGISTRY, Consumption, Method, NonFiniteError, StepResult, get_method, make_method
from methods import block_grpo, diffu_grpo, es, grpo  # noqa: F401  (each registers itself)

__all__ = ["REGISTRY", "Consumption", "Method", "NonFiniteError", "StepResult", "get_method", "make_method"]
