"""The network's widths (``Shape``: parameters, LoRA adapters, KV cache) and a step's token counts (``Lengths``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from arena.model.layout import PackedLayout
from arena.plan.assumptions import PROMPT_TOKENS, TOKENS_PER_STEP


@dataclass(frozen=True)
class Shape:
    """The network's widths and depth: what memory and FLOPs are counted from (a config.json's fields)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool

    @classmethod
    def of(cls, fields: dict) -> "Shape":
        return cls(fields["hidden_size"], fields["num_hidden_layers"], fields["num_attention_heads"],
                   fields["num_key_value_heads"], fields["intermediate_size"], fields["vocab_size"],
                   bool(fields.get("tie_word_embeddings", False)))

    @property
    def kv(self) -> int:
        return self.hidden // self.heads * self.kv_heads  # width of k (and of v)

    def layer(self) -> int:
        """Parameters of one decoder layer: q, k, v with biases, o, the SwiGLU MLP, two RMSNorm weights."""
        d, kv = self.hidden, self.kv
        return d * d + d + 2 * (d * kv + kv) + d * d + 3 * d * self.intermediate + 2 * d

    def parameters(self) -> int:
        embedding = self.vocab * self.hidden
        return self.layers * self.layer() + embedding * (1 if self.tied else 2) + self.hidden

    def traversed(self) -> int:
        """The P of ``token_flops``: every parameter but an untied input embedding (a token reads one row of it)."""
        return self.parameters() - (0 if self.tied else self.vocab * self.hidden)

    def lora(self, rank: int, targets) -> int:
        """LoRA parameters, rank·(in + out) per targeted projection and layer."""
        d, kv, i = self.hidden, self.kv, self.intermediate
        sizes = {"q_proj": (d, d), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (d, d), "gate_proj": (d, i),
                 "up_proj": (d, i), "down_proj": (i, d)}
        return self.layers * sum(rank * sum(sizes[t]) for t in targets if t in sizes)

    def kv_bytes(self, weight_bytes: int) -> int:
        """The KV cache of one token: a key and a value of every layer."""
        return self.layers * 2 * self.kv * weight_bytes


@dataclass(frozen=True)
class Lengths:
    """Token counts of one step: the scoring layout of a sequence and the decoding work of a rollout."""

    prompt: int
    completion: int  # to the end of the block that reaches max_new_tokens
    packed: int  # tokens of one sequence's scoring forward
    scored: int  # positions whose logits one sequence's scoring takes
    decode_forwards: int  # forwards of one generate call (prefill, then every block's steps and commit)
    prefill: int  # tokens of the first: the prompt's whole blocks

    def generated(self, block: int) -> int:
        """Tokens one row forwards while it is generated."""
        return self.prefill + (self.decode_forwards - 1) * block


def lengths(config, block: int, sub_block: int, max_new_tokens: int, prompt: int = PROMPT_TOKENS,
            estimator: tuple[str, dict] = ("ar", {}), tokens_per_step: float = TOKENS_PER_STEP) -> Lengths:
    """The scoring layout (``methods.likelihood``) and decoding work at these lengths; ``tokens_per_step`` at a
    threshold below 1 (random weights decode one a step at any threshold)."""
    total = -(-(prompt + max_new_tokens) // block) * block  # generation ends with the block that reaches them
    completion = total - prompt
    per_step = tokens_per_step if getattr(config, "threshold", 1.0) < 1 else 1.0
    blocks = total // block - prompt // block  # the first one shares the prompt's tail when it is not whole
    # the prompt's whole blocks are forwarded once; a block that starts clean has its first token from the previous
    # commit (autoregressive), every other new token is denoised; each block ends with a commit forward
    denoised = completion - (blocks - (1 if prompt % block else 0))
    forwards = 1 + math.ceil(denoised / per_step) + blocks
    name, options = estimator
    if name in ("ar", "d1"):
        return Lengths(prompt, completion, total, completion, forwards, prompt // block * block)
    draws = {"elbo": options.get("draws", 1), "gauss_legendre": options.get("nodes", 1)}.get(name, 1)
    views = math.ceil(block / per_step) if name == "trajectory" else draws * block // sub_block
    layout = PackedLayout(total, block, n_noisy=views, noisy_start=prompt // block * block)
    masked = (sub_block + 1) / (2 * sub_block) if name in ("elbo", "gauss_legendre") else 1.0  # E[l]/m, l ~ U{1..m}
    scored = math.ceil(draws * completion * masked) + blocks if name != "trajectory" else completion
    return Lengths(prompt, completion, layout.total, scored, forwards, prompt // block * block)


def estimator_of(method: str, config) -> tuple[str, dict]:
    """The GRPO family's likelihood estimator, as the method class itself chooses it (``GRPO._estimator``)."""
    from types import SimpleNamespace

    from methods.base import method_class

    return method_class(method)._estimator(SimpleNamespace(config=config))


def trained_parameters(shape: Shape, config) -> int:
    if config.trainable == "lora":
        return shape.lora(config.lora_rank, config.lora_targets)
    if config.trainable == "full":
        return shape.parameters()
    raise ValueError(f"trainable {config.trainable!r}: the plan counts full and lora only")
