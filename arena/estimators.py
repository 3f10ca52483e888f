"""``arena estimators``: bias, spread and cost of every likelihood estimator, on the model's own samples.

The model samples completions of held-out prompts (the arithmetic task, through the model's chat
template if it has one) with the sampler whose likelihood the block estimators target: temperature
1, uniformly random unmasking order over the whole block (sub-block = block). Every estimator and
setting of ``methods.likelihood`` then scores each completion ``repeats`` times under independent
mask keys. Per completion block b, with ē_b the mean and s_b² the variance of the repeats and r_b
the reference:

- reference: the analytic ELBO (first-token term + the in-block ELBO summed over all 2^m mask sets,
  ``methods.oracle``) when the block size is <= 8; otherwise a high-draw Monte Carlo ELBO
  (count form, ``reference_draws`` draws, keys apart from the measured ones);
- bias = mean_b (ē_b - r_b), in nats per block; bias_stderr = sqrt(Σ_b s_b²/R + var(r_b)) / #blocks,
  the Monte Carlo error of that mean given the sampled completions (the blocks are fixed, the masks
  random), so an unbiased estimator has |bias| within a few stderr;
- std = sqrt(mean_b s_b²): the spread of one estimate of one block across mask keys;
- rmse = sqrt(mean_b ((ē_b - r_b)² + s_b²)): the error of one estimate, bias and spread together;
- bias_exact: the same bias against the exact log-likelihood of the random-order sampler (enumerated
  over unmasking orders; only with the analytic reference), which the ELBO bounds from below;
- cost: forward tokens and wall seconds per scored sequence (forward only, batched, this machine).

Token-unit estimators (``ar``, ``d1``) are summed over each block's completion tokens.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from arena.model.sampler import SamplerConfig, generate
from methods.likelihood import ScoringBatch, estimate
from methods.oracle import completion_blocks

EXACT_BLOCK_LIMIT = 8  # the analytic ELBO enumerates 2^(B-1) mask sets per block
CHUNK_TOKENS = 16384  # packed tokens per scoring forward
REFERENCE_CALL_DRAWS = 16  # draws per forward of the Monte Carlo reference


@dataclass(frozen=True)
class Setting:
    estimator: str
    options: dict = field(default_factory=dict)

    @property
    def draws(self) -> int | None:
        return self.options.get("draws")

    @property
    def nodes(self) -> int | None:
        return self.options.get("nodes")

    @property
    def streams(self) -> int:
        """Noisy streams (masks) per sequence: the cost unit of the packed layout."""
        return self.draws or self.nodes or 1

    @property
    def variant(self) -> str:
        """The estimator's options other than its draw/node count."""
        o = self.options
        if self.estimator == "block_elbo":
            return o["form"] + (" antithetic" if o["antithetic"] else "")
        if self.estimator == "block_gauss_legendre":
            return "exact_count" if o["exact_count"] else "bernoulli"
        if self.estimator == "d1":
            return f"p_mask {o['p_mask']}"
        return ""


def settings(draws: list[int], nodes: list[int]) -> list[Setting]:
    """Every estimator, with each draw and node count (antithetic draws come in pairs: even K only)."""
    out = [Setting("ar"), Setting("d1", {"p_mask": 0.15}), Setting("block_masked")]
    for form in ("uniform", "count"):
        for antithetic in (False, True):
            out += [Setting("block_elbo", {"draws": k, "form": form, "antithetic": antithetic})
                    for k in draws if not (antithetic and k % 2)]
    for exact_count in (False, True):
        out += [Setting("block_gauss_legendre", {"nodes": n, "exact_count": exact_count}) for n in nodes]
    return out


@dataclass
class Report:
    records: list[dict]
    model: str
    sequences: int
    blocks: int
    reference: str
    repeats: int
    seconds: float
    device: str  # where the seconds were measured
    samples: list[str]  # a few decoded completions, for the reader


def sample_completions(policy, prompts: list[list[int]], max_new_tokens: int, seed: int):
    config = SamplerConfig(max_new_tokens=max_new_tokens, temperature=1.0, order="random", sub_block=policy.block_size)
    return generate(policy, prompts, config, seed=seed)


def replicate(batch: ScoringBatch, repeats: int) -> ScoringBatch:
    """``repeats`` copies of every row; row r*n + i keys its masks by sample id r*n + i (independent)."""
    n = batch.ids.shape[0]
    return ScoringBatch(batch.ids.repeat(repeats, 1), batch.valid.repeat(repeats, 1),
                        batch.prompt_lengths.repeat(repeats), list(range(n * repeats)), batch.temperature)


def block_values(logp: torch.Tensor, units: torch.Tensor, length: int, block_size: int) -> torch.Tensor:
    """(rows, blocks) per-block estimates; token-unit estimates are summed over each block."""
    if logp.shape[1] == length:
        logp = (logp * units).reshape(logp.shape[0], -1, block_size).sum(-1)
    return logp


@torch.no_grad()
def score(policy, batch: ScoringBatch, setting: Setting, key: tuple[int, ...], repeats: int):
    """(repeats, n, blocks) estimates under independent keys, forward tokens and seconds per sequence."""
    n, T = batch.ids.shape
    many = replicate(batch, repeats)
    per_call = max(1, CHUNK_TOKENS // (T * (1 + setting.streams)))
    values, tokens, seconds = [], 0, 0.0
    for start in range(0, n * repeats, per_call):
        chunk = many.rows(slice(start, start + per_call))
        began = time.perf_counter()
        est = estimate(setting.estimator, policy, chunk, key, **setting.options)
        seconds += time.perf_counter() - began
        tokens += est.forward_tokens
        values.append(block_values(est.logp, est.units, T, policy.block_size))
    values = torch.cat(values).reshape(repeats, n, -1).double().cpu().numpy()
    return values, tokens / (n * repeats), seconds / (n * repeats)


def exact_references(policy, batch: ScoringBatch, prompts, completions, progress: bool):
    """(n, blocks) analytic ELBO and exact random-order log-lik of every completion block (NaN elsewhere)."""
    elbo = np.full((len(prompts), batch.ids.shape[1] // policy.block_size), np.nan)
    exact = elbo.copy()
    for i in tqdm(range(len(prompts)), desc="analytic ELBO", disable=not progress):
        for block in completion_blocks(policy, prompts[i], completions[i], batch.temperature):
            elbo[i, block.index], exact[i, block.index] = block.elbo, block.exact
    return elbo, exact


@torch.no_grad()
def monte_carlo_reference(policy, batch: ScoringBatch, seed: int, calls: int, progress: bool):
    """(n, blocks) mean and variance of the mean of a count-form ELBO of ``calls`` x 16 draws, keys (seed, 1, call)."""
    n, T = batch.ids.shape
    per_call = max(1, CHUNK_TOKENS // (T * (1 + REFERENCE_CALL_DRAWS)))
    samples = []
    for call in tqdm(range(calls), desc="reference ELBO", disable=not progress):
        values = []
        for start in range(0, n, per_call):
            est = estimate("block_elbo", policy, batch.rows(slice(start, start + per_call)), (seed, 1, call),
                           draws=REFERENCE_CALL_DRAWS, form="count")
            values.append(est.draw_values)
        samples.append(torch.cat(values))
    samples = torch.cat(samples, 1).double().cpu().numpy()  # (n, draws, blocks), each draw unbiased
    return samples.mean(1), samples.var(1, ddof=1) / samples.shape[1]


def summarize(values: np.ndarray, counted: np.ndarray, reference: np.ndarray, reference_var: np.ndarray,
              exact: np.ndarray | None) -> dict:
    """Bias (with its stderr), spread and RMSE per block over the counted blocks; see the module docstring."""
    e = values[:, counted]  # (R, blocks)
    R, blocks = e.shape
    mean, var = e.mean(0), (e.var(0, ddof=1) if R > 1 else np.zeros(blocks))
    error = mean - reference[counted]
    return {
        "bias": float(error.mean()),
        "bias_stderr": float(math.sqrt((var / R + reference_var[counted]).sum()) / blocks),
        "std": float(math.sqrt(var.mean())),
        "rmse": float(math.sqrt((error**2 + var).mean())),
        "bias_exact": None if exact is None else float((mean - exact[counted]).mean()),
    }


def measure(policy, prompts: list[list[int]], draws=(1, 2, 4, 8), nodes=(1, 2, 3, 4), repeats: int = 16,
            max_new_tokens: int = 16, seed: int = 0, exact: bool | None = None, reference_draws: int = 512,
            progress: bool = True) -> Report:
    """Sample completions of ``prompts`` and score them with every estimator setting (see the module docstring).

    ``exact`` None: the analytic reference when the block size is <= 8, else the Monte Carlo one, whose
    ``reference_draws`` are rounded up to a multiple of 16.
    """
    began = time.perf_counter()
    B = policy.block_size
    exact = B <= EXACT_BLOCK_LIMIT if exact is None else exact
    generation = sample_completions(policy, prompts, max_new_tokens, seed)
    batch = ScoringBatch.build(prompts, generation.tokens, policy.pad_id, B, temperature=1.0, device=policy.device)
    counted = batch.completion.reshape(len(prompts), -1, B).any(-1).cpu().numpy()
    if exact:
        reference, exact_logp = exact_references(policy, batch, prompts, generation.tokens, progress)
        reference_var = np.zeros_like(reference)
    else:
        calls = -(-reference_draws // REFERENCE_CALL_DRAWS)
        reference, reference_var = monte_carlo_reference(policy, batch, seed, calls, progress)
        exact_logp, reference_draws = None, calls * REFERENCE_CALL_DRAWS
    score(policy, batch.rows(slice(0, 1)), Setting("block_masked"), (seed, 0, 0), 1)  # warm-up, untimed
    records = []
    for setting in tqdm(settings(list(draws), list(nodes)), desc="estimators", disable=not progress):
        values, tokens, seconds = score(policy, batch, setting, (seed, 0, 0), repeats)
        records.append({
            "estimator": setting.estimator, "variant": setting.variant, "options": setting.options,
            "draws": setting.draws, "nodes": setting.nodes, "block_size": B,
            **summarize(values, counted, reference, reference_var, exact_logp),
            "forward_tokens": tokens, "seconds": seconds,
            "reference": "analytic" if exact else f"monte_carlo ({reference_draws} draws)", "repeats": repeats,
        })
    return Report(records, model=policy.source, sequences=len(prompts), blocks=int(counted.sum()),
                  reference=records[0]["reference"], repeats=repeats, seconds=time.perf_counter() - began,
                  device=_device_name(policy), samples=generation.texts[:4])


def _device_name(policy) -> str:
    device = policy.device
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU, {torch.get_num_threads()} torch threads"


# ---------------------------------------------------------------------------------------------
# output: estimators.json, estimators.md, estimators.png


def find(records: list[dict], estimator: str, variant: str | None = None, count: int | None = None) -> dict | None:
    """The first record of ``estimator`` (with that variant and draw/node count, when given)."""
    for r in records:
        if (r["estimator"] == estimator and variant in (None, r["variant"])
                and count in (None, r["draws"], r["nodes"])):
            return r
    return None


def describe(r: dict) -> str:
    count = f"K={r['draws']}" if r["draws"] else f"n={r['nodes']}" if r["nodes"] else ""
    return " ".join(part for part in (r["estimator"], r["variant"], count) if part)


def interpretation(report: Report) -> list[str]:
    """Plain sentences read off the numbers, whichever way they come out."""
    records, lines = report.records, []

    def z(r):
        return abs(r["bias"]) / r["bias_stderr"] if r["bias_stderr"] > 0 else math.inf

    masked = find(records, "block_masked")
    elbo = max((r for r in records if r["estimator"] == "block_elbo" and r["variant"] == "count"),
               key=lambda r: r["draws"], default=None)
    if masked and elbo:
        verdict = "consistent with zero" if z(elbo) < 3 else f"{z(elbo):.1f} stderr from zero"
        lines.append(
            f"Bias against the {report.reference} ELBO: block_masked {masked['bias']:+.3f} nats per block "
            f"(deterministic; its per-block errors have RMS {masked['rmse']:.3f}), the Monte Carlo ELBO "
            f"({describe(elbo)}) {elbo['bias']:+.3f} ± {elbo['bias_stderr']:.3f} ({verdict})."
        )
        if abs(masked["bias"]) < 3 * elbo["bias_stderr"]:
            lines.append(
                "block_masked's bias is within the Monte Carlo ELBO's noise at this sample size. Masking the whole "
                "block equals the ELBO (and the exact likelihood) when a position's conditional ignores the other "
                "in-block tokens; this model is close to that on its own samples."
            )
        if elbo["bias_exact"] is not None:
            lines.append(
                f"The analytic ELBO sits {masked['bias_exact'] - masked['bias']:+.3f} nats per block from the exact "
                f"log-likelihood of the random-order sampler (a lower bound: never positive); block_masked is off "
                f"that exact value by {masked['bias_exact']:+.3f}."
            )
    comparisons = []
    for gl in (r for r in records if r["estimator"] == "block_gauss_legendre" and r["variant"] == "bernoulli"):
        uniform = find(records, "block_elbo", "uniform", gl["nodes"])
        best = min((r for r in records if r["estimator"] == "block_elbo" and r["draws"] == gl["nodes"]),
                   key=lambda r: r["std"], default=None)
        if uniform and best:
            biased = f" (bias {gl['bias']:+.3f} = {z(gl):.0f} stderr)" if z(gl) >= 3 else ""
            comparisons.append(
                f"n={gl['nodes']}: {gl['std']:.3f}{biased} vs {uniform['std']:.3f} uniform-t "
                f"({'lower' if gl['std'] < uniform['std'] else 'higher'}) and {best['std']:.3f} {best['variant']} "
                f"({'lower' if gl['std'] < best['std'] else 'higher'})"
            )
    if comparisons:
        lines.append(
            "Spread at equal cost (n nodes = K draws = noisy streams), Gauss-Legendre with Bernoulli masks vs "
            "Monte Carlo with the same masks (uniform t) and vs the best Monte Carlo form: "
            + "; ".join(comparisons) + "."
        )
    best = min((r for r in records if r["estimator"].startswith("block_")), key=lambda r: r["rmse"])
    lines.append(
        f"Lowest RMSE per block among the block estimators: {describe(best)} at {best['rmse']:.3f}, "
        f"{best['forward_tokens']:.0f} forward tokens per sequence."
    )
    ar, d1 = find(records, "ar"), find(records, "d1")
    if ar and d1:
        lines.append(
            f"ar ({ar['bias']:+.3f}) and d1 ({d1['bias']:+.3f}) score with other attention patterns (causal; the "
            f"whole completion masked at once): their offsets are the mismatch with this sampler, not noise."
        )
    return lines


def markdown(report: Report) -> str:
    head = [
        "# Likelihood estimators: bias, spread and cost",
        "",
        f"Model `{report.model}`, {report.sequences} completions sampled at temperature 1 in random order "
        f"({report.blocks} completion blocks, block size {report.records[0]['block_size']}), {report.repeats} "
        f"independent mask keys per setting, reference: {report.reference} ELBO. Whole report: "
        f"{report.seconds:.0f} s on {report.device}.",
        "",
        "Bias and std in nats per block; bias ± its Monte Carlo stderr; cost per scored sequence "
        "(forward only, batched). Samples: " + ", ".join(f"`{s[:60]!r}`" for s in report.samples),
        "",
        "| estimator | variant | K / n | forward tokens | ms | bias ± stderr | std | RMSE | bias vs exact |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.records:
        count = r["draws"] or r["nodes"] or ""
        exact = "" if r["bias_exact"] is None else f"{r['bias_exact']:+.3f}"
        head.append(
            f"| {r['estimator']} | {r['variant']} | {count} | {r['forward_tokens']:.0f} | {1e3 * r['seconds']:.3f} | "
            f"{r['bias']:+.3f} ± {r['bias_stderr']:.3f} | {r['std']:.3f} | {r['rmse']:.3f} | {exact} |"
        )
    return "\n".join(head + ["", "## Reading", ""] + [f"- {line}" for line in interpretation(report)]) + "\n"


def plot(report: Report, path: Path) -> None:
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    figure = Figure(figsize=(13, 4.5), layout="constrained")
    bias_axis, std_axis = figure.subplots(1, 2)
    families: dict[str, list[dict]] = {}
    for r in report.records:
        families.setdefault(f"{r['estimator']} {r['variant']}".strip(), []).append(r)
    for name, group in families.items():
        x = [r["forward_tokens"] for r in group]
        style = "o-" if len(group) > 1 else "s"
        bias_axis.errorbar(x, [r["bias"] for r in group], yerr=[2 * r["bias_stderr"] for r in group], fmt=style,
                           label=name, capsize=2, markersize=4)
        std_axis.plot(x, [r["std"] for r in group], style, label=name, markersize=4)
    bias_axis.axhline(0.0, color="black", linewidth=0.8)
    bias_axis.set(ylabel="bias (nats / block), ± 2 stderr", title=f"bias against the {report.reference} ELBO")
    std_axis.set(ylabel="std across mask keys (nats / block)", title="spread of one estimate")
    costs = sorted({round(r["forward_tokens"]) for r in report.records})
    for axis in (bias_axis, std_axis):  # symlog: ar and d1 sit tens of nats away from the block estimators
        axis.set(xscale="log", xlabel="forward tokens per sequence")
        axis.set_yscale("symlog", linthresh=0.1)
        axis.set_xticks(costs)
        axis.xaxis.set_major_formatter(ScalarFormatter())
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.grid(alpha=0.3)
    std_axis.set_ylim(bottom=0)
    figure.legend(*std_axis.get_legend_handles_labels(), loc="outside right center", fontsize=8)
    figure.savefig(path, dpi=120)


def write(report: Report, directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {suffix: directory / f"estimators.{suffix}" for suffix in ("json", "md", "png")}
    paths["json"].write_text(json.dumps(report.records, indent=2) + "\n")
    paths["md"].write_text(markdown(report))
    plot(report, paths["png"])
    return paths


# ---------------------------------------------------------------------------------------------
# command line


def _integer(text: str, minimum: int = 1) -> int:
    kind = "a positive" if minimum == 1 else "a non-negative"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {kind} integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {kind} integer, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    return _integer(text)


def _seed(text: str) -> int:
    return _integer(text, minimum=0)


def _int_list(text: str) -> list[int]:
    return [_positive_int(part) for part in text.split(",")]


def cmd_estimators(args) -> None:
    from arena.model import load_policy
    from rewards import get_task

    policy = load_policy(args.model)
    task = get_task("arithmetic")
    examples = task.examples("heldout", n=args.prompts, seed=args.seed)
    prompts = [policy.encode(task.prompt(e, policy.tokenizer)) for e in examples]
    report = measure(policy, prompts, args.draws, args.nodes, args.repeats, args.max_new_tokens, args.seed)
    paths = write(report, args.out)
    print(paths["md"].read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()))


def add_command(subparsers) -> None:
    parser = subparsers.add_parser("estimators", help="bias, spread and cost of every likelihood estimator")
    parser.add_argument("--model", default="tiny", help="'tiny', a checkpoint directory, or a hub id")
    parser.add_argument("--prompts", type=_positive_int, default=32, help="held-out arithmetic prompts")
    parser.add_argument("--draws", type=_int_list, default=[1, 2, 4, 8], help="Monte Carlo draws K, comma separated")
    parser.add_argument("--nodes", type=_int_list, default=[1, 2, 3, 4], help="Gauss-Legendre nodes n, comma separated")
    parser.add_argument("--repeats", type=_positive_int, default=16, help="independent mask keys per setting")
    parser.add_argument("--max-new-tokens", type=_positive_int, default=16)
    parser.add_argument("--seed", type=_seed, default=0, help="keys the prompts, the samples and the masks")
    parser.add_argument("--out", type=Path, default=Path("reports/estimators"), help="output folder")
    parser.set_defaults(run=cmd_estimators)
