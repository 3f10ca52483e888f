"""The contract every optimizer implements and its registry. What methods share besides lives beside it:
``methods.trainable`` (which parameters train, LoRA, ParameterCount) and ``methods.collectives`` (world,
all-reduces); both are re-exported here, the one module a plugin method imports (docs/extending.md).

A method is set up on a policy, a config and a seed; ``step`` takes a batch of prompts (token ids)
and a reward function, updates the trainable parameters, and returns what it consumed (generated
samples and tokens, model forward tokens) and its statistics. ``state_dict``/``load_state_dict``
round-trip everything needed to resume (parameters that train, optimizer state, counters).

Sign convention: arena maximises reward (evosax minimises; we do not).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from arena.budget import Consumption
from arena.config import Checked, ConfigError, Problem, build, import_path
from methods.collectives import all_reduce_sum, all_reduce_sums, world
from methods.trainable import ParameterCount, Trainable, make_trainable, reference_context

RewardFn = Callable[[int, str], float]  # (prompt index in the batch, completion text) -> reward


@dataclass
class StepResult:
    consumption: Consumption
    stats: dict[str, float] = field(default_factory=dict)
    completions: list[dict] = field(default_factory=list)  # prompt index, text, reward (a sample)


# Statistics every method reports with one meaning (``common_stats``); methods add their own names.
COMMON_STATS = {
    "reward_mean": "mean reward over every completion generated this step, all ranks",
    "reward_std": "standard deviation (n - 1) of those rewards (ES: over members x prompts, not fitnesses)",
    "update_norm": "L2 norm of this step's change of the trainable parameters, fp32 masters, all ranks",
    "step_seconds": "wall-clock seconds of the step on this rank",
    "samples": "completions generated (Consumption.samples)",
    "tokens": "completion tokens generated (Consumption.tokens)",
    "forward_tokens": "query tokens through the model (Consumption.forward_tokens)",
    "backward_tokens": "of those, the tokens a backward pass went through (0 for methods without one)",
    "flops": "token-FLOPs of the forward and backward tokens (Consumption.flops, arena.budget.token_flops)",
}


def common_stats(totals: dict[str, float], update_norm: float, seconds: float,
                 parameters: ParameterCount) -> tuple[Consumption, dict]:
    """The step's Consumption and COMMON_STATS, from all-rank sums named samples, tokens, forward_tokens,
    backward_tokens (absent: 0), reward_sum and reward_squares, and the ``parameters`` tokens pass through."""
    n = totals["samples"]
    mean = totals["reward_sum"] / n
    variance = max(0.0, (totals["reward_squares"] - n * mean**2) / max(n - 1, 1))
    backward = int(totals.get("backward_tokens", 0))
    used = Consumption(int(n), int(totals["tokens"]), int(totals["forward_tokens"]),
                       parameters.flops(totals["forward_tokens"], backward))
    stats = {"reward_mean": mean, "reward_std": variance**0.5, "update_norm": update_norm, "step_seconds": seconds,
             **dataclasses.asdict(used), "backward_tokens": backward}
    return used, stats


class MethodConfig(Checked):
    """Base of every method's ``Config``: what the driving floor asks of a run's method, each method answering
    for itself (the defaults: nothing idle, no tags, no fixed number of samples)."""

    def inactive_options(self) -> set[str]:
        """Options this config holds but does not use (another estimator's, say): the one-variable rule of
        a study skips them, the choice that idles them being the difference."""
        return set()

    def tags(self) -> dict[str, str]:
        """MLflow tags of a run with this config, beyond the method's name: a field named ``estimator`` is the
        run's ``arena.estimator``."""
        named = {f.name for f in dataclasses.fields(self)}
        return {"arena.estimator": str(self.estimator)} if "estimator" in named else {}

    def samples_per_step(self, prompts: int) -> int | None:
        """Completions one step generates from ``prompts`` prompts; None when it does not say (a plan prints '?')."""
        return None


class NonFiniteError(RuntimeError):
    """A method stops the run: its update went non-finite (NaN or inf) on too many consecutive steps.

    The message names the step and the statistic that went non-finite; the runner ends the run as
    failed with it (``arena.scheduler`` reports a RuntimeError as a failed run, never a retry)."""


class Method(Protocol):
    name: str

    def step(self, prompts: list[list[int]], reward_fn: RewardFn, step: int) -> StepResult: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


# ---------------------------------------------------------------------------------------------
# registry


REGISTRY: dict[str, type] = {}


def register(name: str):
    def decorator(cls):
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return decorator


def get_method(name: str) -> type:
    if name not in REGISTRY:
        raise KeyError(f"unknown method {name!r}; known methods: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def method_class(name: str) -> type:
    """A registered method, or one named 'package.module:Name' (a class whose ``Config`` is a MethodConfig
    dataclass); ConfigError at ``method`` otherwise."""
    if ":" not in name:
        try:
            return get_method(name)
        except KeyError as error:
            raise ConfigError([Problem("method", error.args[0])]) from None
    cls = import_path(name, "method")
    config = getattr(cls, "Config", None)
    if not dataclasses.is_dataclass(config):
        raise ConfigError([Problem("method", f"{name!r} has no Config dataclass")])
    if not issubclass(config, MethodConfig):
        raise ConfigError([Problem("method", f"{name!r}: its Config must subclass methods.base.MethodConfig, "
                                             "which says what arena asks of a method's config")])
    return cls


def method_family(name):
    """The registered name a method goes by: its own, or, for 'package.module:Name', the ``name`` of the
    registered method it extends (None if it extends none, or cannot be imported: validation says why)."""
    if not isinstance(name, str) or ":" not in name:
        return name
    try:
        return getattr(import_path(name, "method"), "name", None)
    except ConfigError:
        return None


def make_method(name: str, policy, options: dict | None, seed: int) -> Any:
    """Look up ``name`` (registered or 'package.module:Name', as ``method_class``), validate ``options`` against its
    config dataclass, and set it up; ConfigError for an unknown method or a bad option."""
    cls = method_class(name)
    return cls(policy, build(cls.Config, options, where=f"optimizer[{name}]"), seed)


__all__ = ["COMMON_STATS", "REGISTRY", "Consumption", "Method", "MethodConfig", "NonFiniteError", "ParameterCount",
           "RewardFn", "StepResult", "Trainable", "all_reduce_sum", "all_reduce_sums", "common_stats", "get_method",
           "make_method", "make_trainable", "method_class", "method_family", "reference_context", "register", "world"]
