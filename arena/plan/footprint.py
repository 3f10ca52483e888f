"""Bytes per GPU by part and phase (``memory``), and host memory per run (``host``), at a study's settings."""
from __future__ import annotations

from arena.plan.assumptions import ACTIVATION_PER_TOKEN, DATASET_BYTES, LOGIT_COPIES, PROMPT_TOKENS
from arena.plan.shape import Shape, estimator_of, lengths, trained_parameters


def _decoding(shape: Shape, rows: int, prompt: int, completion: int, block: int, w: int) -> int:
    """A generate call's peak beyond the weights: the KV cache of every row at its full length, and the larger of
    the prefill's MLP transient (three intermediate-sized tensors) and a block's fp32 logits (three copies)."""
    prefill = 3 * rows * prompt * shape.intermediate * w
    logits = 3 * rows * block * shape.vocab * 4
    return rows * (prompt + completion) * shape.kv_bytes(w) + max(prefill, logits)



def memory(shape: Shape, method: str, config, train_prompts: int, evaluation_rows: int, evaluation_tokens: int,
           block: int = 32, sub_block: int = 8, weight_bytes: int = 2, fsdp: int = 1,
           prompt: int = PROMPT_TOKENS, on_cpu: bool = False) -> dict[str, int]:
    """Bytes per GPU by part (the module's docstring), and the phases' peaks: ``train``, ``rollout``,
    ``evaluation`` and the runner's ``weight drift`` under ``phases``, and the ``peak``. ``fsdp``: GPUs the
    parameters, gradients and moments are sharded over (full fine-tuning of the GRPO family only, as ``sharding:
    fsdp``). ``on_cpu``: the run's memory is the host's, which also holds the runner's copy of the starting weights
    (``start copy``, for weight_drift; with a GPU that copy takes host memory, not the GPU's)."""
    w, P, d = weight_bytes, shape.parameters(), shape.hidden
    trained = trained_parameters(shape, config)
    lora, grpo = config.trainable == "lora", hasattr(config, "group_size")
    parts = dict.fromkeys(("weights", "trainable", "gradients", "optimizer", "masters", "reference", "start copy",
                           "activations", "rollout", "evaluation"), 0)
    parts["start copy"] = P * 2 if on_cpu else 0  # bf16: a bf16 checkpoint's values, kept exactly (runner)
    if fsdp > 1:
        parts["weights"] = P * 4 // fsdp + shape.layer() * w
    else:
        parts["weights"] = P * w
    parts["trainable"] = trained * 4 if lora else 0
    if grpo:
        masters = not lora and w < 4
        parts["gradients"] = (trained * 4 + (trained * w if masters else 0)) // fsdp
        parts["optimizer"] = 8 * trained // fsdp
        parts["masters"] = trained * 4 // fsdp if masters and fsdp == 1 else 0
        parts["reference"] = P * w // fsdp if config.beta > 0 and not lora else 0
        size = lengths(config, block, sub_block, config.max_new_tokens, prompt, estimator_of(method, config))
        micro = config.micro_batch or train_prompts * config.group_size
        per_token = shape.layers * (ACTIVATION_PER_TOKEN[0] * d + ACTIVATION_PER_TOKEN[1] * shape.intermediate) * w
        parts["activations"] = micro * (size.packed * per_token + size.scored * (shape.vocab * 4 * LOGIT_COPIES + d * w)
                                        + size.packed ** 2 * 4)
        rows, completion = train_prompts * config.group_size, size.completion
    else:  # ES: θ's fp32 master, the previous update, and one dense noise tensor of the largest parameter at a time
        parts["masters"] = trained * 4
        parts["optimizer"] = trained * 4
        largest = shape.vocab * d if not lora else max(shape.lora(config.lora_rank, [t]) // shape.layers
                                                      for t in config.lora_targets)
        parts["gradients"] = 0
        parts["activations"] = 3 * largest * 4  # the noise, its scaled copy and the perturbed sum (fp32)
        rows = min(config.prompts_per_member or train_prompts, train_prompts) * config.samples_per_member
        completion = -(-(prompt + config.max_new_tokens) // block) * block - prompt
    parts["rollout"] = _decoding(shape, rows, prompt, completion, block, w)
    answer = -(-(prompt + evaluation_tokens) // block) * block - prompt
    parts["evaluation"] = _decoding(shape, evaluation_rows, prompt, answer, block, w)
    state = sum(parts[k] for k in ("weights", "trainable", "gradients", "optimizer", "masters", "reference",
                                   "start copy"))
    # eval/weight_drift (arena.runner) takes each parameter's difference from the start copy in fp32 and squares it
    # in place: one fp32 temporary of the largest tensor (the vocabulary's), on the GPU the parameter widened to fp32
    largest = max(shape.vocab, shape.intermediate) * d * 4
    drift = largest if on_cpu or w < 4 else 0
    # a checkpoint clones the trained parameters' fp32 masters where they live (ES: θ and its previous update too)
    clone = trained * 4 * (1 if grpo else 2) // fsdp
    phases = {"train": state + parts["activations"], "rollout": state + parts["rollout"],
              "evaluation": state + parts["evaluation"], "weight drift": state + drift, "checkpoint": state + clone}
    return {**parts, "phases": phases, "peak": max(phases.values())}


def host(shape: Shape, config, fsdp: int = 1) -> dict[str, int]:
    """Host memory of one GPU run's process beyond its imports, by part, and its ``peak``: the runner's bf16 start
    copy for weight_drift (the whole model, taken before FSDP shards it); weight_drift's transient (a parameter
    widened to fp32 on the host and its difference from the copy: the largest tensor twice); a checkpoint's write
    (torch.save copies one tensor at a time to the host: the largest trained one, fp32); the task's data. The
    checkpoint's loading is left out: safetensors maps the shards, whose pages are the page cache's."""
    d, i = shape.hidden, shape.intermediate
    largest = max(shape.vocab, i) * d * 4
    if config.trainable == "lora":
        sizes = {"q_proj": d, "k_proj": d, "v_proj": d, "o_proj": d, "gate_proj": i, "up_proj": i, "down_proj": i}
        trained = config.lora_rank * max(sizes.get(t, d) for t in config.lora_targets) * 4
    else:
        trained = largest
    parts = {"start copy": shape.parameters() * 2, "weight drift": 2 * largest // fsdp,
             "checkpoint write": trained // fsdp, "dataset": DATASET_BYTES}
    peak = parts["start copy"] + parts["dataset"] + max(parts["weight drift"], parts["checkpoint write"])
    return {**parts, "peak": peak}
