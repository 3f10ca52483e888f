"""The estimator report: ``arena estimators`` writes estimators.json (the records), estimators.md (the table)
and estimators.png (the figure) from what ``arena.estimator_bench.measure`` returned; nothing here measures."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arena.estimator_bench import Measurement

ESTIMATOR_COLUMNS = """\
Columns (nats per completion block unless said otherwise):

- **estimator**, **variant**: the `methods.likelihood` estimator and its options other than the count
  (`name=value`; a flag by its name when on);
- **K / n**: Monte Carlo draws or Gauss-Legendre nodes per block; the block estimators score each
  mask in one noisy view per sub-block (B/S views per mask), `trajectory` in one view per decoding step;
- **forward tokens**, **ms**: tokens through the model and wall milliseconds per scored sequence
  (forward only, batched);
- **bias ± stderr**: mean over blocks of (mean estimate over mask keys − reference), ± the Monte Carlo
  standard error of that mean (an unbiased estimator lies within a few stderr of 0). The reference is
  the sampler's: the sub-block-chain ELBO, each sub-block's ELBO given the earlier sub-blocks clean
  and the later ones masked;
- **std**: spread of one estimate of one block across mask keys;
- **seq std**: spread of one estimate of a whole completion (the sum over its blocks), nats per completion;
- **RMSE**: error of one estimate of one block, bias and spread together;
- **bias vs exact**: bias against the exact log-likelihood of the random-order sampler with sub-blocks
  (a chain over sub-blocks), which the sub-block ELBO bounds from below (with the analytic reference only).

Reading the rows: `elbo form=uniform` (weight 1/t) is unbiased but has infinite variance (a masked token
at small t carries weight 1/t: the second moment diverges like ∫ dt/t, so the measured std does not
settle, and log-ratios between nearby policies reach tens of nats), which is why `form=count` is the
default. `gauss_legendre exact_count` integrates a step function of t and is biased at every node count;
with Bernoulli masks (`exact_count` off) n >= ceil(m_s/2) nodes make it unbiased. `trajectory` is
deterministic (std 0): log p(y | the recorded unmasking order), whose expectation is the exact
log-likelihood plus the KL between the order given y and the uniform order, so its bias is expected
positive here; it is the exact likelihood of what the sampler did, and the reference for
`confidence`-order rollouts, where no ELBO is a bound. `ebpo` has, per block, the law of the 1-draw count-form
`elbo` (exactly so with whole blocks); its levels are stratified across a completion's blocks, which shows in
**seq std**, not in **std**."""


def estimators_table(measurement: Measurement) -> str:
    """The markdown report: what was measured, how to read the columns, one row per estimator setting."""
    m = measurement
    lines = [
        "# Likelihood estimators: bias, spread and cost",
        "",
        f"Model `{m.model}`, {m.sequences} completions sampled at temperature 1 in random unmasking order "
        f"({m.blocks} completion blocks, block size {m.records[0]['block_size']}, sub-blocks of {m.sub_block}), each "
        f"scored under {m.repeats} independent mask keys per setting; reference: the {m.reference} sub-block-chain "
        f"ELBO. Measured in {m.seconds:.0f} s "
        f"on {m.device}. Samples: " + ", ".join(f"`{s[:60]!r}`" for s in m.samples),
        "",
        ESTIMATOR_COLUMNS,
        "",
        "| estimator | variant | K / n | forward tokens | ms | bias ± stderr | std | seq std | RMSE | bias vs exact |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in m.records:
        count = r["draws"] or r["nodes"] or ""
        exact = "" if r["bias_exact"] is None else f"{r['bias_exact']:+.3f}"
        lines.append(
            f"| {r['estimator']} | {r['variant']} | {count} | {r['forward_tokens']:.0f} | {1e3 * r['seconds']:.3f} | "
            f"{r['bias']:+.3f} ± {r['bias_stderr']:.3f} | {r['std']:.3f} | {r['std_sequence']:.3f} | "
            f"{r['rmse']:.3f} | {exact} |"
        )
    return "\n".join(lines) + "\n"


def estimators_figure(measurement: Measurement, path: Path) -> None:
    """Bias (± 2 stderr) and spread against cost, one line per estimator and variant."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    figure = Figure(figsize=(13, 4.5), layout="constrained")
    bias_axis, std_axis = figure.subplots(1, 2)
    families: dict[str, list[dict]] = {}
    for r in measurement.records:
        families.setdefault(f"{r['estimator']} {r['variant']}".strip(), []).append(r)
    for name, group in families.items():
        x = [r["forward_tokens"] for r in group]
        style = "o-" if len(group) > 1 else "s"
        bias_axis.errorbar(x, [r["bias"] for r in group], yerr=[2 * r["bias_stderr"] for r in group], fmt=style,
                           label=name, capsize=2, markersize=4)
        std_axis.plot(x, [r["std"] for r in group], style, label=name, markersize=4)
    bias_axis.axhline(0.0, color="black", linewidth=0.8)
    bias_axis.set(ylabel="bias (nats / block), ± 2 stderr", title=f"bias against the {measurement.reference} sub-block ELBO")
    std_axis.set(ylabel="std across mask keys (nats / block)", title="spread of one estimate")
    costs = sorted({round(r["forward_tokens"]) for r in measurement.records})
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


def write_estimators(measurement: Measurement, directory: Path) -> dict[str, Path]:
    """estimators.json (the records), estimators.md (the table) and estimators.png (the figure) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {suffix: directory / f"estimators.{suffix}" for suffix in ("json", "md", "png")}
    paths["json"].write_text(json.dumps(measurement.records, indent=2) + "\n")
    paths["md"].write_text(estimators_table(measurement))
    estimators_figure(measurement, paths["png"])
    return paths
