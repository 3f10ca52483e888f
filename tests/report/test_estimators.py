"""``arena estimators``'s files (``arena.report.estimators``): the records as JSON, the table with its columns and
reference, the figure, from a small measurement of the sub-block-aware tiny policy."""
import json

from arena.estimator_bench import measure
from arena.report import write_estimators
from rewards import get_task


def test_writes_json_table_and_figure(tiny_policy, tmp_path):
    task = get_task("arithmetic")
    prompts = [tiny_policy.encode(task.prompt(e)) for e in task.examples("heldout", n=2, seed=0)]
    report = measure(tiny_policy, prompts, draws=(1, 2), nodes=(1,), repeats=4, max_new_tokens=4, progress=False)
    paths = write_estimators(report, tmp_path / "out")
    assert json.loads(paths["json"].read_text()) == report.records
    text = paths["md"].read_text()
    assert "Columns" in text and "**bias ± stderr**" in text and "reference: the analytic sub-block-chain ELBO" in text
    assert "sub-blocks of 2" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| estimator")]
    assert [row.split(" | ")[:2] for row in rows] == [[f"| {r['estimator']}", r["variant"]] for r in report.records]
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
