"""``arena plan``: before a cluster is booked, what each arm of a study needs per GPU and how long the study takes.

Memory, per GPU and by part, at the precision the run uses (``weight_bytes``: 2 for bf16 on a GPU, 4 for fp32 on
the CPU), from the network's widths (``Shape``) and the arm's method config, for what arena's code holds:
- weights: the model's parameters (under FSDP over k GPUs, 1/k of them as fp32 masters, plus one decoder
  layer gathered in the compute dtype);
- trainable: LoRA's adapters, fp32 (peft keeps adapters of a bf16 model in fp32, so they are their own master);
- gradients: the trained parameters' (full fine-tuning: the bf16 gradient a backward writes and the fp32 one
  ``methods.fsdp.MasterWeights`` accumulates);
- optimizer: AdamW's two fp32 moments; ES keeps its previous update (fp32, ``update_cosine``);
- masters: fp32 copies of low-precision trained parameters (GRPO full fine-tuning; ES copies every trained one);
- reference: the frozen copy GRPO keeps for β > 0 without LoRA (LoRA disables the adapter instead);
- activations: one micro-batch of the scoring layout kept for the backward pass (``ACTIVATION_PER_TOKEN``),
  its logits at the scored positions, and the dense attention mask;
- rollout: the block KV cache of a whole rollout batch (``generate`` decodes every row at once) and the largest
  transient of a forward (the prompt's prefill, or a block's 32 fp32 logits per row);
- evaluation: the same for the evaluation batch (every prompt x sample in one ``generate``).
The phases peak apart: training state + activations, + rollout, + evaluation, + the fp32 copies the runner's
weight_drift makes of the largest tensor; the largest decides.

Time, from the FLOP accounting of ``arena.budget`` (``token_flops``: 2·P per forward token, 2·P + 2·P_t per
backward one): a step's forward and backward tokens at the profile's lengths, divided by a stated MFU of the
GPU's dense bf16 peak; a decoding forward takes at least the time to read the weights and KV cache at a stated
share of the memory bandwidth (``GPUS``, ``MFU``, ``BANDWIDTH_USE``: the sources are beside each number).
Attention's own FLOPs are left out, as in the budget's accounting.

A planning approximation, checked against measured peaks by ``benchmarks/rehearsal.py`` (docs/performance.md).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from arena.budget import token_flops
from arena.model.layout import PackedLayout

# Datasheet numbers (NVIDIA H100 Tensor Core GPU datasheet, SXM5: 989 TFLOP/s dense bf16, 3.35 TB/s HBM3,
# 80 GB; NVIDIA H200 datasheet, SXM: 989 TFLOP/s dense bf16, 4.8 TB/s HBM3e, 141 GB).
GPUS = {
    "h100-80gb": {"name": "H100 80GB SXM", "memory": 80e9, "peak": 989e12, "bandwidth": 3.35e12},
    "h200": {"name": "H200 141GB SXM", "memory": 141e9, "peak": 989e12, "bandwidth": 4.8e12},
}
# Model FLOP utilisation of the datasheet peak. On one H200 the stock transformers path measured a packed
# [clean | noisy] forward+backward at MFU 0.53-0.66 of the 780 TFLOP/s its matmul reached (0.42-0.52 of 989),
# and a batch-64 denoising step at about 0.48 of 780 (0.38 of 989) (docs/performance.md, "Floors", the anchors).
MFU = {"scoring": 0.42, "decoding": 0.38}
# Share of the bandwidth a small-batch decoding forward reaches: the same anchors measured a batch-1 step at
# 7.57 ms against a 3.2 ms weight-reading floor with CUDA graphs (0.42), 38.6 ms without (0.08); arena's sampler
# runs without graphs, so the plan takes the lower end's order: 0.1.
BANDWIDTH_USE = 0.1
USABLE = 0.9  # of a GPU's memory: the CUDA context, the allocator's fragmentation and NCCL buffers take the rest
PROMPT_TOKENS = 160  # a GSM8K question in the Qwen2 chat template with the system line (about 100-200 tokens)
TOKENS_PER_STEP = 2.6  # at threshold 0.9 on GSM8K (Fast-dLLM v2 paper); threshold 1.0 decodes one a step
# Activations a decoder layer keeps per token for its backward pass, in units of the weight dtype: about 8
# hidden-sized tensors (the two norms' inputs and outputs, q/k/v, the attention output and o_proj's input) and 4
# intermediate-sized ones (gate, up, their SiLU product, down_proj's input) (docs/performance.md, trajectory).
ACTIVATION_PER_TOKEN = (8, 4)  # (x hidden, x intermediate)
LOGIT_COPIES = 4  # fp32 logits at a scored position: the head's output, / temperature, log_softmax, its gradient


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


def _trained(shape: Shape, config) -> int:
    if config.trainable == "lora":
        return shape.lora(config.lora_rank, config.lora_targets)
    if config.trainable == "full":
        return shape.parameters()
    raise ValueError(f"trainable {config.trainable!r}: the plan counts full and lora only")


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
    trained = _trained(shape, config)
    lora, grpo = config.trainable == "lora", hasattr(config, "group_size")
    parts = dict.fromkeys(("weights", "trainable", "gradients", "optimizer", "masters", "reference", "start copy",
                           "activations", "rollout", "evaluation"), 0)
    parts["start copy"] = P * w if on_cpu else 0
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
    # eval/weight_drift (arena.runner) takes each parameter in fp32, and on the host its difference from the start
    # copy and that difference squared: the largest tensor (the vocabulary's) three times over at most
    largest = max(shape.vocab, shape.intermediate) * d * 4
    drift = 2 * largest if on_cpu else (largest if w < 4 else 0)
    phases = {"train": state + parts["activations"], "rollout": state + parts["rollout"],
              "evaluation": state + parts["evaluation"], "weight drift": state + drift}
    return {**parts, "phases": phases, "peak": max(phases.values())}


# ---------------------------------------------------------------------------------------------
# time: a step's token counts, their FLOPs by arena.budget.token_flops, at the GPU's stated rates

NOISE_PER_SECOND = 1e8  # ES draws its noise on the CPU from keyed generators: about 1e8 normals a second per core


def _decode_seconds(shape: Shape, gpu: dict, rows: int, size: Lengths, block: int, w: int) -> float:
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
    w, trained = weight_bytes, _trained(shape, config)
    traversed = shape.traversed() + (trained if config.trainable == "lora" else 0)
    trained_flops = trained - (shape.vocab * shape.hidden if config.trainable == "full" and not shape.tied else 0)
    if hasattr(config, "group_size"):
        rows = train_prompts * config.group_size
        size = lengths(config, block, sub_block, config.max_new_tokens, prompt, estimator_of(method, config),
                       tokens_per_step)
        mu = config.inner_iterations
        passes = mu + (mu - 1) + (mu if config.beta > 0 else 0)  # θ with its graph, θ_old, the reference
        score_forward, backward = rows * size.packed * passes, rows * size.packed * mu
        seconds = {"rollout": _decode_seconds(shape, gpu, rows, size, block, w),
                   "scoring": token_flops(score_forward, backward, traversed, trained_flops)
                              / (MFU["scoring"] * gpu["peak"]),
                   "optimizer": mu * 16 * trained * 2 / (BANDWIDTH_USE * gpu["bandwidth"])}
        members = 1
    else:
        members = config.population
        rows = min(config.prompts_per_member or train_prompts, train_prompts) * config.samples_per_member
        size = lengths(config, block, sub_block, config.max_new_tokens, prompt, tokens_per_step=tokens_per_step)
        score_forward = backward = 0
        seconds = {"rollout": members * _decode_seconds(shape, gpu, rows, size, block, w),
                   "perturb": members * trained / NOISE_PER_SECOND}
    generated = members * rows * size.generated(block)
    return {"generated_tokens": generated, "scoring_tokens": score_forward, "backward_tokens": backward,
            "traversed": traversed, "trained": trained_flops,
            "samples": members * rows, "tokens": members * rows * size.completion,
            "forward_tokens": generated + score_forward,
            "flops": token_flops(generated + score_forward, backward, traversed, trained_flops), **seconds,
            "seconds": sum(seconds.values())}


# ---------------------------------------------------------------------------------------------
# a study: every arm's memory, verdict and the change that makes it fit; the runs' time and GPU-hours

GIB = 2**30


def _fits(parts: dict, gpu: dict) -> bool:
    return parts["peak"] <= USABLE * gpu["memory"]


def _fix(shape, gpu, gpus: int, run, config, evaluation: tuple[int, int], weight_bytes: int) -> tuple[list, dict, int]:
    """The changes that bring the arm under the GPU's memory: for training, the first of a smaller micro-batch,
    LoRA (rank 128, as the profiles) and FSDP over k <= ``gpus`` GPUs that fits; for a rollout or evaluation batch
    too large, the most rows one generate call may hold. Returns (changes, the parts after them, GPUs per run)."""
    limit = USABLE * gpu["memory"]

    def parts(cfg, k=1, rows=evaluation[0]):
        return memory(shape, run.method, cfg, run.train.prompts_per_step, rows, evaluation[1],
                      weight_bytes=weight_bytes, fsdp=k)

    grpo, changes, k = hasattr(config, "group_size"), [], 1
    if parts(config)["phases"]["train"] > limit:
        micro = config.micro_batch or run.train.prompts_per_step * config.group_size if grpo else 1
        tries = [(f"micro_batch: {m}", dataclasses.replace(config, micro_batch=m), 1) for m in range(micro - 1, 0, -1)]
        if config.trainable != "lora":
            tries.append(("trainable: lora (rank 128)", dataclasses.replace(
                config, trainable="lora", lora_rank=128, lora_alpha=64.0, **({"micro_batch": 1} if grpo else {})), 1))
            tries += [(f"sharding: fsdp over {2 ** e} GPUs", config, 2 ** e)
                      for e in range(1, gpus.bit_length()) if grpo]
        for change, cfg, shards in tries:
            if parts(cfg, shards)["phases"]["train"] <= limit:
                changes, config, k = [change], cfg, shards
                break
        else:
            changes = ["no micro-batch, LoRA or FSDP within the GPUs fits training"]
    after = parts(config, k)
    if after["phases"]["rollout"] > limit:
        changes.append(f"the rollout batch ({after['rollout'] / GIB:.0f} GiB) does not fit: fewer prompts_per_step")
    if after["phases"]["evaluation"] > limit:
        rows = evaluation[0]
        while rows > 1 and parts(config, k, rows)["phases"]["evaluation"] > limit:
            rows //= 2
        changes.append(f"evaluation decodes its {evaluation[0]} prompts x samples at once and at most {rows} rows "
                       "fit: fewer evaluation prompts or samples (arena has no option to decode them in chunks)")
        after = parts(config, k, rows)
    return changes, after, k


def plan_study(study, shape: Shape, gpu_kind: str, gpus: int, weight_bytes: int = 2) -> dict:
    """Per arm: memory by part (bytes per GPU), fits or not, the change that makes it fit, seconds per run and
    GPU-hours over its runs; and the study's totals (``format_plan`` prints it, ``--json`` dumps it)."""
    gpu, spec = GPUS[gpu_kind], study.evaluation
    evaluation = (spec.prompts * spec.samples, spec.max_new_tokens)
    budget, arms, shared = study.budget, {}, 0.0
    for run in study.runs():
        if run.arm in arms:
            arms[run.arm]["runs"] += 1
            continue
        config = run.config
        if not (hasattr(config, "group_size") or hasattr(config, "population")):
            arms[run.arm] = {"method": run.method, "runs": 1, "error": "not a GRPO-family or ES method: not planned"}
            continue
        parts = memory(shape, run.method, config, run.train.prompts_per_step, *evaluation, weight_bytes=weight_bytes)
        fits = _fits(parts, gpu)
        changes, after, used = ([], parts, 1) if fits else _fix(shape, gpu, gpus, run, config, evaluation, weight_bytes)
        step = step_cost(shape, gpu, run.method, config, run.train.prompts_per_step, weight_bytes=weight_bytes)
        per_step = step[budget.unit]
        steps = math.ceil(budget.amount / per_step) if per_step else 0
        decode = _decode_seconds(shape, gpu, evaluation[0], lengths(config, 32, 8, spec.max_new_tokens), 32,
                                 weight_bytes)
        evaluations = (spec.points - 1) + (spec.draws - 1) + (9 if study.matched_decoding else 0)
        seconds = (steps * step["seconds"] + evaluations * decode) / used
        arms[run.arm] = {"method": run.method, "runs": 1, "memory": parts, "fits": fits, "changes": changes,
                         "peak_after_changes": after["peak"], "gpus_per_run": used, "steps": steps,
                         "step_seconds": {k: step[k] for k in ("rollout", "scoring", "optimizer", "perturb")
                                          if k in step},
                         "evaluation_seconds": evaluations * decode, "run_hours": seconds / 3600}
        shared = 2 * spec.draws * decode  # the starting decode and the hard subset of every draw, once a study
    for arm in arms.values():
        if "run_hours" in arm:
            arm["gpu_hours"] = arm["run_hours"] * arm["runs"] * arm["gpus_per_run"]
    total = sum(arm.get("gpu_hours", 0.0) for arm in arms.values()) + shared / 3600
    return {"study": study.name, "profile": study.profile, "gpu": gpu_kind, "gpus": gpus,
            "shape": dataclasses.asdict(shape),
            "prompt_tokens": PROMPT_TOKENS, "mfu": MFU, "bandwidth_use": BANDWIDTH_USE, "usable": USABLE,
            "budget": {"unit": budget.unit, "amount": budget.amount}, "arms": arms, "gpu_hours": total,
            "wall_hours": total / gpus}


def format_plan(plan: dict) -> str:
    gpu = GPUS[plan["gpu"]]
    shape = Shape(**plan["shape"])
    lines = [f"plan for {plan['study']} at {plan['profile'] or 'the study model'} ({shape.parameters():,} parameters) "
             f"on {plan['gpus']} x {gpu['name']}: memory per GPU in GiB (fits under {USABLE:.0%} of "
             f"{gpu['memory'] / 1e9:.0f} GB), time at MFU {MFU['scoring']} (scoring) / {MFU['decoding']} (decoding) "
             f"of {gpu['peak'] / 1e12:.0f} TFLOP/s and {BANDWIDTH_USE} of {gpu['bandwidth'] / 1e12:.2f} TB/s", ""]
    names = ("weights", "trainable", "gradients", "optimizer", "masters", "reference", "activations", "rollout",
             "evaluation", "peak")
    width = max(len(a) for a in plan["arms"]) + 1
    lines.append(f"{'arm':<{width}}" + "".join(f"{n[:11]:>12}" for n in names) + "  fits  change that makes it fit")
    for name, arm in plan["arms"].items():
        if "error" in arm:
            lines.append(f"{name:<{width}} {arm['error']}")
            continue
        memory = arm["memory"]
        fix = "" if arm["fits"] else "; ".join(arm["changes"]) + f" (peak {arm['peak_after_changes'] / GIB:.1f})"
        lines.append(f"{name:<{width}}" + "".join(f"{memory[n] / GIB:>12.2f}" for n in names)
                     + f"  {'yes' if arm['fits'] else 'NO':>4}  {fix}")
    lines += ["", f"{'arm':<{width}} {'runs':>4} {'steps':>6} {'s/step':>8} {'of which':<40} {'eval h':>7} "
                  f"{'h/run':>7} {'GPUs':>4} {'GPU-h':>8}"]
    for name, arm in plan["arms"].items():
        if "error" in arm:
            continue
        phases = ", ".join(f"{k} {v:.0f}" for k, v in arm["step_seconds"].items())
        lines.append(f"{name:<{width}} {arm['runs']:>4} {arm['steps']:>6} {sum(arm['step_seconds'].values()):>8.1f} "
                     f"{phases:<40} {arm['evaluation_seconds'] / 3600:>7.2f} {arm['run_hours']:>7.2f} "
                     f"{arm['gpus_per_run']:>4} {arm['gpu_hours']:>8.1f}")
    lines += ["", f"study: {plan['gpu_hours']:.1f} GPU-hours, about {plan['wall_hours']:.1f} h on {plan['gpus']} GPU"
                  f"{'s' if plan['gpus'] > 1 else ''} (runs spread over them); a planning approximation: prompts of "
                  f"{PROMPT_TOKENS} tokens, {TOKENS_PER_STEP} tokens a decoding step at threshold < 1, attention FLOPs "
                  "left out (arena/plan.py states each number's source)",
              f"host memory: each run also keeps a copy of the starting weights on the host for eval/weight_drift "
              f"({shape.parameters() * 2 / GIB:.1f} GiB in bf16), besides the checkpoint loading's"]
    return "\n".join(lines)
