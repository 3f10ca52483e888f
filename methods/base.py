"""The contract every optimizer implements, its registry, and what all of them share.

A method is set up on a policy, a config and a seed; ``step`` takes a batch of prompts (token ids)
and a reward function, updates the trainable parameters, and returns what it consumed (generated
samples and tokens, model forward tokens) and its statistics. ``state_dict``/``load_state_dict``
round-trip everything needed to resume (parameters that train, optimizer state, counters).

Sign convention: arena maximises reward (evosax minimises; we do not).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from arena.rng import name_key, torch_generator

RewardFn = Callable[[int, str], float]  # (prompt index in the batch, completion text) -> reward


@dataclass
class Consumption:
    """What one step consumed, in the arena's budget units."""

    samples: int = 0  # completions generated
    tokens: int = 0  # completion tokens generated
    forward_tokens: int = 0  # query tokens through the model, generation and scoring together

    def __add__(self, other: "Consumption") -> "Consumption":
        return Consumption(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))


@dataclass
class StepResult:
    consumption: Consumption
    stats: dict[str, float] = field(default_factory=dict)
    completions: list[dict] = field(default_factory=list)  # prompt index, text, reward (a sample)


class Method(Protocol):
    name: str

    def step(self, prompts: list[list[int]], reward_fn: RewardFn, step: int) -> StepResult: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class ConfigError(ValueError):
    """A method option that is unknown or out of range; the message names it."""


def build_config(cls, options: dict | None, where: str = "optimizer"):
    """Instantiate the dataclass ``cls`` from ``options``, reporting every unknown or mistyped key."""
    options = dict(options or {})
    names = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    errors = [f"{where}.{key}: unknown option (known: {', '.join(sorted(names))})" for key in options if key not in names]
    for key, value in options.items():
        if key in names and not _type_ok(value, hints[key]):
            errors.append(f"{where}.{key}: expected {hints[key]}, got {value!r}")
    if errors:
        raise ConfigError("; ".join(errors))
    try:
        return cls(**options)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{where}: {error}") from None


def _type_ok(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    return isinstance(value, hint) if isinstance(hint, type) else True


# ---------------------------------------------------------------------------------------------
# trainable parameters: full fine-tuning or LoRA, the same choice for every method


@dataclass(frozen=True)
class Trainable:
    """Which parameters a method trains. ``lora`` wraps the model with peft (Hu et al. 2021)."""

    mode: str = "full"  # "full" | "lora"
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def __post_init__(self):
        if self.mode not in ("full", "lora"):
            raise ValueError(f"trainable must be 'full' or 'lora', got {self.mode!r}")


def make_trainable(policy, trainable: Trainable, seed: int) -> list[tuple[str, torch.nn.Parameter]]:
    """Set requires_grad per ``trainable`` (wrapping with LoRA if asked); return the trained parameters.

    LoRA A matrices are re-drawn from generators keyed by (seed, parameter name), with peft's own
    distribution (kaiming-uniform, bound 1/sqrt(fan_in)); B stays zero. peft would draw them from
    the global RNG, which would make runs depend on whatever ran before.
    """
    if trainable.mode == "lora" and not hasattr(policy.model, "disable_adapter"):
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=trainable.lora_rank, lora_alpha=trainable.lora_alpha,
                          target_modules=list(trainable.lora_targets), lora_dropout=0.0, bias="none")
        policy.model = get_peft_model(policy.model, lora)
        with torch.no_grad():
            for name, param in policy.model.named_parameters():
                if "lora_A" in name:
                    bound = 1.0 / param.shape[1] ** 0.5
                    draw = torch.rand(param.shape, generator=torch_generator(seed, name_key(name)))
                    param.copy_((2 * draw - 1) * bound)
    if trainable.mode == "full":
        for param in policy.model.parameters():
            param.requires_grad_(True)
    return [(n, p) for n, p in policy.model.named_parameters() if p.requires_grad]


def reference_context(policy):
    """Context manager under which the policy computes the frozen reference (LoRA: adapter off)."""
    import contextlib

    return policy.model.disable_adapter() if hasattr(policy.model, "disable_adapter") else contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# distributed: every method shards its work over torch.distributed ranks when a group is initialised


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without an initialised process group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Sum (or ``op="max"``) ``tensor`` across ranks in place (no-op on one process)."""
    import torch.distributed as dist

    if world()[1] > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return tensor


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


def make_method(name: str, policy, options: dict | None, seed: int) -> Any:
    """Look up ``name``, validate ``options`` against its config dataclass, and set it up."""
    cls = get_method(name)
    return cls(policy, build_config(cls.Config, options, where=f"optimizer[{name}]"), seed)
