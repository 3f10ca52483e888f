"""The tables of a study (``summary.md``, ``table.tex``, and the summary ``arena run`` prints), typeset from numbers
already computed: one row per arm and control, no generated prose. Every cell of an interval is written by
``estimate_cell``, so the printed summary and ``summary.md`` show the same text for the same number. A missing
interval or test reads "n/a (why)", never a made-up number."""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

from arena.report.stats import SEEDS_AND_EVALUATION, SEEDS_ONLY, Interval


@dataclass
class Comparison:
    """An arm's tail gain against the reference arm's."""

    difference: Interval
    p: float
    p_adjusted: float
    tost: float  # nan without a margin
    tost_adjusted: float
    verdict: str


@dataclass
class Row:
    """One arm (or control) of the table; ``comparison`` is None for the reference and the controls."""

    arm: str
    seeds: int  # 0: a control
    control: bool
    tail_gain: Interval
    over_sharpen: Interval | None  # tail gain minus the sharpening control's (None: no sharpen control, or it)
    hard_gain: Interval
    mean_gain: Interval
    seed_sd: float  # SD over seeds of the final tail gain (each seed's mean over draws); nan: one seed, a control
    between_draws: float  # SD over evaluation draws of the arm's mean tail gain, measured (nan: one draw)
    area: Interval | None  # tail-reward AUC, t over seeds (None: a control)
    mean_reward: Interval  # at the end, t over seeds
    budget: float  # mean over seeds, in the study's unit
    seconds: float  # mean training wall-clock seconds over seeds
    comparison: Comparison | None
    reference: bool = False


@dataclass
class DrawRow:
    """One arm (or control) on each evaluation draw alone, then pooled over the draws the verdicts use."""

    arm: str
    control: bool
    gains: list[Interval]  # tail gain on draw 0, 1, ..., then pooled
    differences: list[Interval] | None  # minus the reference's, likewise (None: the reference, or no reference run)


@dataclass
class MatchedRow:
    """A trained arm at its own best temperature against the sharpening control (``comparison.matched_rows``)."""

    arm: str
    seeds: int
    temperatures: list[float]  # τ each seed chose (x the study's temperature is the one decoded at)
    tail_gain: Interval | None  # at τ (None: the arm's runs predate matched decoding)
    at_study: Interval  # the arm's tail gain at the study's temperature minus sharpen's, for the side-by-side
    comparison: Comparison | None  # tail gain at τ minus sharpen's, judged over the arms that have one


@dataclass
class RankRow:
    """An arm's difference from the reference beside its rank-based sensitivity (``stats.hodges_lehmann``)."""

    arm: str
    difference: Interval  # of means, over seeds and evaluation draws: the one the verdict reads
    shift: Interval  # Hodges-Lehmann shift of the seeds' gains, with its Mann-Whitney interval (seeds only)
    p: float  # two-sided Mann-Whitney p, unadjusted


@dataclass
class MarkRow:
    """An arm against the reference at every evaluation mark after the start (``comparison.mark_rows``)."""

    arm: str
    marks: list[Comparison]  # the difference at each mark on draw 0, p values adjusted over the arm's marks
    area: Interval  # tail-reward AUC minus the reference's: the whole curve, t over seeds given the draw


@dataclass
class Setup:
    study: str
    reference: str
    alpha: float
    unit: str
    amount: float
    prompts: int
    samples: int
    missing: list[tuple[str, int]]
    stale: int
    predating: dict  # (arm, seed) -> option params its run was logged without (arena.report.records)
    draws: int = 1
    margin: float | None = None
    correction: str = "holm"
    level: float = 0.05
    tail_prompts: int = 0  # prompts in one run's tail
    tail_union: int = 0  # distinct prompts in the union of every run's tail
    draw_size: tuple[int, int] | None = None  # (prompts, samples) of draws 1..draws-1 (None: as draw 0)
    pooled: tuple[int, ...] = ()  # the draws the verdicts pool (Study.pooled_draws)
    composition: list[str] = ()  # the draws' prompts by level and in common (comparison.draw_composition)
    labels: dict[str, str] = field(default_factory=dict)  # arm -> its name in the tables (Study.labels); else its id

    def name(self, arm: str, control: bool = False, latex: bool = False) -> str:
        """The arm's cell: its label (a control marked so), escaped for a Markdown or a LaTeX table."""
        text = self.labels.get(arm, arm) + (" (control)" if control else "")
        if latex:
            return "".join(f"\\{c}" if c in "&%#_" else c for c in text)
        return text.replace("|", "\\|")

    def sized(self, draw: int) -> tuple[int, int]:
        return (self.prompts, self.samples) if draw == 0 or self.draw_size is None else self.draw_size

    def evaluation_text(self) -> str:
        if self.draws == 1 or self.sized(1) == self.sized(0):
            text = (f"{self.draws} draw{'s' if self.draws != 1 else ''} of {self.prompts} distinct prompts x "
                    f"{self.samples} samples")
        else:
            later = "draw 1" if self.draws == 2 else f"draws 1-{self.draws - 1}"
            text = (f"draw 0 of {self.prompts} distinct prompts x {self.samples} samples at every point, {later} of "
                    f"{self.draw_size[0]} x {self.draw_size[1]} at the start and the end")
        if self.pooled and len(self.pooled) < self.draws:
            text += f"; the verdicts pool draw{'s' if len(self.pooled) > 1 else ''} " + ", ".join(map(str, self.pooled))
        return text


def _number(value: float, signed: bool) -> str:
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _why(seeds: int) -> str:
    return "n/a (no reference run)" if seeds < 0 else f"n/a ({seeds} seed{'s' if seeds != 1 else ''})"


def estimate_cell(estimate: Interval | None, signed: bool = True, latex: bool = False) -> str:
    if estimate is None:
        return "-"
    value = _number(estimate.value, signed)
    if not estimate.has_interval:
        why = "" if estimate.seeds == 0 else f" [{_why(estimate.seeds)}]"  # a control's level has no spread
        return f"{_math(value) if latex else value}{why}"
    low, high = _number(estimate.low, signed), _number(estimate.high, signed)
    if latex:
        return f"{_math(value)} [{_math(low)}, {_math(high)}]"
    return f"{value} [{low}, {high}]"


def _p(p: float) -> str:
    return "n/a" if not math.isfinite(p) else "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def verdict_cell(row: Row, correction: str) -> str:
    if row.reference:
        return "reference"
    if row.comparison is None:
        return "-"
    return judged(row.comparison, row.comparison.difference.seeds, correction)


def judged(c: Comparison, seeds: int, correction: str) -> str:
    """A verdict with its adjusted p; without a p, why not (``seeds``: the fewest behind the difference)."""
    if not math.isfinite(c.p_adjusted):
        return _why(seeds) if seeds < 2 else "n/a (no spread)"
    adjusted = "" if correction == "none" else f" ({correction})"
    return f"{c.verdict}, {_p(c.p_adjusted)}{adjusted}"


def parts_cell(row: Row) -> str:
    """The tail gain's standard error, split: from training seeds / from the evaluation draw."""
    seed = "0" if row.control else "n/a" if math.isnan(row.tail_gain.seed_se) else f"{row.tail_gain.seed_se:.3f}"
    evaluation = "n/a" if math.isnan(row.tail_gain.evaluation_se) else f"{row.tail_gain.evaluation_se:.3f}"
    return f"{seed} / {evaluation}"


COLUMN_NAMES = ("arm", "seeds", "tail", "over_sharpen", "hard", "mean", "se", "sd", "vs_reference", "verdict", "auc",
                "mean_reward", "budget", "seconds")  # short stable names of headers()' columns, in their order
PAPER_COLUMNS = ("arm", "seeds", "tail", "vs_reference", "verdict")  # table.tex's default: a two-column paper's width
TERMINAL_COLUMNS = ("arm", "seeds", "tail", "over_sharpen", "hard", "verdict", "seconds")  # arena run's summary


def column_names(text: str) -> tuple[str, ...]:
    """``--columns``: short names separated by commas, the arm's column first whether named or not, or ``all``;
    ValueError naming each unknown one and listing the known."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return COLUMN_NAMES
    unknown = [name for name in names if name not in COLUMN_NAMES]
    if unknown or not names:
        said = f"unknown column(s) {', '.join(map(repr, unknown))}" if unknown else "no column named"
        raise ValueError(f"{said}; known: {', '.join(COLUMN_NAMES)}, all")
    return tuple(dict.fromkeys(["arm", *names]))


def pick(line: list[str], columns: tuple[str, ...]) -> list[str]:
    """The cells of ``line`` (one per ``COLUMN_NAMES``) in ``columns``."""
    return [line[COLUMN_NAMES.index(name)] for name in columns]


def headers(setup: Setup) -> list[str]:
    return ["arm", "seeds", f"tail gain (α={setup.alpha:g})", "over sharpen", "hard gain", "mean-reward gain",
            "SE: seeds / evaluation", "seed SD / between-draw SD", "vs reference (tail gain)", "verdict",
            "tail-reward AUC", "mean reward at end", f"budget used ({setup.unit.replace('_', ' ')})",
            "train time (s)"]


def cells(row: Row, setup: Setup, latex: bool = False) -> list[str]:
    arm = setup.name(row.arm, row.control, latex)
    sd = lambda v: "n/a" if math.isnan(v) else f"{v:.3f}"  # noqa: E731
    difference = row.comparison.difference if row.comparison else None
    return [arm, "-" if row.control else str(row.seeds), estimate_cell(row.tail_gain, True, latex),
            estimate_cell(row.over_sharpen, True, latex), estimate_cell(row.hard_gain, True, latex),
            estimate_cell(row.mean_gain, True, latex), parts_cell(row), f"{sd(row.seed_sd)} / {sd(row.between_draws)}",
            estimate_cell(difference, True, latex), verdict_cell(row, setup.correction),
            estimate_cell(row.area, False, latex), estimate_cell(row.mean_reward, False, latex),
            "-" if row.control else f"{row.budget:.0f}", "-" if row.control else f"{row.seconds:.0f}"]


def setup_lines(setup: Setup) -> list[str]:
    margin = (f"equivalence margin ±{setup.margin:g} (TOST)" if setup.margin is not None
              else "no equivalence margin declared (no arm can be found equivalent)")
    renamed = [f"{label} = `{arm}`" for arm, label in setup.labels.items() if label != arm]
    lines = [f"- study: `{setup.study}`; reference arm: `{setup.reference}`",
             *([f"- arms by label: {', '.join(renamed)}"] if renamed else []),
             f"- budget: {setup.amount:g} {setup.unit.replace('_', ' ')} per run; tail at α = {setup.alpha:g}; "
             f"evaluation: {setup.evaluation_text()}",
             f"- verdicts: {margin}; tests at level {setup.level:g}, {setup.correction} over the "
             "arms compared with the reference"]
    lines += [f"- evaluation draws: {line}" for line in setup.composition]
    if setup.tail_prompts:
        lines.append(f"- the tail is each run's worst {setup.tail_prompts} prompts; over all runs the tails cover "
                     f"{setup.tail_union} distinct prompts")
    if setup.missing:
        lines.append("- missing (no finished run at the study's configuration): "
                     + ", ".join(f"{arm} seed {seed}" for arm, seed in setup.missing))
    if setup.predating:
        options = sorted({key for keys in setup.predating.values() for key in keys})
        arms = {}
        for arm, _ in setup.predating:
            arms[arm] = arms.get(arm, 0) + 1
        lines.append("- matched by parameters, not by config hash (logged before the code had "
                     + ", ".join(f"`{key}`" for key in options) + ", which the study leaves at the default): "
                     + ", ".join(f"{arm} ({count} seed{'s' if count != 1 else ''})" for arm, count in arms.items()))
    if setup.stale:
        lines.append(f"- left out: {setup.stale} finished runs at an earlier configuration of the study")
    return lines


COLUMNS = f"""\
Columns (docs/reporting.md derives each):

- **tail gain**, **hard gain**, **mean-reward gain**: the mean over seeds and evaluation draws of (end minus start)
  of the tail reward (lower CVaR at α), of the mean reward on the hard prompts (picked on the start model by an
  independent decoding), and of the mean reward; in brackets the {SEEDS_AND_EVALUATION}: Student t with
  Satterthwaite's degrees of freedom on a variance that adds the seeds' part (s² / S) and the evaluation's part (a
  bootstrap over whole prompts, the same prompts for every run). A control has no seed part.
- **over sharpen**: tail gain minus the sharpening control's (the start model decoded at its best temperature,
  chosen on training prompts), same interval definition, with the arm decoded at the study's temperature: a
  policy at T against one at its best τ. The matched comparison (the arm at *its* best τ, chosen by the same
  rule) is in its own table, "at matched decoding";
- **SE: seeds / evaluation**: the two parts of the tail gain's standard error;
- **seed SD / between-draw SD**: the tail gain's SD over seeds, and its SD over the evaluation draws measured
  directly (n/a with one draw; the evaluation SE above predicts it as that SD / sqrt(draws));
- **vs reference**: this arm's tail gain minus the reference arm's (unpaired over seeds, both on the same draws);
- **verdict**: "different" when the two-sided test of that difference rejects after the correction; "equivalent
  within ±m" when two one-sided tests put it inside the study's margin after the correction; else "inconclusive".
  A non-significant difference is never read as no difference;
- **tail-reward AUC**, **mean reward at end**: the tail reward averaged over the budget, and the mean reward at the
  last point, with the {SEEDS_ONLY};
- **budget used**, **train time**: mean over seeds at the last point (training wall-clock, evaluation excluded)."""


def draw_table(rows: list[DrawRow], setup: Setup) -> list[str]:
    """Markdown lines: the tail gain and the difference from the reference on each draw alone, then pooled."""
    if not rows:
        return []
    labels = [f"draw {d} ({' x '.join(map(str, setup.sized(d)))})" for d in range(len(rows[0].gains) - 1)]
    labels.append("pooled: draw" + ("s " if len(setup.pooled) > 1 else " ") + ", ".join(map(str, setup.pooled)))
    head = ["arm"] + [part for label in labels for part in (label, f"vs {setup.reference}")]
    lines = ["", f"## Each evaluation draw alone (tail gain, α={setup.alpha:g})", "",
             "Each cell: the mean over seeds on that draw, in brackets the 95% interval over seeds and that draw's "
             "prompts; the verdicts above use the pooled columns.", "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for row in rows:
        arm = setup.name(row.arm, row.control)
        versus = row.differences or ["reference" if row.arm == setup.reference else "-"] * len(row.gains)
        lines.append("| " + " | ".join([arm] + [cell for gain, other in zip(row.gains, versus) for cell in
                                                 (estimate_cell(gain), other if isinstance(other, str)
                                                  else estimate_cell(other))]) + " |")
    return lines


MATCHED_HEADERS = ["arm", "seeds", "τ chosen", "tail gain at τ", "over sharpen at τ", "verdict at τ",
                   "over sharpen at study T"]
MATCHED_TITLE = "At matched decoding: each trained arm at its own best temperature, chosen as sharpen's"
MATCHED_NOTE = ("τ: the temperature factor each seed chose on training prompts by the sharpening control's rule "
                "(grid, prompts, decoding seeds, tie-break); 'over sharpen at τ' compares the arm at its τ with the "
                "start model at its own, {family}; 'at study T' is the main table's column, beside it")


def matched_cells(row: MatchedRow, setup: Setup) -> list[str]:
    taus = sorted(set(row.temperatures))
    chosen = ", ".join(f"{t:g}" for t in taus) if taus else "-"
    if row.comparison is None:
        why = "n/a (runs predate matched decoding)"
        return [setup.name(row.arm), str(row.seeds), chosen, why, why, "-", estimate_cell(row.at_study)]
    c = row.comparison  # its difference counts sharpen's 0 seeds: the arm's own say why there is no p
    return [setup.name(row.arm), str(row.seeds), chosen, estimate_cell(row.tail_gain), estimate_cell(c.difference),
            judged(c, row.seeds, setup.correction), estimate_cell(row.at_study)]


def matched_family(correction: str) -> str:
    return ("untested" if correction == "none"
            else f"{correction} over the arms compared with sharpen at matched decoding")


def matched_table(rows: list[MatchedRow], setup: Setup) -> list[str]:
    """Markdown lines of the matched-decoding comparison (none without a sharpen control)."""
    if not rows:
        return []
    return ["", f"## {MATCHED_TITLE} (tail gain, α={setup.alpha:g})", "",
            MATCHED_NOTE.format(family=f"verdicts {matched_family(setup.correction)}") + ".", "",
            "| " + " | ".join(MATCHED_HEADERS) + " |", "|---|" + "---:|" * (len(MATCHED_HEADERS) - 1),
            *("| " + " | ".join(matched_cells(row, setup)) + " |" for row in rows)]


def rank_table(rows: list[RankRow], setup: Setup) -> list[str]:
    """Markdown lines: each difference from the reference beside its Hodges-Lehmann shift (none without one)."""
    if not rows:
        return []
    return ["", f"## Rank-based sensitivity (tail gain vs {setup.reference})", "",
            "A sensitivity analysis, not a second verdict: the Hodges-Lehmann shift (the median of every pairwise "
            "difference of the two arms' seed gains, each seed's gain its mean over the pooled draws) with the "
            "interval that inverts the Mann-Whitney test, over seeds only (given the evaluation draws), and the "
            "unadjusted Mann-Whitney p. Where it and the difference of means part, the seeds' distribution has long "
            "tails.", "",
            "| arm | difference of means (the verdict's) | Hodges-Lehmann shift | Mann-Whitney p |", "|---|---:|---:|---:|",
            *(f"| {setup.name(row.arm)} | {estimate_cell(row.difference)} | "
              f"{estimate_cell(row.shift)} | {_p(row.p).removeprefix('p = ')} |" for row in rows)]


def mark_table(rows: list[MarkRow], setup: Setup, marks: list[float]) -> list[str]:
    """Markdown lines: each arm minus the reference at every mark, with its verdict, and the AUC difference."""
    if not rows:
        return []
    unit = setup.unit.replace("_", " ")
    family = "untested" if setup.correction == "none" else f"{setup.correction} over the arm's {len(marks)} marks"
    head = ["arm", *(f"at {mark:g}" for mark in marks), "tail-reward AUC minus the reference's"]
    return ["", f"## Along the budget: tail gain minus {setup.reference}'s at every mark ({unit})", "",
            f"Each mark on draw 0 (the draw every mark decodes): the difference, its interval over seeds and that "
            f"draw's prompts, and its verdict ({family}; margin as above). The last column is the whole curve in "
            f"one number: the difference of the tail reward averaged over the budget, {SEEDS_ONLY}. The order of "
            f"two arms crosses where the sign of the verdicts changes.", "",
            "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1),
            *("| " + " | ".join([setup.name(row.arm),
                                 *(f"{estimate_cell(c.difference)} {c.verdict}" for c in row.marks),
                                 estimate_cell(row.area)]) + " |" for row in rows)]


def markdown(rows: list[Row], setup: Setup, draws: list[DrawRow] = (), matched: list[MatchedRow] = (),
             ranks: list[RankRow] = (), marks: list[MarkRow] = (), mark_values: list[float] = ()) -> str:
    """summary.md: what was compared (facts, no prose), the table, the arms at matched decoding (with a sharpen
    control), the rank-based sensitivity of each difference, the difference at every mark, each evaluation draw
    alone (with two or more), and what each column means."""
    head = headers(setup)
    lines = [f"# {setup.study}: arms at equal budget", "", *setup_lines(setup), "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(cells(row, setup)) + " |" for row in rows]
    return "\n".join(lines + matched_table(list(matched), setup) + rank_table(list(ranks), setup)
                     + mark_table(list(marks), setup, list(mark_values)) + draw_table(list(draws), setup)
                     + ["", COLUMNS]) + "\n"


def aligned(head: list[str], body: list[list[str]]) -> list[str]:
    """Terminal lines: the first column left-aligned, the others right-aligned, two spaces apart."""
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    return ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            for line in [head, *body]]


def stacked(head: list[str], body: list[list[str]]) -> list[str]:
    """The rows of a table for a narrow terminal: per row its first cell, then one indented line per other cell."""
    width = max(map(len, head[1:]))
    return [line for row in body for line in
            [row[0], *(f"  {name:<{width}}  {cell}" for name, cell in zip(head[1:], row[1:]))]]


def text(rows: list[Row], setup: Setup, matched: list[MatchedRow] = (), width: int | None = None) -> str:
    """The summary ``arena run`` prints: the same cells as summary.md, the columns a terminal has room for; then
    the arms at matched decoding, when the study has the sharpen control. A table wider than ``width`` (a narrow
    terminal's) is printed one arm at a time instead, a line per number, so that nothing wraps."""
    tables = [(pick(headers(setup), TERMINAL_COLUMNS), [pick(cells(row, setup), TERMINAL_COLUMNS) for row in rows])]
    if matched:
        tables.append((MATCHED_HEADERS[:6], [matched_cells(row, setup)[:6] for row in matched]))
    layout = aligned if width is None or all(len(line) <= width for line in aligned(*tables[0])) else stacked
    out = layout(*tables[0])
    if matched:
        out += ["", MATCHED_TITLE + ":", *layout(*tables[1])]
    notes = [f"intervals: {SEEDS_AND_EVALUATION} (docs/reporting.md)", setup_lines(setup)[2][2:],
             *([f"at matched decoding: {matched_family(setup.correction)}"] if matched else [])]
    if layout is stacked:
        notes = [textwrap.fill(note, width, subsequent_indent="  ") for note in notes]
    return "\n".join(out + [""] + (notes if layout is stacked else ["; ".join(notes[:2]), *notes[2:]]))


def arm_width(names) -> int:
    """The width of the arm column of the tables ``arena run --dry-run`` and ``arena tune`` print: the longest
    arm name, at least 18."""
    return max([18, *map(len, names)])


def _math(text: str) -> str:
    return "$" + text.replace("−", "-") + "$"


def latex(rows: list[Row], setup: Setup, columns: tuple[str, ...] = PAPER_COLUMNS) -> str:
    """table.tex: a booktabs tabular with the same rows, in ``columns`` (``COLUMN_NAMES``); needs
    ``\\usepackage{booktabs}``."""
    head = [h.replace("_", r"\_").replace("α", r"$\alpha$").replace("±", r"$\pm$")
            for h in pick(headers(setup), columns)]
    lines = [f"% arena report {setup.study}: mean [{SEEDS_AND_EVALUATION}]; AUC and mean reward: {SEEDS_ONLY}.",
             "% needs \\usepackage{booktabs}",
             r"\begin{tabular}{l" + "r" * (len(head) - 1) + "}", r"\toprule",
             " & ".join(head) + r" \\", r"\midrule"]
    lines += [" & ".join(c.replace("±", r"$\pm$") for c in pick(cells(row, setup, latex=True), columns)) + r" \\"
              for row in rows]
    return "\n".join(lines + [r"\bottomrule", r"\end{tabular}"]) + "\n"
