"""One prepared GPU check: correctness of arena's code paths in bf16 on the device, then their speed and
memory on a randomly initialised model with the exact Fast-dLLM v2 7B config; one table.

    python benchmarks/gpu.py [--device cuda] [--small] [--budget-seconds 420] [--out DIR]
    python benchmarks/gpu.py --device cpu --small          # the same code paths on tiny models, ~1-2 min

Part 1, correctness, on the shipped tiny checkpoint (``--model tiny``): the bf16 sampler on the device
against the fp32 CPU reference (token agreement and first divergence; fp32 on the device too); cached
against uncached generation; the packed scorer against one dense forward per block
(``benchmarks.sampler_and_scoring.per_block_scores``); one block_grpo and one ES step against the same
step in fp32 on the CPU (gradient / update cosine). Each row states its pass criterion.

Part 2, measurements, on a random model built on the device in bf16 with the exact 7B config
(its config.json's network fields; ``--small``: a tiny config with the 7B's block 32 / sub-block 8), in
this order (the rows with targets first, so that a short budget still measures them): a bf16 matmul peak
and a copy bandwidth measured in this run (the floors divide by them); one denoising step (32-token block,
cached prefix) in ms against the stock-path GPU anchors and the targets (docs/performance.md); the same step with and
without the sub-block cache (8 of the block's 32 positions forwarded); generation tokens/s
at batch 1 and 64, threshold 1.0 and 0.9; packed scoring forward and forward+backward tokens/s and MFU;
the random checkpoint saved in the real on-disk format and one ``arena run`` of a 2-step study on it with
``--profile fast-dllm-v2-7b --model DIR``, through the whole runner, with an MLflow file store on local
disk (a subprocess with its own copy of the model); the ELBO's cost per sequence for K = 1, 2, 4; the
trajectory estimator's peak memory at B = 32; ES perturb+restore per member, full and low-rank noise; one
block_grpo and one ES step end to end with peak memory, LoRA and full fine-tuning (when the estimated
memory fits and the estimated time fits the budget); ES's overhead share of a member's evaluation; last,
``benchmarks/rehearsal.py`` at the 7B width and full depth (28 layers), one ``arena run`` per method of the main
study, its peak GPU memory against ``arena plan``'s (passes within 15%). With the default budget that row may be
skipped; on its own: ``python -m benchmarks.rehearsal --widths 7b --depths 28 --max-gib 130 --out DIR``.

Random weights give near-uniform predictions: no proposal reaches a 0.9 confidence, so threshold 0.9
decodes one token per step as 1.0 does (real weights decode ~2.6 per step on GSM8K, the paper says);
the rows report tokens per forward. Timings do not depend on weight values otherwise.

Every row is guarded: an exception fills that row's note and the script goes on. A global budget
(``--budget-seconds``) skips the rows that remain once it is spent. ``--out DIR`` writes the table as
``gpu_check.json`` and ``gpu_check.md`` (docs/performance.md takes the Markdown).

Import chain: everything but the ``arena run`` row runs in this process without MLflow or Optuna (the last row,
"import chain", checks that neither was imported); ``arena run`` and the rehearsal run as subprocesses and need
MLflow. Without it those two rows say "mlflow not installed" and the rest runs.

On a GPU machine (written for one H200, 141 GB; on a smaller GPU the rows that do not fit are skipped or report
their out-of-memory error, and the rest run), from the repository root:

    pip install -e .        # arena and its requirements, MLflow included; PyPI's torch is a CUDA build on Linux
    python benchmarks/gpu.py --out gpu_check 2>&1 | tee gpu_check.log

It takes about 7 minutes, most of them the ``--budget-seconds`` budget, prints the table as it fills and writes
it to ``gpu_check/gpu_check.json`` and ``gpu_check/gpu_check.md``. A GPU machine without network: build the wheels
on a connected machine of the same platform and Python (``pip wheel -w wheels .`` in the repository), copy the
folder over and ``pip install --no-index --find-links wheels arena`` there; the script imports arena from the
repository it runs in.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file (python benchmarks/gpu.py): the repo root holds the packages
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from arena.model import load_policy  # noqa: E402
from arena.model.layout import block_causal_mask  # noqa: E402
from arena.model.policy import MASK_TOKEN, Policy, qwen2_config, save_checkpoint  # noqa: E402
from arena.model.kv_cache import BlockCache, BlockCacheView, PrefixCache  # noqa: E402
from arena.model.sampler import SamplerConfig, generate  # noqa: E402
from arena.model.tiny import build_tokenizer, init_weights  # noqa: E402
from arena.profiles import PROFILES  # noqa: E402
from arena.rng import numpy_generator, torch_generator  # noqa: E402
from benchmarks.sampler_and_scoring import per_block_scores  # noqa: E402
from methods.base import make_method  # noqa: E402
from methods.likelihood import ScoringBatch, estimate, sequence_logprob  # noqa: E402
from rewards import get_task  # noqa: E402

# The network fields of the 7B checkpoint's config.json (Qwen2.5-7B's); SMALL keeps its block layout.
CONFIG_7B = {"vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
             "num_attention_heads": 28, "num_key_value_heads": 4, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
             "max_position_embeddings": 32768, "tie_word_embeddings": False}
CONFIG_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "rope_theta": 1e6, "rms_norm_eps": 1e-6, "max_position_embeddings": 4096,
                "tie_word_embeddings": False}  # vocab: the tokenizer's (a 152k-wide head would dominate on a CPU)
BLOCK, SUB_BLOCK = 32, 8

# the GPU anchors (one H200, the stock transformers path) and the targets, both in docs/performance.md
ANCHOR_STEP_MS = {1: 38.6, 64: 81.7}
TARGET_STEP_MS = {1: 10.0, 64: 60.0}
TARGET_MFU, TARGET_ES_SHARE = 0.6, 0.01


@dataclasses.dataclass(frozen=True)
class Scale:
    """Sizes of the measurement part: the 7B run's, or the CPU mode's small ones (same code paths)."""

    gen_batches: tuple[int, int] = (1, 64)
    prompt: int = 96  # prompt tokens (three blocks)
    new_tokens: int = 64  # two generated blocks
    prefix: int = 512  # cached prefix of the isolated denoising step (the anchors')
    score_batch: int = 2
    score_length: int = 1024  # the anchors' packed layout: B = 2, T = 1024
    elbo_length: int = 512
    trajectory_batch: int = 32
    es_prompts: int = 16  # the 7B profile's prompts_per_member
    grpo_prompts: int = 2
    group: int = 6  # the 7B profile's group size
    lora_rank: int = 128  # the 7B profile's
    matmul: int = 8192
    copy_bytes: int = 4 << 30
    repeats: int = 3


SCALE_7B = Scale()
SCALE_SMALL = Scale(gen_batches=(1, 8), prompt=40, new_tokens=32, prefix=64, score_length=128, elbo_length=128,
                    trajectory_batch=4, es_prompts=4, grpo_prompts=2, group=2, lora_rank=8, matmul=256,
                    copy_bytes=16 << 20, repeats=2)


# ---------------------------------------------------------------------------------------------
# the table


@dataclasses.dataclass
class Row:
    part: str
    name: str
    value: str = ""
    reference: str = ""  # floor, anchor or criterion
    status: str = "not run"  # pass | fail | measured | met | missed | skipped | error
    note: str = ""


class Check:
    """Rows run in order under one budget; each guarded, each told how much time is left."""

    def __init__(self, device: str, budget: float):
        self.device, self.rows, self.facts = device, [], {}
        self.deadline = time.perf_counter() + budget
        self.started = time.perf_counter()

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def row(self, part: str, name: str, fn, *args) -> Row:
        row = Row(part, name)
        self.rows.append(row)
        if self.left() <= 0:
            row.status, row.note = "skipped", "budget spent"
        else:
            try:
                row.value, row.reference, row.status, row.note = fn(self, *args)
            except Exception as error:  # a failed row reports and the check goes on
                first_line = (str(error).splitlines() or [""])[0]
                row.status, row.note = "error", f"{type(error).__name__}: {first_line[:300]}"
            finally:
                self.reset_model()
                release(self.device)
        print(format_row(row), flush=True)
        return row

    def reset_model(self) -> None:
        """The measured model as the next row expects it, whatever this one did or where it failed: no LoRA
        layers (peft's ``unload``), no gradients, frozen."""
        big = self.facts.get("big")
        if big is None or big.policy.model is None:
            return
        if hasattr(big.policy.model, "unload"):
            big.policy.model = big.policy.model.unload()
        big.policy.model.zero_grad(set_to_none=True)
        big.policy.model.requires_grad_(False)

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def timed(self, fn, repeats: int, warmup: bool = True):
        """Median seconds of ``fn()`` over ``repeats`` runs (after one warm-up run), and its last result."""
        result, seconds = fn() if warmup else None, []
        for _ in range(repeats):
            self.sync()
            began = time.perf_counter()
            result = fn()
            self.sync()
            seconds.append(time.perf_counter() - began)
        return statistics.median(seconds), result

    @contextlib.contextmanager
    def peak(self, box: dict):
        """``box['gib']``: the peak GPU memory allocated inside (None on a CPU)."""
        cuda = self.device.startswith("cuda")
        if cuda:
            self.sync()
            torch.cuda.reset_peak_memory_stats()
        yield
        box["gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else None


def release(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def gib(value) -> str:
    return "n/a (cpu)" if value is None else f"{value:.1f} GiB"


COLUMNS = (("part", 11), ("name", 38), ("value", 34), ("reference", 40), ("status", 8), ("note", 0))


def format_row(row: Row) -> str:
    return " ".join(f"{getattr(row, c):<{w}}" if w else getattr(row, c) for c, w in COLUMNS)


def markdown(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(c for c, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(getattr(r, c)).replace("|", "\\|") for c, _ in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# part 1: correctness on the shipped tiny checkpoint


def tiny_prompts(policy, n: int) -> list[list[int]]:
    task = get_task("arithmetic")
    return [policy.encode(task.prompt(e)) for e in task.examples("heldout", n=n, seed=0)]


def agreement(reference: list[list[int]], other: list[list[int]]) -> tuple[float, int | None, float]:
    """(share of reference tokens matched at the same position, earliest differing position, share identical)."""
    matched = total = 0
    first = None
    for a, b in zip(reference, other):
        total += len(a)
        matched += sum(x == y for x, y in zip(a, b))
        ended = None if len(a) == len(b) else min(len(a), len(b))  # a shorter completion diverges where it ends
        differ = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), ended)
        if differ is not None:
            first = differ if first is None else min(first, differ)
    identical = sum(a == b for a, b in zip(reference, other)) / len(reference)
    return matched / max(total, 1), first, identical


def sampler_check(check: Check, dtype: torch.dtype, minimum: float):
    reference = load_policy("tiny", device="cpu", dtype=torch.float32)
    policy = load_policy("tiny", device=check.device, dtype=dtype)
    prompts = tiny_prompts(reference, 32)
    config = SamplerConfig(max_new_tokens=16)
    expected = generate(reference, prompts, config, seed=0).tokens
    got = generate(policy, prompts, config, seed=0).tokens
    rate, first, identical = agreement(expected, got)
    value = f"agreement {rate:.4f}, first divergence {first}"
    return value, f"agreement >= {minimum}", "pass" if rate >= minimum else "fail", \
        f"{identical:.0%} of 32 greedy completions identical; {check.device} {str(dtype)[6:]} vs cpu float32"


def cache_check(check: Check, minimum: float):
    policy = load_policy("tiny", device=check.device, dtype=torch.float32)
    prompts = tiny_prompts(policy, 32)
    cached = generate(policy, prompts, SamplerConfig(max_new_tokens=16), seed=0).tokens
    uncached = generate(policy, prompts, SamplerConfig(max_new_tokens=16, use_cache=False), seed=0).tokens
    rate, first, _ = agreement(cached, uncached)
    bf16 = load_policy("tiny", device=check.device, dtype=torch.bfloat16)
    rate16, _, _ = agreement(generate(bf16, prompts, SamplerConfig(max_new_tokens=16), seed=0).tokens,
                             generate(bf16, prompts, SamplerConfig(max_new_tokens=16, use_cache=False), seed=0).tokens)
    return f"agreement {rate:.4f}, first divergence {first}", f"float32 agreement >= {minimum}", \
        "pass" if rate >= minimum else "fail", f"bfloat16: agreement {rate16:.4f}"


def scorer_check(check: Check, tolerance: float):
    diffs = {}
    for dtype in (torch.float32, torch.bfloat16):
        policy = load_policy("tiny", device=check.device, dtype=dtype)
        prompts = tiny_prompts(policy, 8)
        out = generate(policy, prompts, SamplerConfig(max_new_tokens=24), seed=0)
        # whole blocks (sub-block = block), which is what one dense forward per block scores
        batch = ScoringBatch.build(prompts, out.tokens, policy.pad_id, policy.block_size, device=policy.device,
                                   sub_block=policy.block_size)
        with torch.no_grad():
            packed = estimate("masked", policy, batch, (0, 0, 0)).logp
        dense, _ = per_block_scores(policy, batch)
        diffs[dtype] = float((packed.cpu() - dense.cpu()).abs().max())
    fp32 = diffs[torch.float32]
    return f"max |diff| {fp32:.2e} nats", f"float32 <= {tolerance:g} nats", "pass" if fp32 <= tolerance else "fail", \
        f"bfloat16: {diffs[torch.bfloat16]:.2e} nats; masked estimator, packed vs one forward per block"


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))


def one_step(name: str, options: dict, device: str, dtype: torch.dtype, prompts_n: int):
    """One step of method ``name`` on the tiny checkpoint: (gradient or None, update, completion texts)."""
    policy = load_policy("tiny", device=device, dtype=dtype)
    task = get_task("arithmetic")
    examples = task.examples("train", n=prompts_n, seed=0)
    prompts = [policy.encode(task.prompt(e)) for e in examples]
    method = make_method(name, policy, options, seed=0)
    masters = method.master.masters if name != "es" else [method.master.get(n, p) for n, p in method.params]
    before = torch.cat([m.detach().float().cpu().flatten() for m in masters])
    result = method.step(prompts, lambda i, text: task.reward(text, examples[i]), step=0)
    after = torch.cat([m.detach().float().cpu().flatten() for m in masters])
    grads = None
    if name != "es":  # the last inner iteration's (clipped) fp32 gradient stays on the masters
        grads = torch.cat([(m.grad if m.grad is not None else torch.zeros_like(m)).float().cpu().flatten()
                           for m in masters])
    return grads, after - before, [c["text"] for c in result.completions], result.stats


def grpo_check(check: Check, minimum: float):
    options = {"estimator": "elbo", "draws": 2, "group_size": 4, "max_new_tokens": 16, "lr": 1e-4}
    ref_grad, ref_update, ref_texts, _ = one_step("block_grpo", options, "cpu", torch.float32, 4)
    grad, update, texts, stats = one_step("block_grpo", options, check.device, torch.bfloat16, 4)
    same = sum(a == b for a, b in zip(ref_texts, texts)) / len(ref_texts)
    cos = cosine(ref_grad, grad)
    return f"gradient cosine {cos:.6f}", f">= {minimum} vs cpu float32", "pass" if cos >= minimum else "fail", \
        f"update cosine {cosine(ref_update, update):.6f}; {same:.0%} of the logged completions identical; " \
        f"loss {stats['loss']:.4g}"


def es_check(check: Check, minimum: float):
    options = {"population": 8, "sigma": 0.03, "alpha": 0.03, "temperature": 1.0, "max_new_tokens": 8}
    _, ref_update, _, ref_stats = one_step("es", options, "cpu", torch.float32, 8)
    _, update, _, stats = one_step("es", options, check.device, torch.bfloat16, 8)
    cos = cosine(ref_update, update)
    return f"update cosine {cos:.6f}", f">= {minimum} vs cpu float32", "pass" if cos >= minimum else "fail", \
        f"fitness mean {stats['fitness_mean']:.4f} vs {ref_stats['fitness_mean']:.4f} (cpu float32)"


# ---------------------------------------------------------------------------------------------
# part 2: the model, its floors, and the measurements


@dataclasses.dataclass
class Big:
    """The measured model, its config fields and the counts its floors need."""

    policy: Policy
    fields: dict
    scale: Scale

    @property
    def linear_params(self) -> int:
        """Decoder matmul weights a token goes through (q, k, v, o and the SwiGLU), all layers."""
        f = self.fields
        d, head = f["hidden_size"], f["hidden_size"] // f["num_attention_heads"]
        q, kv = f["num_attention_heads"] * head, f["num_key_value_heads"] * head
        return f["num_hidden_layers"] * (2 * d * q + 2 * d * kv + 3 * d * f["intermediate_size"])

    @property
    def head_params(self) -> int:
        return self.fields["hidden_size"] * self.fields["vocab_size"]

    def attention_flops(self, queries: int, keys: int) -> float:
        """QKᵀ and AV of one sequence, every layer, as a dense mask computes them (masked pairs included)."""
        return 4.0 * self.fields["num_hidden_layers"] * self.fields["hidden_size"] * queries * keys

    def kv_bytes_per_token(self) -> int:
        f = self.fields
        head = f["hidden_size"] // f["num_attention_heads"]
        return f["num_hidden_layers"] * 2 * f["num_key_value_heads"] * head * 2  # K and V, bf16

    def step_floor(self, batch: int, prefix: int, check: Check) -> tuple[float, float]:
        """(memory floor, compute floor) of one 32-token denoising forward + its logits, in seconds."""
        weights = 2 * (self.linear_params + self.head_params)  # bf16; embeddings read 32 rows only
        kv = batch * (prefix + BLOCK) * self.kv_bytes_per_token()
        matmuls = 2.0 * (self.linear_params + self.head_params) * BLOCK  # the sampler takes all 32 logits
        flops = batch * (matmuls + self.attention_flops(BLOCK, prefix + BLOCK))
        return (weights + kv) / check.facts["bandwidth"], flops / check.facts["peak"]


def build_model(check: Check, small: bool) -> Big:
    """A random model on the device in bf16 (fp32 on a CPU), keyed init, the tiny character tokenizer."""
    tokenizer = build_tokenizer()
    fields = dict(CONFIG_SMALL, vocab_size=len(tokenizer)) if small else dict(CONFIG_7B)
    fields |= {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id,
               "bos_token_id": tokenizer.pad_token_id}
    from transformers import Qwen2ForCausalLM

    dtype = torch.bfloat16 if check.device.startswith("cuda") else torch.float32
    with torch.device(check.device):  # built in place: a 7B model in fp32 on the host would take 30 GB first
        model = Qwen2ForCausalLM._from_config(qwen2_config(fields), dtype=dtype, attn_implementation="sdpa")
    model = model.to(check.device).eval()  # a no-op unless the device context was not honoured
    init_weights(model, seed=0)
    model.requires_grad_(False)
    policy = Policy(model=model, tokenizer=tokenizer, mask_id=tokenizer.convert_tokens_to_ids(MASK_TOKEN),
                    eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, block_size=BLOCK,
                    sub_block=SUB_BLOCK, source="random init")
    return Big(policy, fields, SCALE_SMALL if small else SCALE_7B)


def random_prompts(big: Big, n: int, length: int, seed: int = 0) -> list[list[int]]:
    """Digits of the character tokenizer (ids with text, so rewards and decoding see characters)."""
    low = big.policy.tokenizer.convert_tokens_to_ids("0")
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(low, low + 10, (n, length), generator=generator).tolist()


def peak_row(check: Check, big: Big):
    n = big.scale.matmul
    dtype = torch.bfloat16 if check.device.startswith("cuda") else torch.float32
    a = torch.randn(n, n, device=check.device, dtype=dtype, generator=torch_generator(0, device=check.device))
    seconds, _ = check.timed(lambda: a @ a, 10)
    check.facts["peak"] = 2 * n**3 / seconds
    buffer = torch.empty(big.scale.copy_bytes // 2, dtype=torch.bfloat16, device=check.device)
    target = torch.empty_like(buffer)
    copy_s, _ = check.timed(lambda: target.copy_(buffer), 10)
    check.facts["bandwidth"] = 2 * big.scale.copy_bytes / copy_s  # read + write
    return (f"{check.facts['peak'] / 1e12:.1f} TFLOP/s, {check.facts['bandwidth'] / 1e9:.0f} GB/s",
            "H200: 740-785 TFLOP/s (anchors), 4.8 TB/s spec", "measured",
            f"{str(dtype)[6:]} matmul {n}^3; device copy of {big.scale.copy_bytes / 2**30:.2f} GiB (read + write)")


def generation_row(check: Check, big: Big, batch: int, threshold: float):
    prompts = random_prompts(big, batch, big.scale.prompt)
    config = SamplerConfig(max_new_tokens=big.scale.new_tokens, threshold=threshold)
    # one warm-up per batch size (the threshold-1.0 row's): a 7B generation at batch 64 takes seconds
    seconds, out = check.timed(lambda: generate(big.policy, prompts, config, seed=0), 1, warmup=threshold == 1.0)
    tokens = sum(map(len, out.tokens))
    forwards = max(max(s) for s in out.steps)
    per_forward = tokens / batch / forwards
    if threshold == 1.0 and batch == big.scale.gen_batches[1]:
        check.facts["trajectory_rows"] = (prompts, out)
    memory, compute = big.step_floor(batch, big.scale.prompt + big.scale.new_tokens // 2, check)
    floor = batch * per_forward / max(memory, compute)
    return (f"{tokens / seconds:,.0f} tok/s, {1e3 * seconds / forwards:.1f} ms/forward",
            f"floor {floor:,.0f} tok/s", "measured",
            f"{forwards} forwards, {per_forward:.2f} tokens per row per forward; prompt {big.scale.prompt}, "
            f"{big.scale.new_tokens} new tokens")


def denoise_row(check: Check, big: Big, batch: int):
    """One step as the sampler runs it: a 32-token block against a PrefixCache, then its 32 logits."""
    policy, prefix = big.policy, big.scale.prefix
    ids = torch.tensor(random_prompts(big, batch, prefix + BLOCK), device=policy.device)
    positions = torch.arange(prefix + BLOCK, device=policy.device).expand(batch, -1)
    valid = torch.ones(batch, prefix + BLOCK, dtype=torch.bool, device=policy.device)
    cache = PrefixCache()
    with torch.no_grad():
        policy.hidden(ids[:, :prefix], positions[:, :prefix],
                      block_causal_mask(positions[:, :prefix], positions[:, :prefix], BLOCK, valid[:, :prefix]), cache)
        cache.commit = False
        mask = block_causal_mask(positions[:, prefix:], positions, BLOCK, valid)

        def step():
            return policy.logits(policy.hidden(ids[:, prefix:], positions[:, prefix:], mask, cache))

        seconds, _ = check.timed(step, max(big.scale.repeats, 5))
    memory, compute = big.step_floor(batch, prefix, check)
    ms = 1e3 * seconds
    status = "measured"
    if batch in TARGET_STEP_MS and not check.facts.get("small"):
        status = "met" if ms <= TARGET_STEP_MS[batch] else "missed"
    anchor = f"; anchor {ANCHOR_STEP_MS[batch]} ms" if batch in ANCHOR_STEP_MS else ""
    return (f"{ms:.2f} ms", f"floor {1e3 * max(memory, compute):.2f} ms (memory {1e3 * memory:.2f}, compute "
            f"{1e3 * compute:.2f}){anchor}", status,
            f"batch {batch}, prefix {prefix} cached; target <= {TARGET_STEP_MS.get(batch, '-')} ms; "
            f"{ms / (1e3 * max(memory, compute)):.1f}x the floor")


def sub_block_step_row(check: Check, big: Big, batch: int):
    """One denoising step without and with the sub-block cache, both timed here: the whole 32-token block against
    the prefix cache and its 32 logits, then the second 8-token sub-block against the prefix cache plus the block's
    kept keys/values (``arena.model.kv_cache.BlockCacheView``) and its 8 logits. A refresh step costs the first."""
    policy, prefix = big.policy, big.scale.prefix
    ids = torch.tensor(random_prompts(big, batch, prefix + BLOCK), device=policy.device)
    positions = torch.arange(prefix + BLOCK, device=policy.device).expand(batch, -1)
    valid = torch.ones(batch, prefix + BLOCK, dtype=torch.bool, device=policy.device)
    in_block = torch.arange(SUB_BLOCK, 2 * SUB_BLOCK, device=policy.device).expand(batch, -1)
    sub = slice(prefix + SUB_BLOCK, prefix + 2 * SUB_BLOCK)
    cache, block = PrefixCache(), BlockCache()
    with torch.no_grad():
        policy.hidden(ids[:, :prefix], positions[:, :prefix],
                      block_causal_mask(positions[:, :prefix], positions[:, :prefix], BLOCK, valid[:, :prefix]), cache)
        cache.commit = False
        mask = block_causal_mask(positions[:, prefix:], positions, BLOCK, valid)
        sub_mask = block_causal_mask(positions[:, sub], positions, BLOCK, valid)
        policy.hidden(ids[:, prefix:], positions[:, prefix:], mask, BlockCacheView(cache, block, None, None))

        def full():
            return policy.logits(policy.hidden(ids[:, prefix:], positions[:, prefix:], mask, cache))

        def cached():
            view = BlockCacheView(cache, block, None, in_block)
            return policy.logits(policy.hidden(ids[:, sub], positions[:, sub], sub_mask, view))

        full_s, _ = check.timed(full, max(big.scale.repeats, 5))
        cached_s, _ = check.timed(cached, max(big.scale.repeats, 5))
    return (f"{1e3 * cached_s:.2f} ms cached, {1e3 * full_s:.2f} ms full", f"{SUB_BLOCK} vs {BLOCK} positions "
            "forwarded", "measured", f"batch {batch}, prefix {prefix} cached; {full_s / cached_s:.2f}x per cached step; "
            "a refresh step costs the full one (benchmarks/sub_block_cache.py counts how often)")


def scoring_batch(big: Big, rows: int, length: int, prompt: int = 64, sub_block: int | None = None) -> ScoringBatch:
    ids = random_prompts(big, rows, length, seed=1)
    return ScoringBatch.build([r[:prompt] for r in ids], [r[prompt:] for r in ids], big.policy.pad_id, BLOCK,
                              device=big.policy.device, sub_block=sub_block)


def packed_flops(big: Big, est, batch: ScoringBatch) -> float:
    """Forward FLOPs of one packed pass: every packed token through the decoder, dense attention over the
    packed length, the head at the scored positions only."""
    n, T = batch.ids.shape
    total = est.forward_tokens // n
    first = batch.completion & (torch.arange(T, device=batch.ids.device) % BLOCK == 0)
    scored = int(est.masks.sum()) + int(first.sum())
    return (2.0 * big.linear_params * est.forward_tokens + n * big.attention_flops(total, total)
            + 2.0 * big.head_params * scored)


def timed_estimate(check: Check, big: Big, batch: ScoringBatch, backward: bool, name: str, **options):
    """(median seconds, the estimate, peak GiB) of estimator ``name`` on ``batch``; with ``backward``, the
    full-parameter backward of its sequence log-probabilities (full fine-tuning's: weight gradients too)."""
    big.policy.model.requires_grad_(backward)

    def run():
        with torch.set_grad_enabled(backward):
            est = estimate(name, big.policy, batch, (0, 0, 0), **options)
            if backward:
                sequence_logprob(est).sum().backward()
                big.policy.model.zero_grad(set_to_none=True)
        return est

    box = {}
    with check.peak(box):
        seconds, est = check.timed(run, big.scale.repeats)
    return seconds, est, box["gib"]


def packed_row(check: Check, big: Big, backward: bool):
    """The ``masked`` estimator with sub-block = block: the anchors' [clean | noisy] layout, 2T tokens."""
    batch = scoring_batch(big, big.scale.score_batch, big.scale.score_length, sub_block=BLOCK)
    seconds, est, peak = timed_estimate(check, big, batch, backward, "masked")
    flops = packed_flops(big, est, batch) * (3 if backward else 1)
    mfu = flops / seconds / check.facts["peak"]
    status = ("met" if mfu >= TARGET_MFU else "missed") if backward and not check.facts.get("small") else "measured"
    return (f"{est.forward_tokens / seconds:,.0f} tok/s, MFU {mfu:.2f}",
            f"anchor {'11,398 tok/s, MFU 0.63' if backward else '34,910 tok/s, MFU 0.69'}" +
            (f"; target MFU >= {TARGET_MFU}" if backward else ""), status,
            f"B={big.scale.score_batch}, T={big.scale.score_length}, {est.forward_tokens} packed tokens; "
            f"{1e3 * seconds:.0f} ms; peak {gib(peak)}")


def elbo_row(check: Check, big: Big, draws: int):
    batch = scoring_batch(big, 1, big.scale.elbo_length)  # one sequence: K = 4 packs 1 + 16 views of it
    seconds, est, peak = timed_estimate(check, big, batch, True, "elbo", draws=draws, form="count")
    return (f"{1e3 * seconds:.1f} ms/sequence fwd+bwd", f"{est.forward_tokens} forward tokens/sequence",
            "measured", f"K={draws}, sub-block {SUB_BLOCK} (views: K x {BLOCK // SUB_BLOCK}); "
            f"T={big.scale.elbo_length}; peak {gib(peak)}")


def trajectory_row(check: Check, big: Big):
    """Peak memory of the trajectory estimator on real rollouts (the batch-64 generation's first rows)."""
    if "trajectory_rows" not in check.facts:
        raise RuntimeError("needs the batch-64 threshold-1.0 generation row")
    prompts, out = check.facts["trajectory_rows"]
    rows = big.scale.trajectory_batch
    batch = ScoringBatch.build(prompts[:rows], out.tokens[:rows], big.policy.pad_id, BLOCK, device=big.policy.device,
                               steps=out.steps[:rows])
    forward, one = {}, {}
    with check.peak(forward), torch.no_grad():
        est = estimate("trajectory", big.policy, batch, (0, 0, 0))
    big.policy.model.requires_grad_(True)
    with check.peak(one):
        sequence_logprob(estimate("trajectory", big.policy, batch.rows(slice(0, 1)), (0, 0, 0))).sum().backward()
    big.policy.model.zero_grad(set_to_none=True)
    note = f"{est.forward_tokens // rows} packed tokens per row; forward only at B={rows}: {gib(forward['gib'])}; " \
           f"fwd+bwd one row: {gib(one['gib'])}"
    full = {}
    if one["gib"] is not None:
        free = torch.cuda.mem_get_info()[0] / 2**30 + torch.cuda.memory_allocated() / 2**30
        weights = sum(p.numel() * p.element_size() for p in big.policy.model.parameters()) / 2**30
        needed = weights * 2 + (one["gib"] - 2 * weights) * rows  # weights and gradients, then activations per row
        if needed > 0.9 * free:
            return (f"fwd+bwd B={rows}: ~{needed:.0f} GiB (extrapolated)", f"{free:.0f} GiB on the device",
                    "measured", note + f"; B={rows} fwd+bwd not attempted (does not fit: micro-batch it)")
    with check.peak(full):
        sequence_logprob(estimate("trajectory", big.policy, batch, (0, 0, 0))).sum().backward()
    return f"fwd+bwd B={rows}: {gib(full['gib'])}", "", "measured", note


def perturb_row(check: Check, big: Big, noise: str):
    """ES perturb+restore of one member (full-parameter ES); full noise extrapolated from layer 0 when the
    whole would not fit a quarter of the budget left (the noise is drawn on the device, methods.es_noise)."""
    method = make_method("es", big.policy, {"noise": noise, "population": 2}, seed=0)

    def member(params):
        whole, method.params = method.params, params  # time a subset: ask() walks method.params
        try:
            began = time.perf_counter()
            with method.ask(0, 0):
                check.sync()
            check.sync()
            return time.perf_counter() - began
        finally:
            method.params = whole

    count = sum(p.numel() for _, p in method.params)
    probe = [(n, p) for n, p in method.params if ".layers.0." in n]
    note = f"{count:,} parameters"
    if noise == "full" and probe:
        probe_s = member(probe)
        estimate_s = probe_s * count / sum(p.numel() for _, p in probe)
        check.facts["es_full_perturb"] = estimate_s
        if estimate_s > check.left() / 4:
            return (f"~{estimate_s:.1f} s per member (extrapolated)", "", "measured",
                    note + f"; layer 0 alone {probe_s:.2f} s, scaled by parameter count; the whole was not timed")
    seconds = member(method.params)
    check.facts[f"es_{noise}_perturb"] = seconds
    return f"{seconds:.3f} s per member", "", "measured", note + "; noise drawn on the device, keyed"


def method_row(check: Check, big: Big, name: str, trainable: str):
    """One step end to end (rollouts, scoring, update) with the 7B profile's settings (arena/profiles.py: β 0.04,
    LoRA r 128, threshold 0.9, ...), shorter rollouts, a population of 2 and a group of ``scale.group``."""
    scale, policy = big.scale, big.policy
    params = sum(p.numel() for p in policy.model.parameters())
    total = torch.cuda.get_device_properties(0).total_memory if check.device.startswith("cuda") else None
    if trainable == "full":
        # bf16 weights + fp32 masters; GRPO: + bf16 and fp32 gradients, two AdamW moments, the frozen reference
        needed = params * (2 + 2 + 4 + 4 + 8 + 2) if name == "block_grpo" else params * (2 + 4)
        if total is not None and needed > 0.95 * total:
            return ("does not fit", f"needs >= {needed / 2**30:.0f} GiB before activations", "skipped",
                    f"device has {total / 2**30:.0f} GiB: shard with FSDP (docs/distributed.md)")
        if name == "es" and "es_full_perturb" in check.facts:
            expected = 3 * check.facts["es_full_perturb"]  # two members and the update regenerate the noise
            if expected > check.left() / 2:
                return ("not run", f"~{expected:.0f} s estimated (perturb row)", "skipped", "would exceed the budget")
    options = {**PROFILES["fast-dllm-v2-7b"]["methods"][name], "trainable": trainable, "lora_rank": scale.lora_rank,
               "max_new_tokens": scale.new_tokens}
    if name == "block_grpo":
        options |= {"estimator": "elbo", "draws": 2, "group_size": scale.group, "micro_batch": scale.group}
        prompts_n = scale.grpo_prompts
    else:
        options |= {"population": 2, "prompts_per_member": scale.es_prompts}
        prompts_n = scale.es_prompts
    prompts = random_prompts(big, prompts_n, scale.prompt, seed=2)
    # Keyed random rewards: a random model's text carries no signal, and equal rewards would make GRPO's
    # advantages and ES's update vanish (ES skips the noise of a zero coefficient): less work than a real step.
    draws = numpy_generator(0, 1)
    box = {}
    with check.peak(box):
        method = make_method(name, policy, options, seed=0)
        check.sync()
        began = time.perf_counter()
        result = method.step(prompts, lambda i, text: float(draws.random()), step=0)
        check.sync()
        seconds = time.perf_counter() - began
    del method  # Check.row takes the LoRA layers out again
    stats = result.stats
    used = result.consumption
    note = f"{used.samples} samples of {scale.new_tokens} tokens; forward tokens {used.forward_tokens:,}"
    status = "measured"
    if name == "es":
        share = stats["perturb_seconds"] / stats["member_seconds"]
        check.facts[f"es_member_{trainable}"] = stats["member_seconds"]
        note += (f"; per member: perturb+restore {stats['perturb_seconds']:.3f} s, evaluation "
                 f"{stats['member_seconds']:.2f} s = {share:.2%}")
        if not check.facts.get("small"):
            status = "met" if share < TARGET_ES_SHARE else "missed"
        return f"{seconds:.1f} s, peak {gib(box['gib'])}", f"ES target: perturb < {TARGET_ES_SHARE:.0%} of a member", \
            status, note
    return f"{seconds:.1f} s, peak {gib(box['gib'])}", "", status, note + f"; gradient norm {stats['grad_norm']:.3g}"


def es_share_row(check: Check, big: Big):
    """ES perturb+restore over one member's evaluation, for each noise (full-parameter ES's member evaluation
    is the LoRA step's: the same rollouts with the same model size)."""
    member = check.facts.get("es_member_full") or check.facts.get("es_member_lora")
    if member is None:
        raise RuntimeError("needs an ES step row")
    shares = {noise: check.facts[f"es_{noise}_perturb"] / member for noise in ("full", "lowrank")
              if f"es_{noise}_perturb" in check.facts}
    worst = max(shares.values()) if shares else math.inf
    status = "measured" if check.facts.get("small") else ("met" if worst < TARGET_ES_SHARE else "missed")
    return ", ".join(f"{k} {v:.1%}" for k, v in shares.items()), f"target < {TARGET_ES_SHARE:.0%}", status, \
        f"member evaluation {member:.2f} s ({big.scale.es_prompts} prompts x {big.scale.new_tokens} tokens)"


def save_row(check: Check, big: Big, directory: Path):
    began = time.perf_counter()
    save_checkpoint(big.policy.model, big.policy.tokenizer, directory, BLOCK, SUB_BLOCK)
    size = sum(f.stat().st_size for f in directory.iterdir()) / 2**30
    shards = len(list(directory.glob("*.safetensors")))
    check.facts["checkpoint"] = directory
    return f"{time.perf_counter() - began:.1f} s, {size:.3f} GiB", "", "measured", \
        f"{shards} safetensors shards + index, Fast-dLLM v2 config.json (bd_size {BLOCK}), tokenizer; {directory}"


STUDY = """\
# written by benchmarks/gpu.py: two block_grpo steps at the 7B profile, sized to a few minutes
name: gpu_check
model: tiny
task: {{name: gsm8k, source: {data}}}
evaluation: {{prompts: 2, samples: 2, max_new_tokens: 32, points: 2}}
budget: {{unit: samples, amount: {budget}}}
seeds: [0]
at:
  fast-dllm-v2-7b:
    train: {{prompts_per_step: 1}}
    evaluation: {{prompts: 2, samples: 2, max_new_tokens: 32, points: 2}}
reference: block_grpo
arms:
  block_grpo:
    method: block_grpo
    options: {{estimator: elbo, draws: 2}}
    at: {{fast-dllm-v2-7b: {{max_new_tokens: 32, group_size: {group}, micro_batch: {group}}}}}
"""


def arena_run_row(check: Check, group: int, workdir: Path):
    if importlib.util.find_spec("mlflow") is None:
        return "not run", "", "skipped", "mlflow not installed (pip install mlflow; the docstring says how offline)"
    if "checkpoint" not in check.facts:
        raise RuntimeError("needs the saved checkpoint row")
    data = workdir / "gsm8k.jsonl"
    data.write_text("".join(json.dumps({"question": f"Tom has {a} apples and buys {b} more. How many now?",
                                        "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}) + "\n"
                            for a in range(1, 9) for b in range(1, 9)))
    study = workdir / "gpu_check.yaml"
    study.write_text(STUDY.format(data=data, budget=2 * group, group=group))
    uri = (workdir / "mlruns").as_uri()
    command = [sys.executable, "-m", "arena", "run", str(study), "--profile", "fast-dllm-v2-7b", "--model",
               str(check.facts["checkpoint"]), "--tracking-uri", uri, "--workdir", str(workdir / "runs")]
    if check.device.startswith("cuda"):
        command += ["--devices", check.device if ":" in check.device else "cuda:0"]
    began = time.perf_counter()
    env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true"}  # MLflow 3.x refuses file stores unless told
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(30, min(check.left(), 240)))
    seconds = time.perf_counter() - began
    tail = " / ".join((done.stdout + done.stderr).strip().splitlines()[-3:])[-400:]
    logged = {}  # what the file store holds of the child run: train steps, profile, model
    for run in {path.parents[2] for path in (workdir / "mlruns").rglob("metrics/train/reward_mean")}:
        logged = {"steps": len((run / "metrics/train/reward_mean").read_text().split("\n")) - 1,
                  **{name: (run / "params" / name).read_text() for name in ("profile", "model", "options.lora_rank")}}
    passed = done.returncode == 0 and logged.get("steps") == 2 and logged.get("profile") == "fast-dllm-v2-7b" \
        and logged.get("model") == str(check.facts["checkpoint"])
    return f"{seconds:.0f} s, exit {done.returncode}", "2 train steps logged, profile and model recorded", \
        "pass" if passed else "fail", f"file store {uri}: {logged or 'no child run'}; {tail}"


def rehearsal_row(check: Check, small: bool, workdir: Path):
    """``benchmarks/rehearsal.py`` at the 7B width and full depth (28 layers; ``--small``: tiny widths, one layer, one
    method), every method of the main study an ``arena run`` on the GPU, against ``arena plan``'s peak memory."""
    if importlib.util.find_spec("mlflow") is None:
        return "not run", "", "skipped", "mlflow not installed (pip install mlflow; the docstring says how offline)"
    from benchmarks import rehearsal

    methods = ["block_grpo"] if small else list(rehearsal.METHODS)
    rows = rehearsal.rehearse(["7b"], [1 if small else 28], methods, workdir / "rehearsal", tiny=small, max_gib=1e6,
                              timeout=max(60.0, check.left()))
    failed = [f"{r['method']}: {r.get('error') or r.get('skipped')}" for r in rows if "measured" not in r]
    errors = {r["method"]: rehearsal.error(r) for r in rows if "measured" in r}
    peaks = ", ".join(f"{r['method']} {(max(r['measured']['peak'].values()) - r['measured']['baseline']) / 2**30:.1f} "
                      f"GiB ({errors[r['method']]:+.0%})" for r in rows if "measured" in r)
    status = "fail" if failed or not errors else ("measured" if small else
                                                 "pass" if max(map(abs, errors.values())) <= 0.15 else "fail")
    return peaks or "no run", "plan's peak within 15%", status, "; ".join(failed) or rehearsal.markdown(rows).replace(
        "\n", " / ")[-600:]


def import_chain_row(check: Check):
    loaded = [name for name in ("mlflow", "optuna") if name in sys.modules]
    return ("imported: " + ", ".join(loaded)) if loaded else "neither imported", "no mlflow / optuna in-process", \
        "fail" if loaded else "pass", "every row but arena run ran in this process"


# ---------------------------------------------------------------------------------------------


def build_row(check: Check, small: bool):
    began = time.perf_counter()
    big = check.facts["big"] = build_model(check, small)
    params = sum(p.numel() for p in big.policy.model.parameters())
    return f"{params:,} parameters", "" if small else "7,615,616,512 (the 7B config)", "measured", \
        f"{time.perf_counter() - began:.1f} s on {check.device}, {next(big.policy.model.parameters()).dtype}"


def run_check(device: str, small: bool, budget: float, workdir: Path) -> Check:
    check = Check(device, budget)
    check.facts["small"] = small
    # Part 1. Greedy decoding cascades after a flipped near-tie, so bf16 agreement stays below 1 without a
    # bug; the fp32 paths must agree to the token (0.99 leaves room for one tie on a GPU).
    check.row("correctness", "sampler bf16 vs cpu fp32", sampler_check, torch.bfloat16, 0.9)
    check.row("correctness", "sampler fp32 vs cpu fp32", sampler_check, torch.float32, 0.99)
    check.row("correctness", "cached vs uncached generation", cache_check, 0.99)
    check.row("correctness", "packed scorer vs per-block dense", scorer_check, 1e-3)
    check.row("correctness", "block_grpo step bf16 vs cpu fp32", grpo_check, 0.9)
    check.row("correctness", "es step bf16 vs cpu fp32", es_check, 0.9)
    # Part 2. Rows feed each other (peak -> floors; generation -> trajectory; perturb -> ES full); the target
    # rows come first, then the runner (its subprocess loads a second copy: 2 x 15 GB fits), then the rest.
    part, scale = "measure", SCALE_SMALL if small else SCALE_7B
    check.row(part, "build the random model", build_row, small)
    big = check.facts.get("big")
    low, high = scale.gen_batches
    rows = [("matmul peak and copy bandwidth", peak_row)]
    rows += [(f"denoising step batch {b}", denoise_row, b) for b in (low, high)]
    rows += [(f"sub-block cache step batch {b}", sub_block_step_row, b) for b in (low, high)]
    rows += [(f"generate batch {b}, threshold {t}", generation_row, b, t) for b in (low, high) for t in (1.0, 0.9)]
    rows += [("packed scoring forward", packed_row, False), ("packed scoring forward+backward", packed_row, True)]
    rows += [("save checkpoint (real format)", save_row, workdir / "checkpoint")]

    def measure(rows):
        for name, fn, *args in rows:
            if big is None:
                check.rows.append(Row(part, name, status="skipped", note="no model (see the build row)"))
            else:
                check.row(part, name, fn, big, *args)

    measure(rows)
    check.row("runner", "arena run, 2-step study", arena_run_row, scale.group, workdir)
    rows = [(f"elbo K={k} per sequence", elbo_row, k) for k in (1, 2, 4)]
    rows += [(f"trajectory memory B={scale.trajectory_batch}", trajectory_row)]
    rows += [("es perturb+restore, full noise", perturb_row, "full"),
             ("es perturb+restore, low-rank noise", perturb_row, "lowrank")]
    rows += [(f"{m} step, {t}", method_row, m, t) for m in ("block_grpo", "es") for t in ("lora", "full")]
    rows += [("es overhead share", es_share_row)]
    measure(rows)
    check.row("runner", "rehearsal at full depth vs arena plan", rehearsal_row, small, workdir)
    check.row("correctness", "import chain", import_chain_row)
    return check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default: cuda)")
    parser.add_argument("--small", action="store_true", help="a tiny config instead of the 7B one (CPU mode)")
    parser.add_argument("--budget-seconds", type=float, default=420.0, help="skip the remaining rows after this")
    parser.add_argument("--out", type=Path, default=None, help="write gpu_check.json and gpu_check.md here")
    parser.add_argument("--workdir", type=Path, default=None, help="checkpoint and runner files (default: a temp dir)")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device visible (use --device cpu --small)")
    if not args.small and not cuda:
        parser.error("the 7B config needs a GPU: add --small for the CPU mode")
    hardware = torch.cuda.get_device_name(args.device) if cuda else platform.processor() or "cpu"
    now = datetime.datetime.now(datetime.timezone.utc)
    header = (f"benchmarks/gpu.py {now:%Y-%m-%d %H:%M} UTC on {hardware}; torch "
              f"{torch.__version__}, {torch.get_num_threads()} threads; {'small' if args.small else '7B'} config; "
              f"budget {args.budget_seconds:.0f} s")
    print(header)
    print(" ".join(f"{c:<{w}}" if w else c for c, w in COLUMNS))
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        check = run_check(args.device, args.small, args.budget_seconds, workdir)
    elapsed = time.perf_counter() - check.started
    print(f"done in {elapsed:.0f} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {"header": header, "elapsed_seconds": elapsed, "device": args.device, "small": args.small,
                "hardware": hardware, "torch": torch.__version__, "python": platform.python_version()}
        rows = [dataclasses.asdict(r) for r in check.rows]
        (args.out / "gpu_check.json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
        (args.out / "gpu_check.md").write_text(f"{header}; {elapsed:.0f} s\n\n{markdown(check.rows)}")


if __name__ == "__main__":
    main()
