"""Which parameters a method trains, the same choice for every method: full fine-tuning, LoRA (through peft) or a
named subset; and ``ParameterCount``, the parameters a token passes through and those of them that train, which
the token-FLOPs of ``arena.budget`` count."""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Literal

import torch

from arena.budget import token_flops
from arena.rng import name_key, torch_generator


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
    return policy.model.disable_adapter() if hasattr(policy.model, "disable_adapter") else contextlib.nullcontext()
