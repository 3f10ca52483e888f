"""The tables of ``arena.report.tables``: the printed summary in a narrow terminal, table.tex's columns by name."""

import pytest

from arena.cli import main
from report_support import table_heads
from report_support import report_store, synthetic_report  # noqa: F401 (the fixtures store and synthetic)


def test_the_printed_summary_fits_a_narrow_terminal_one_arm_at_a_time(synthetic):
    """At 80 columns the summary's table (about 150 wide) is printed one arm per block, a line per number, with
    every cell of the wide table; given no width (a file, a pipe) it stays a table."""
    from arena.report import comparison, tables

    rows, setup = synthetic.rows, comparison.setup(synthetic.results)
    wide, narrow = tables.text(rows, setup), tables.text(rows, setup, width=80)
    assert max(map(len, wide.splitlines())) > 80
    assert all(len(line) <= 80 for line in narrow.splitlines()), narrow
    for row in rows:
        block = narrow.split(f"\n{row.arm}\n", 1)[1] if not narrow.startswith(row.arm) else narrow
        assert f"{row.tail_gain.value:+.3f} [{row.tail_gain.low:+.3f}, {row.tail_gain.high:+.3f}]" in block
        assert tables.verdict_cell(row, "holm") in block.split("\n\n")[0]


def test_the_table_columns_are_chosen_by_short_names(store, capsys):
    """--columns tail,over_sharpen,verdict: those columns after the arm's; all: every column of summary.md; an
    unknown name is a usage error that names it and lists the known ones."""
    folder, uri, _, _ = store
    out = folder / "columns"
    base = ["report", str(folder / "synthetic.yaml"), "--tracking-uri", uri, "--out", str(out)]
    assert main(base + ["--columns", "tail,over_sharpen,verdict"]) == 0
    assert table_heads(out) == ["arm", r"tail gain ($\alpha$=0.25)", "over sharpen", "verdict"]
    assert main(base + ["--columns", "all"]) == 0
    summary = (out / "summary.md").read_text()
    assert len(table_heads(out)) == 14 == summary.splitlines()[[l.startswith("| arm |") for l in
                                                                 summary.splitlines()].index(True)].count("|") - 1
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(base + ["--columns", "tail,nonsense,Verdict"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "unknown column(s) 'nonsense', 'Verdict'" in err
    assert "known: arm, seeds, tail, over_sharpen, hard, mean, se, sd, vs_reference, verdict, auc, mean_reward, " \
        "budget, seconds, all" in err
