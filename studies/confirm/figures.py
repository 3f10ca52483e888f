"""The two figures of docs/results.md, drawn from the archived runs (never from typed numbers), and the verdict
families of ``families.py`` printed on the way (each study is read once for both):

    mkdir /tmp/families && cd /tmp/families && arena import /path/to/arena/archive
    python /path/to/arena/studies/confirm/figures.py sqlite:///mlflow.db /path/to/arena/docs/results

(about 15 minutes on 2 loaded cores; the repository keeps the PNGs, reduced to 64 colours, not the PDFs)

    forest.{png,pdf}            every difference of the verdict families (families.py): each arm's tail gain
                                minus its reference's, its 95% interval over seeds and the pooled evaluation draws, and
                                the registered margin as a grey band
    multiblock_flops.{png,pdf}  tail gain against token-FLOPs for every method on the multi-block testbed: each
                                confirmation's curves (equal samples, FLOPs and seconds) and ES across budgets with
                                its block-GRPO target, mean over seeds and 95% t band over seeds, on draw 0
"""
import functools
import sys
from pathlib import Path

import families
import numpy as np

from arena.report import comparison, figures, stats

HERE = Path(__file__).parent
FLOPS_STUDIES = {  # multi-block studies -> line style (the budget each was matched on)
    HERE / "multiblock.yaml": ("-", "equal samples"), HERE / "multiblock_flops.yaml": ("--", "equal FLOPs"),
    HERE / "multiblock_wallclock.yaml": (":", "equal seconds"),
    HERE.parent / "multiblock_es_scaling.yaml": ("-.", "ES across budgets"),
    HERE.parent / "multiblock_es_scaling_grpo.yaml": ("-.", "ES across budgets"),
}
METHODS = ("block_grpo", "grpo", "diffu_grpo", "es")  # one colour each, as arena report's arm order
VERDICT_MARKERS = {"different": "o", "inconclusive": "s"}  # anything else: equivalent within the margin
STUDY_LABELS = {  # a study's stem -> the testbed and the condition it names in the forest plot
    "es_vs_blockgrpo": "short, equal samples", "es_vs_blockgrpo_flops": "short, equal FLOPs",
    "es_vs_blockgrpo_wallclock": "short, equal seconds", "multiblock": "multi-block, equal samples",
    "multiblock_flops": "multi-block, equal FLOPs", "multiblock_wallclock": "multi-block, equal seconds",
    "silent_bugs": "short", "multiblock_silent_bugs": "multi-block", "estimators": "short, equal samples",
    "estimators_forward_tokens": "short, equal forward tokens", "multiblock_estimators": "multi-block, equal samples",
}


def forest_figure(rows: list[dict]):
    """One whisker per registered difference, grouped by question, the margin band behind them."""
    from matplotlib.figure import Figure

    order = list(dict.fromkeys(row["question"] for row in rows))
    rows = sorted(rows, key=lambda row: order.index(row["question"]))  # stable: each question's studies in order
    figure = Figure(figsize=(figures.WIDTH * 2, 0.22 * len(rows) + 0.9), layout="constrained")
    axis = figure.add_subplot()
    margin = rows[0]["analysis"].margin
    axis.axvspan(-margin, margin, color="0.88", zorder=0)
    axis.axvline(0, color="0.5", linewidth=0.6)
    labels = []
    for i, row in enumerate(rows):
        d, verdict = row["found"].difference, row["found"].verdict
        y = len(rows) - 1 - i
        axis.errorbar(d.value, y, xerr=[[d.value - d.low], [d.high - d.value]], fmt=VERDICT_MARKERS.get(verdict, "D"),
                      color="black" if verdict == "different" else "0.4", markersize=3.5, capsize=2, linewidth=0.9)
        labels.append(f"{STUDY_LABELS.get(row['study'], row['study'])}: {row['arm']} − {row['reference']}")
    axis.set_yticks(range(len(rows))[::-1], labels)
    axis.set_xlabel(f"difference in tail gain, 95% interval (grey: the margin ±{margin})")
    axis.grid(axis="x", linewidth=0.4, color="0.9")
    return figure


def flops_figure(read):
    """Tail gain against token-FLOPs: one curve per (study, arm), colour by method, line style by study; every
    curve starts at (0, 0), so the axis is linear."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    colors = figures.arm_colors(METHODS)
    figure = Figure(figsize=(figures.WIDTH * 2, 3.8), layout="constrained")
    axis = figure.add_subplot()
    for path, (line, _) in FLOPS_STUDIES.items():
        results = read(path)
        if results is None:
            continue
        bounds = comparison.gain_range(results.study.task)
        for arm in results.arms:
            color = colors[results.study.arms[arm].method]
            mean, low, high = stats.curve_band(results.values(arm, "eval/tail_gain"), bounds)
            x = results.values(arm, "budget/flops").mean(axis=0)
            axis.plot(x, mean, line, color=color, marker=".", markersize=3)
            if low is not None:
                axis.fill_between(x, low, high, color=color, alpha=0.12, linewidth=0)
    axis.set_xlim(left=0)
    axis.set_xlabel(comparison.X_LABELS["flops"])
    axis.set_ylabel("tail gain (lower CVaR$_{0.25}$, end minus start)")
    axis.grid(axis="y", linewidth=0.4, color="0.9")
    methods = [Line2D([], [], color=colors[m], label=m) for m in METHODS]
    conditions = [Line2D([], [], color="0.3", linestyle=line, label=condition)
                  for line, condition in dict.fromkeys(FLOPS_STUDIES.values())]
    figure.legend(handles=methods + conditions, loc="outside lower center", ncols=4)
    return figure


def reduce_png(path: Path) -> None:
    """The PNG as the repository keeps its figures: a 64-colour palette (a tenth of the bytes, the same look)."""
    from PIL import Image

    with Image.open(path) as image:
        reduced = image.convert("RGB").quantize(64)
    reduced.save(path, optimize=True)


def main(uri: str, directory: Path) -> None:
    read = functools.cache(lambda path: families.read(uri, path))
    rows = families.comparisons(uri, lambda _, path: read(path))
    families.report(rows)
    directory.mkdir(parents=True, exist_ok=True)
    with figures.style():
        forest = forest_figure(rows)
        curves = flops_figure(read)
        for name, figure in (("forest", forest), ("multiblock_flops", curves)):
            for suffix in figures.FORMATS:
                figure.savefig(directory / f"{name}.{suffix}")
            reduce_png(directory / f"{name}.png")
    print("wrote", *(directory / f"{name}.png" for name in ("forest", "multiblock_flops")))
    np.set_printoptions(precision=4)
    for path in FLOPS_STUDIES:  # the numbers behind the second figure, for the text
        results = read(path)
        for arm in results.arms if results else ():
            print(f"{path.stem:28s} {arm:12s} flops {results.values(arm, 'budget/flops').mean(axis=0)}"
                  f"  tail gain {results.values(arm, 'eval/tail_gain').mean(axis=0)}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
