"""The figures of ``arena.report.figures``: a line and a band per arm, one colour per arm, budget ticks, one
column wide on the page, the final gain's whisker."""

import numpy as np
import pytest

from report_support import ARMS, MARKS, assert_one_column, bands_of, lines_of, report_of
from report_support import report_store, synthetic_report  # noqa: F401 (the fixtures store and synthetic)


def test_each_curve_figure_has_one_line_and_one_band_per_arm(synthetic):
    study = synthetic.results.study
    tail = synthetic.figures["tail_reward"].axes
    assert len(tail) == 2  # block_grpo is twice as slow: a second panel at equal wall-clock
    for axis in tail + synthetic.figures["mean_reward"].axes + synthetic.figures["levels"].axes:
        assert [line.get_label() for line in lines_of(axis, ARMS)] == list(ARMS)
        assert len(bands_of(axis)) == len(ARMS)
    assert len(synthetic.figures["levels"].axes) == 2  # levels 1 and 2
    colours = {line.get_label(): line.get_color() for line in lines_of(tail[0], ARMS)}
    for figure in synthetic.figures.values():  # one colour per arm across every figure
        for axis in figure.axes:
            assert all(line.get_color() == colours[line.get_label()] for line in lines_of(axis, ARMS))
    # x: the marks in the study's unit; on the wall-clock panel, the mean logged seconds at each mark
    first, second = (lines_of(axis, ARMS)[1] for axis in tail)  # block_grpo
    assert list(first.get_xdata()) == MARKS
    seconds = [np.mean([(m + 4 * (m > 0)) * 0.2 * (1 + 0.05 * s) for s in study.seeds]) for m in MARKS]
    assert np.allclose(second.get_xdata(), seconds)
    profile_top, profile_bottom = synthetic.figures["tail_profile"].axes
    assert [line.get_label() for line in profile_top.get_lines() if not line.get_label().startswith("_")] == [
        "start", *ARMS]
    assert len(lines_of(profile_bottom, ARMS)) == len(ARMS) and len(bands_of(profile_bottom)) == len(ARMS)
    dots = synthetic.figures["final_tail_gain"].axes[0]
    assert [label.get_text() for label in dots.get_yticklabels()] == list(ARMS)
    assert all(text.get_fontsize() >= 8 for figure in synthetic.figures.values() for axis in figure.axes
               for text in [axis.xaxis.label, axis.yaxis.label, *axis.get_xticklabels(), *axis.get_yticklabels()])


@pytest.mark.parametrize("ticks, labels", [([0, 1000, 2000, 3000], ["0", "1000", "2000", "3000"]),
                                           ([0, 1e4, 2e4], ["0", "10k", "20k"]),
                                           ([0, 1.5e6, 3e6], ["0", "1.5M", "3M"]),
                                           ([0, 5e12, 1e13, 1.5e13], ["0", "5T", "10T", "15T"])])
def test_budget_ticks_are_short_and_in_one_scale(ticks, labels):
    """A FLOPs axis to 1.5e13 once read 0, 5000G, 10000G, 15000G: labels that ran into each other."""
    from arena.report.figures import Curve, _budget_axis, _figure, style

    with style():
        figure, axes = _figure(2.0)
        axis = axes[0, 0]
        axis.set_xticks(ticks)
        _budget_axis(axis, [Curve("a", np.asarray(ticks, dtype=float), np.zeros(len(ticks)))])
        figure.canvas.draw()
        assert [tick.get_text() for tick in axis.get_xticklabels()] == labels


@pytest.mark.parametrize("name", ["synthetic", "pair", "single"])
def test_every_figure_is_one_column_wide_on_the_page(store, name):
    assert_one_column(report_of(store, name))


def test_the_final_gain_whisker_is_the_tables_interval(store):
    """The dot plot draws exactly the row's tail-gain interval (the table's), for each arm and control."""
    for name in ("synthetic", "pair"):
        report = report_of(store, name)
        rows = {row.arm: row for row in report.rows}
        axis = report.figures["final_tail_gain"].axes[0]
        drawn = {c.get_label(): c.lines[2][0].get_segments()[0] for c in axis.containers}  # the whisker's ends
        assert set(drawn) == set(rows)
        for arm, ((low, _), (high, _)) in drawn.items():
            assert (low, high) == pytest.approx((rows[arm].tail_gain.low, rows[arm].tail_gain.high)), arm
