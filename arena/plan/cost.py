"""Time: a step's token counts, their FLOPs by ``arena.budget.token_flops``, at the GPU's stated rates."""
from __future__ import annotations

from arena.budget import token_flops
from arena.plan.assumptions import (BANDWIDTH_USE, ELEMENTWISE_USE, MFU, PERTURB_BYTES, PROMPT_TOKENS,
                                    TOKENS_PER_STEP)
from arena.plan.shape import Lengths, Shape, estimator_of, lengths, trained_parameters


def decode_seconds(shape: Shape, gpu: dict, rows: int, size: Lengths, block: int, w: int) -> float:
    """One generate call: each forward takes its FLOPs at the decoding MFU, or reads the weights and the KV cache
    at ``BANDWIDTH_USE`` of the bandwidth, whichever is longer."""
    def forward(tokens: int, context: int) -> float:
        compute = 2 * shape.traversed() * rows * tokens / (MFU["decoding"] * gpu["peak"])
        reads = (shape.parameters() * w + rows * context * shape.kv_bytes(w)) / (BANDWIDTH_USE * gpu["bandwidth"])
        return max(compute, reads)

    steps = (size.decode_forwards - 1) * forward(block, size.prompt + size.completion // 2)
    return forward(size.prefill, size.prefill) + steps


def step_cost(shape: Shape, gpu: dict, method: str, config, train_prompts: int, block: int = 32, sub_block: int = 8,
              weight_bytes: int = 2, prompt: int = PROMPT_TOKENS,
              tokens_per_step: float = TOKENS_PER_STEP) -> dict[str, float]:
    """One training step: its consumption in the budget units (samples, tokens, forward_tokens, flops) and its
    seconds by phase (rollout, scoring, optimizer; ES: rollout, perturb)."""
    w, trained = weight_bytes, trained_parameters(shape, config)
    traversed = shape.traversed() + (trained if config.trainable == "lora" else 0)
    trained_flops = trained - (shape.vocab * shape.hidden if config.trainable == "full" and not shape.tied else 0)
    if hasattr(config, "group_size"):
        rows = train_prompts * config.group_size
        size = lengths(config, block, sub_block, config.max_new_tokens, prompt, estimator_of(method, config),
                       tokens_per_step)
        mu = config.inner_iterations
        passes = mu + (mu - 1) + (mu if config.beta > 0 else 0)  # θ with its graph, θ_old, the reference
        score_forward, backward = rows * size.packed * passes, rows * size.packed * mu
        seconds = {"rollout": decode_seconds(shape, gpu, rows, size, block, w),
                   "scoring": token_flops(score_forward, backward, traversed, trained_flops)
                              / (MFU["scoring"] * gpu["peak"]),
                   "optimizer": mu * 16 * trained * 2 / (BANDWIDTH_USE * gpu["bandwidth"])}
        members = 1
    else:
        members = config.population
        rows = min(config.prompts_per_member or train_prompts, train_prompts) * config.samples_per_member
        size = lengths(config, block, sub_block, config.max_new_tokens, prompt, tokens_per_step=tokens_per_step)
        score_forward = backward = 0
        seconds = {"rollout": members * decode_seconds(shape, gpu, rows, size, block, w),
                   "perturb": members * trained * PERTURB_BYTES / (ELEMENTWISE_USE * gpu["bandwidth"])}
    generated = members * rows * size.generated(block)
    return {"generated_tokens": generated, "scoring_tokens": score_forward, "backward_tokens": backward,
            "traversed": traversed, "trained": trained_flops,
            "samples": members * rows, "tokens": members * rows * size.completion,
            "forward_tokens": generated + score_forward,
            "flops": token_flops(generated + score_forward, backward, traversed, trained_flops), **seconds,
            "seconds": sum(seconds.values())}
