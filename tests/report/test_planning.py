"""``arena report --plan`` (``arena.report.planning``): seeds needed at a planned evaluation size."""
import math

import pytest

from arena.cli import main
from report_support import PROMPTS, SAMPLES
from report_support import report_store  # noqa: F401 (the fixture store)


def plan_rows(store, capsys, *extra: str) -> dict[str, tuple]:
    """``arena report --plan`` on the synthetic study: per comparison, (eval SE, seeds to differ, seeds for equivalence)."""
    folder, uri, _, _ = store
    assert main(["report", str(folder / "synthetic.yaml"), "--tracking-uri", uri, "--plan", "--margin", "0.1",
                 *extra]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        if " vs " in line and not line.startswith("plan"):
            name, rest = line.split("  ", 1)
            fields = rest.replace("none decides", "none").split()
            seeds = [math.inf if f == "none" else int(f) for f in fields[2:4]]
            rows[name.strip()] = (float(fields[1]), *seeds)
    return rows


def test_the_plan_counts_seeds_at_a_planned_evaluation(store, capsys):
    """--evaluation N x k: at the pilot's own size it is the default plan; at a 64x larger evaluation V_e shrinks,
    no comparison needs more seeds, and one that no seed count decided at the pilot's size becomes decidable."""
    default = plan_rows(store, capsys)
    assert set(default) == {"block_grpo vs grpo", "es vs grpo"}
    assert plan_rows(store, capsys, "--evaluation", f"{PROMPTS}x{SAMPLES}") == default
    larger = plan_rows(store, capsys, "--evaluation", f"{16 * PROMPTS}x{4 * SAMPLES}")
    for name, (se, differ, equivalent) in larger.items():
        assert se < default[name][0] and differ <= default[name][1] and equivalent <= default[name][2], name
    assert any(math.isinf(default[n][2]) and not math.isinf(larger[n][2]) for n in larger), (default, larger)


def test_a_malformed_planned_evaluation_is_a_usage_error(store, capsys):
    folder, uri, _, _ = store
    with pytest.raises(SystemExit) as exit_:
        main(["report", str(folder / "synthetic.yaml"), "--tracking-uri", uri, "--plan", "--evaluation", "1024"])
    assert exit_.value.code == 2 and "--evaluation: expected PROMPTSxSAMPLES" in capsys.readouterr().err
