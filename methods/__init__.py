"""Optimizers behind one registry: ``methods.REGISTRY`` maps a name to its class; ``method_class(name)`` also
resolves a method named by import path ('package.module:Name'), as studies name plugins."""
from methods.base import (REGISTRY, Consumption, Method, MethodConfig, NonFiniteError, StepResult, get_method,
                          make_method, method_class, method_family)
from methods import block_grpo, diffu_grpo, es, grpo  # noqa: F401  (each registers itself)

__all__ = ["REGISTRY", "Consumption", "Method", "MethodConfig", "NonFiniteError", "StepResult", "get_method",
           "make_method", "method_class", "method_family"]
