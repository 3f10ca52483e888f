
import pytest

from rewards.math500 import Math500Task, equivalent, reference
from conftest import write_records

TASK = Math500Task()


@pytest.mark.parametrize(
    "answer, gold",
    [
        (r"\frac{1}{2}", "0.5"),
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\tfrac12", r"\frac{1}{2}"),
        ("1/2", r"\frac12"),
        (".5", "0.5"),
        (r"\frac{2}{4}", "0.5"),
        (r"-\frac{125}{16}", "-7.8125"),
        (r"(3,\frac{\pi}{2})", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"90^\circ", "90"),
        (r"90^{\circ}", "90"),
        ("90°", r"90^\circ"),
        (r"\text{Evelyn}", "Evelyn"),
        (r"\text{(C)}", "(C)"),
        (r"5\text{ cm}", "5"),
        ("5.", "5"),
        ("1,000", "1000"),
        ("10{,}000", "10000"),
        (r"10\%", "10"),
        (r"\$32,348", "32,348"),
        ("x = 5", "5"),
        ("6 - 5i", "6-5i"),
        (r"\sqrt2", r"\sqrt{2}"),
        (r"11\sqrt2", r"11\sqrt{2}"),
        (r"\displaystyle \pi", r"\pi"),
        (r"a \rightarrow b", r"a\rightarrow b"),
        (r"x\in[-2,7]", r"x \in [-2, 7]"),
    ],
)
def test_equivalent(answer, gold):
    assert equivalent(answer, gold) and equivalent(gold, answer)


@pytest.mark.parametrize(
    "answer, gold",
    [
        ("", ""),
        ("2", "3"),
        ("0.3", r"\frac13"),
        ("1,2", "12"),
        (r"2\sqrt{2}", r"\sqrt{8}"),  # no symbolic algebra
        (r"a\rightarrow b", "a b"),  # \right only as a whole command
        ("-5", "5"),
        ("1e1", "10"),
        (r"\frac{1}{0}", r"\frac{2}{0}"),
    ],
)
def test_not_equivalent(answer, gold):
    assert not equivalent(answer, gold)


@pytest.mark.parametrize(
    "completion, reward",
    [
        (r"<answer>\boxed{\dfrac{14}{3}}</answer>", 1.0),
        ("Let me think.\n\nSo x = 14/3.\n<answer>\nThe answer is \\boxed{\\frac{14}{3}}.\n</answer>", 1.0),
        (r"therefore \boxed{14/3}", 1.0),
        (r"<answer>14/3</answer>", 1.0),
        (r"<answer>\boxed{\boxed{\frac{14}{3}}}</answer>", 1.0),
        (r"\boxed{1} <answer>\boxed{\frac{14}{3}}</answer>", 1.0),
        (r"<answer>\boxed{1}</answer> \boxed{\frac{14}{3}}", 0.0),  # the answer tag wins
        (r"<answer>\boxed{\frac{14}{3}}, \boxed{2}</answer>", 0.0),  # the last box counts
        (r"<answer>\boxed{\frac{14}{3}</answer>", 0.0),  # unclosed box: the whole answer text
        (r"<answer>\frac{14}{3} because 4.6</answer>", 0.0),
        (r"\boxed{\frac{14}{3}", 0.0),
        (r"<answer>\boxed{}</answer>", 0.0),
        ("", 0.0),
    ],
)
def test_reward_table(completion, reward):
    assert TASK.reward(completion, {"problem": "?", "answer": r"\frac{14}{3}"}) == reward


def test_reference_may_be_a_full_solution():
    assert reference(r"So $x = \boxed{\frac{14}{3}}$.") == r"\frac{14}{3}"
    assert TASK.reward(r"<answer>\boxed{14/3}</answer>", {"answer": r"so \boxed{\dfrac{14}{3}}"}) == 1.0


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_loads_the_public_math500_format(tmp_path, suffix):
    rows = [
        {"problem": f"Compute {i}/3.", "solution": rf"\boxed{{\frac{{{i}}}{{3}}}}", "answer": rf"\frac{{{i}}}{{3}}",
         "subject": "Algebra", "level": 1 + i % 5, "unique_id": f"test/algebra/{i}.json"}
        for i in range(30)
    ]
    path = write_records(tmp_path, suffix, rows)
    train, heldout = (TASK.examples(s, source=str(path)) for s in ("train", "heldout"))
    assert len(train) + len(heldout) == 30 and heldout
    item = heldout[0]
    assert set(item) == {"problem", "answer", "difficulty"} and 1 <= item["difficulty"] <= 5
    assert TASK.reward(rf"<answer>\boxed{{{item['answer']}}}</answer>", item) == 1.0
    assert "\\boxed{...}" in TASK.prompt(item)
