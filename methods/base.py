"""The contract every optimizer implements, its registry, and what all of them share.

A method is set up on a policy, a config and a seed; ``step`` takes a batch of prompts (token ids)
and a reward function, updates the trainable parameters, and returns what it consumed (generated
samples and tokens, model forward tokens) and its statistics. ``state_dict``/``load_state_dict``
round-trip everything needed to resume (parameters that train, optimizer state, counters).

Sign convention: arena maximises reward (evosax minimises; we do not).
"""
from __future__ import annotations

import dataclasses
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol

import torch

from arena.budget import Consumption, token_flops
from arena.config import Checked, ConfigError, Problem, build, import_path
from arena.rng import name_key, torch_generator

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


@dataclass(frozen=True)
class ParameterCount:
    """The parameters a token passes through (``traversed``) and those of them that train (``trained``), the P
    and P_t of ``arena.budget.token_flops``.

    Traversed: every parameter of the model except an untied input embedding table, which a token reads
    one row of instead of multiplying (tied to the output head, it counts once, as the head). Under LoRA
    that is the frozen base plus the adapters, since a token runs through both. Trained: the trained
    ones among the traversed (an untied embedding's gradient is a scatter of rows, not a product)."""

    traversed: int
    trained: int

    @classmethod
    def of(cls, model, trained: list[tuple[str, torch.nn.Parameter]]) -> "ParameterCount":
        """Counted on ``model`` before any sharding (FSDP flattens the parameters); a model without
        transformers' embedding accessors (a toy) has no lookup table."""
        embedding = getattr(model, "get_input_embeddings", lambda: None)()
        head = getattr(model, "get_output_embeddings", lambda: None)()
        tied = head is not None and embedding is not None and embedding.weight is head.weight
        lookup = [] if embedding is None or tied else [embedding.weight]  # read by row, not multiplied
        total = sum(p.numel() for p in model.parameters())  # a tied weight is one parameter here
        moved = sum(p.numel() for _, p in trained if not any(p is q for q in lookup))
        return cls(total - sum(p.numel() for p in lookup), moved)

    def flops(self, forward_tokens: int, backward_tokens: int = 0) -> int:
        return token_flops(int(forward_tokens), int(backward_tokens), self.traversed, self.trained)


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
# trainable parameters: full fine-tuning or LoRA, the same choice for every method


@dataclass(frozen=True)
class Trainable:
    """Which parameters a method trains: ``full`` every one; ``lora`` adapters through peft (Hu et al. 2021);
    ``subset`` the parameters whose names one of ``names`` (regular expressions, ``re.search``) matches, the
    rest frozen: ``[norm]`` the RMSNorm weights, ``['layers\\.(2|3)\\.']`` the last two of four layers,
    ``[bias]`` the biases (BitFit, Zaken et al. 2022)."""

    mode: Literal["full", "lora", "subset"] = "full"
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    names: tuple[str, ...] = ()

    @classmethod
    def of(cls, config) -> "Trainable":
        """The choice a method config makes with its flat fields trainable, lora_rank, lora_alpha, lora_targets
        and trainable_names (a config without the last offers no subset)."""
        return cls(config.trainable, config.lora_rank, config.lora_alpha, tuple(config.lora_targets),
                   tuple(getattr(config, "trainable_names", ())))

    def problems(self):
        """The trainable options' problems, for the configs that carry them."""
        if self.mode == "subset" and not self.names:
            yield "trainable_names", "trainable: subset needs at least one name pattern, e.g. [norm]"
        if self.mode != "subset" and self.names:
            yield "trainable_names", f"goes with trainable: subset, not {self.mode!r}"
        for i, pattern in enumerate(self.names):
            try:
                re.compile(pattern)
            except (re.error, TypeError) as error:
                yield f"trainable_names[{i}]", f"not a regular expression ({error}): {pattern!r}"
        if self.lora_rank < 1:
            yield "lora_rank", f"must be >= 1, got {self.lora_rank!r}"
        if self.lora_alpha <= 0:
            yield "lora_alpha", f"must be > 0, got {self.lora_alpha!r}"
        if not self.lora_targets:
            yield "lora_targets", "must name at least one module"


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
    if trainable.mode == "subset":
        named = list(policy.model.named_parameters())
        unmatched = [p for p in trainable.names if not any(re.search(p, name) for name, _ in named)]
        if unmatched:
            raise ValueError(f"trainable_names {unmatched} match no parameter of the model; its names look like "
                             f"{', '.join(name for name, _ in named[:3])}, ... {named[-1][0]}")
        for name, param in named:
            param.requires_grad_(any(re.search(p, name) for p in trainable.names))
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


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` across ranks in place (no-op on one process)."""
    import torch.distributed as dist

    if world()[1] > 1:
        dist.all_reduce(tensor)
    return tensor


def all_reduce_sums(values: dict[str, float], max_keys: tuple[str, ...] = ()) -> dict[str, float]:
    """Named scalars summed over ranks (those in ``max_keys``: their maximum), in one collective.

    Every rank must pass the same names: the values travel in sorted-name order with a checksum of
    the names, and ranks whose names differ raise instead of mixing values up. Every rank reduces
    the same gathered float64 table, so all get the same bits. One process: the values as they are.
    """
    import torch.distributed as dist

    names = sorted(values)
    size = world()[1]
    if size == 1:
        return {name: float(values[name]) for name in names}
    signature = zlib.crc32(repr((names, sorted(max_keys))).encode())  # exact in float64
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    local = torch.tensor([signature, *(values[name] for name in names)], dtype=torch.float64, device=device)
    gathered = [torch.empty_like(local) for _ in range(size)]
    dist.all_gather(gathered, local)
    table = torch.stack(gathered).cpu()
    if (table[:, 0] != signature).any():
        raise RuntimeError(f"ranks reduce different statistics; this rank has {names} (max: {sorted(max_keys)})")
    return {name: float(column.max() if name in max_keys else column.sum())
            for name, column in zip(names, table[:, 1:].T)}


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
