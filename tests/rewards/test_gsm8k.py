import json

import pytest

from rewards.gsm8k import GSM8KTask, reference
from conftest import write_records

TASK = GSM8KTask()
SOLUTION = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)


@pytest.mark.parametrize("answer", [SOLUTION, "72", " 72 ", "#### 72", "72.0"])
@pytest.mark.parametrize(
    "completion, reward",
    [
        ("<answer>72</answer>", 1.0),
        ("reasoning\nover lines\n<answer>\n72\n</answer>", 1.0),
        ("<answer>$72.00</answer>", 1.0),
        ("<answer>72 clips</answer>", 1.0),
        ("<answer>The answer is 72.</answer>", 1.0),
        ("<answer>48 + 24 = 72</answer>", 1.0),
        ("<answer>\\boxed{72}</answer>", 1.0),
        ("so the total is \\boxed{72}", 1.0),  # no <answer>: the last box
        ("<answer>72%</answer>", 1.0),
        ("<answer>71</answer>", 0.0),
        ("<answer>-72</answer>", 0.0),
        ("<answer>72.5</answer>", 0.0),
        ("<answer>720</answer>", 0.0),
        ("<answer>7,2</answer>", 0.0),
        ("<answer>72 or 73</answer>", 0.0),  # the last number counts
        ("<answer>72</answer><answer>73</answer>", 0.0),
        ("<answer>seventy-two</answer>", 0.0),
        ("<answer>1e72</answer>", 0.0),
        ("<answer>答案是72</answer>", 1.0),
        ("<answer>80-8</answer>", 0.0),  # a difference, not -8: the last number is 8
        ("72", 0.0),  # no answer tag, no box
        ("<answer>72", 0.0),
        ("", 0.0),
    ],
)
def test_reward_table(completion, reward, answer):
    assert TASK.reward(completion, {"question": "?", "answer": answer}) == reward


@pytest.mark.parametrize(
    "completion, answer",
    [
        ("<answer>1,234</answer>", "1234"),
        ("<answer>1234</answer>", "#### 1,234"),
        ("<answer>−5</answer>", "-5"),
        ("<answer>-5 degrees</answer>", "#### -5"),
        ("<answer>0.50</answer>", "0.5"),
        ("<answer>$1,000,000</answer>", "1000000"),
        ("<answer>" + "9" * 39 + "</answer>", "9" * 39),
    ],
)
def test_numbers_compare_by_value(completion, answer):
    assert TASK.reward(completion, {"answer": answer}) == 1.0


def test_reference_reads_the_last_marker():
    assert reference(SOLUTION) == 72
    assert reference("#### 3\n#### 4") == 4
    assert reference("no number") is None


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_loads_the_public_gsm8k_format(tmp_path, suffix):
    rows = [{"question": f"How many? {i}", "answer": f"step one\nstep two\n#### {i}"} for i in range(30)]
    path = write_records(tmp_path, suffix, rows)
    train, heldout = (TASK.examples(s, source=str(path)) for s in ("train", "heldout"))
    assert len(train) + len(heldout) == 30 and heldout
    item = train[0]
    assert item["difficulty"] == 2
    assert TASK.reward(f"<answer>{item['answer'].split('#### ')[1]}</answer>", item) == 1.0
    assert "<answer></answer>" in TASK.prompt(item) and item["question"] in TASK.prompt(item)


def test_rows_without_a_final_number_are_rejected(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "no number"}) + "\n")
    with pytest.raises(ValueError, match="record 0"):
        TASK.examples("train", source=str(path))
