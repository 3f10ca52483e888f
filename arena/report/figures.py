"""The figures of a study report, drawn from numbers already computed (``arena.report.stats``); nothing here
reads MLflow or computes a statistic.

One style for all: a paper's single-column width (``WIDTH`` inches, the width of the saved page), 8 pt text, the
Okabe-Ito colour-blind-safe palette with one colour per arm in the study's arm order across every figure, each arm
named by its label, no top or right spine, a light horizontal grid. No statistical note inside a figure: what a band
or a whisker is goes to the caption written beside it (``save_figure``). Each function returns a
``matplotlib.figure.Figure`` (no pyplot state); build and save inside ``style()`` so that every text and tick takes
the style's sizes.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arena.report.stats import Interval

WIDTH = 3.4  # inches: one column of a two-column paper
FONT = 8  # points, every text of every figure
OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
START = "0.45"  # the start profile: grey, dashed
RC = {
    "font.size": FONT, "axes.labelsize": FONT, "axes.titlesize": FONT, "xtick.labelsize": FONT,
    "ytick.labelsize": FONT, "legend.fontsize": FONT, "legend.title_fontsize": FONT, "figure.titlesize": FONT,
    "axes.spines.top": False, "axes.spines.right": False, "axes.linewidth": 0.6, "lines.linewidth": 1.3,
    "xtick.major.width": 0.6, "ytick.major.width": 0.6, "xtick.major.size": 3, "ytick.major.size": 3,
    "legend.frameon": False, "pdf.fonttype": 42, "svg.fonttype": "none", "savefig.dpi": 300,
    # no "tight" bounding box: it grew the page past WIDTH around any long text (4.4-4.6 in); the constrained
    # layout fits labels and legend inside the page instead
}
FORMATS = ("png", "pdf")


@contextlib.contextmanager
def style():
    import matplotlib

    with matplotlib.rc_context(RC):
        yield


def arm_colors(arms) -> dict[str, str]:
    """One colour per arm, in the study's arm order (cycling after eight arms)."""
    return {arm: OKABE_ITO[i % len(OKABE_ITO)] for i, arm in enumerate(arms)}


@dataclass
class Curve:
    """One arm's mean curve over seeds and its 95% band (None: no band, one seed); a band of zero width (every seed
    equal) shows nothing, and the caption names where (``comparison.agreeing``)."""

    arm: str
    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray | None = None
    high: np.ndarray | None = None


@dataclass
class Panel:
    xlabel: str
    ylabel: str
    curves: list[Curve]
    title: str = ""
    references: dict[str, float] = field(default_factory=dict)  # label -> level, drawn as a dashed line (a control)


def _budget_axis(axis, curves: list[Curve]) -> None:
    """Budget tick labels in one scale per axis, short enough not to overlap: 3000, or 20k, 1.5M, 2.5G, 17.5T."""
    top = max((float(np.max(curve.x)) for curve in curves), default=0.0)
    scales = ((1e12, 1e12, "T"), (1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k"))  # from, divide by, suffix
    scale, suffix = next(((by, x) for start, by, x in scales if top >= start), (1.0, ""))
    axis.xaxis.set_major_formatter(lambda value, _position: f"{value / scale:g}{suffix if value else ''}")


def _figure(height: float, rows: int = 1, columns: int = 1, **shared):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH, height), layout="constrained")
    FigureCanvasAgg(figure)  # a renderer to measure the legend with (_legend)
    axes = figure.subplots(rows, columns, squeeze=False, **shared)
    for axis in axes.flat:
        axis.grid(axis="y", color="0.88", linewidth=0.5)
        axis.set_axisbelow(True)
    return figure, axes


def _legend(figure, axis, columns: int) -> None:
    """One legend above the panels, in ``columns`` columns or as few fewer as keep it inside the page's width."""
    handles, labels = axis.get_legend_handles_labels()
    renderer = figure.canvas.get_renderer()
    for count in range(columns, 0, -1):
        legend = figure.legend(handles, labels, loc="outside upper center", ncols=count, handlelength=1.6,
                               columnspacing=1.0, borderaxespad=0.2)
        if count == 1 or legend.get_window_extent(renderer).width <= figure.bbox.width:
            return
        legend.remove()


def _columns(count: int) -> int:
    return count if count <= 3 else 2 if count == 4 else 3


def draw_curve(axis, curve: Curve, color: str, label: str, step: bool = False) -> None:
    """The mean as a line (markers at the evaluation points unless ``step``), the band as a filled area."""
    line = dict(drawstyle="steps-mid") if step else dict(marker="o", markersize=2.5)
    axis.plot(curve.x, curve.mean, color=color, label=label, **line)
    if curve.low is not None:
        axis.fill_between(curve.x, curve.low, curve.high, color=color, alpha=0.2, linewidth=0,
                          step="mid" if step else None)


def curves_figure(panels: list[Panel], colors: dict[str, str], labels: dict[str, str]):
    """Panels stacked vertically (one x axis each), one line and band per arm, one legend on top."""
    figure, axes = _figure(0.5 + 2.0 * len(panels), rows=len(panels))
    for axis, panel in zip(axes[:, 0], panels):
        for curve in panel.curves:
            draw_curve(axis, curve, colors[curve.arm], labels[curve.arm])
        for arm, level in panel.references.items():
            axis.axhline(level, color=colors[arm], linestyle="--", linewidth=1.0, label=f"{labels[arm]} (control)")
        axis.set(xlabel=panel.xlabel, ylabel=panel.ylabel, title=panel.title)
        _budget_axis(axis, panel.curves)
    _legend(figure, axes[0, 0], _columns(len(colors)))
    return figure


def levels_figure(panels: list[Panel], colors: dict[str, str], labels: dict[str, str]):
    """One panel per difficulty level side by side (at most three a row), a shared reward axis."""
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure, axes = _figure(0.6 + 1.9 * rows, rows=rows, columns=columns, sharey=True)
    for axis, panel in zip(axes.flat, panels):
        for curve in panel.curves:
            draw_curve(axis, curve, colors[curve.arm], labels[curve.arm])
        axis.set(title=panel.title)
        _budget_axis(axis, panel.curves)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    figure.supxlabel(panels[0].xlabel, fontsize=FONT)  # one label under the row(s): they share the budget axis
    for axis in axes[:, 0]:
        axis.set_ylabel(panels[0].ylabel)
    _legend(figure, axes[0, 0], _columns(len(colors)))
    return figure


@dataclass
class Dot:
    """One arm's row of the dot plot: the mean, its interval (nan bounds: none) and each seed's value."""

    arm: str
    value: float
    low: float
    high: float
    seeds: np.ndarray


def dot_figure(dots: list[Dot], colors: dict[str, str], labels: dict[str, str], xlabel: str,
               matched: dict[str, Interval] | None = None):
    """Per arm (the first on top): the mean with its 95% interval, each seed as an open circle below it,
    the arm at its own best temperature (``matched``, where it has one) as an open diamond above it, and a
    dashed line at zero."""
    from matplotlib.ticker import MaxNLocator

    figure, axes = _figure(0.75 + 0.32 * len(dots))
    axis = axes[0, 0]
    axis.grid(False)
    axis.grid(axis="x", color="0.88", linewidth=0.5)
    axis.axvline(0.0, color="0.5", linewidth=0.6, linestyle=(0, (3, 2)), label="_zero")
    positions = np.arange(len(dots))[::-1].astype(float)
    for y, dot in zip(positions, dots):
        color = colors[dot.arm]
        axis.scatter(dot.seeds, np.full(len(dot.seeds), y - 0.22), s=10, facecolors="none", edgecolors=color,
                     linewidths=0.7, label="_seeds")
        _whisker(axis, dot, y, color, "o", dot.arm, markerfacecolor=color)
        if dot.arm in (matched or {}):
            _whisker(axis, matched[dot.arm], y + 0.26, color, "D", f"{dot.arm} at τ", markerfacecolor="white")
    axis.xaxis.set_major_locator(MaxNLocator(nbins=5))
    axis.xaxis.set_major_formatter(lambda value, _position: f"{value:g}".replace("-", "\N{MINUS SIGN}"))
    axis.set_yticks(positions, [labels[dot.arm] for dot in dots])
    axis.tick_params(axis="y", length=0)
    axis.spines["left"].set_visible(False)
    axis.set_ylim(positions.min() - 0.55, positions.max() + 0.45)
    figure.supxlabel(xlabel, fontsize=FONT)  # centred on the page: long arm labels leave the axis narrower than it
    return figure


def _whisker(axis, dot: Dot | Interval, y: float, color: str, marker: str, label: str, **style) -> None:
    """The mean at height ``y`` with its interval (a bare marker where it has none)."""
    if np.isfinite(dot.low):
        axis.errorbar(dot.value, y, xerr=[[dot.value - dot.low], [dot.high - dot.value]], fmt=marker, color=color,
                      markersize=4, capsize=2.5, elinewidth=1.3, label=label, **style)
    else:
        axis.plot(dot.value, y, marker, color=color, markersize=4, label=label, **style)


def profile_figure(start: np.ndarray, profiles: list[Curve], gains: list[Curve], colors: dict[str, str],
                   labels: dict[str, str], alpha: float):
    """Top: reward of the p-th worst prompt against p at the end, per arm, and at the start (grey, dashed).
    Bottom: the tail gain at every level p (lower CVaR at p, end minus start), with bands: at p = α it is the
    final tail gain, at p = 1 the mean-reward gain. A dotted line at p = α marks the tail."""
    figure, axes = _figure(4.4, rows=2, sharex=True)
    top, bottom = axes[:, 0]
    top.plot(profiles[0].x, start, color=START, linestyle=(0, (3, 2)), drawstyle="steps-mid", label="start")
    for curve in profiles:
        draw_curve(top, curve, colors[curve.arm], labels[curve.arm], step=True)
    bottom.axhline(0.0, color=START, linewidth=0.6, linestyle=(0, (3, 2)), label="_zero")
    for curve in gains:
        axis_line = dict(color=colors[curve.arm], label=labels[curve.arm])
        bottom.plot(curve.x, curve.mean, **axis_line)
        if curve.low is not None:
            bottom.fill_between(curve.x, curve.low, curve.high, color=colors[curve.arm], alpha=0.2, linewidth=0)
    for axis in (top, bottom):
        axis.axvline(alpha, color="0.3", linewidth=0.6, linestyle=":", label="_alpha")
        axis.set_xlim(0, 1)
    top.text(alpha, 1.0, f" α = {alpha:g}", transform=top.get_xaxis_transform(), va="top", ha="left")
    top.set(ylabel="per-prompt reward at the end")
    bottom.set(ylabel="tail gain at level p\n(lower CVaR, end − start)", xlabel="prompt quantile p (worst first)")
    _legend(figure, top, _columns(len(colors) + 1))
    return figure


def save_figure(figure, directory: Path, name: str, caption: str) -> list[Path]:
    """The figure as ``name.png`` (300 dpi) and ``name.pdf`` in ``directory``, and its caption (what the bands and
    whiskers are, over how many seeds) as ``name.caption.txt``, for a paper's ``\\caption``."""
    paths = [directory / f"{name}.{suffix}" for suffix in FORMATS]
    for path in paths:
        figure.savefig(path)
    paths.append(directory / f"{name}.caption.txt")
    paths[-1].write_text(caption + "\n")
    return paths
