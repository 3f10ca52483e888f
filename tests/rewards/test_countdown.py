import operator
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards.countdown import FORMAT_CREDIT, CountdownTask, evaluate
from rewards.data import is_heldout
from conftest import write_records

TASK = CountdownTask()
EXAMPLE = {"numbers": [44, 19, 35], "target": 98}


@pytest.mark.parametrize(
    "completion, reward",
    [
        ("<answer>44 + 19 + 35</answer>", 1.0),
        ("I think...\nstep 2\n<answer>\n(35 + 19) + 44\n</answer>", 1.0),
        ("<answer>-(-44 - 19 - 35)</answer>", 1.0),
        ("<answer>44 + 19 + 35 = 98</answer>", 1.0),
        ("<answer>44 × 1 + 19 + 35 − 0</answer>", FORMAT_CREDIT),  # extra numbers
        ("<answer>44+19</answer>", FORMAT_CREDIT),  # a number unused
        ("<answer>44+44+19+35</answer>", FORMAT_CREDIT),  # a number twice
        ("<answer>44 + 19 + 35 = 97</answer>", FORMAT_CREDIT),  # stated result wrong
        ("<answer>44 + 19 + 35 = 98 = 98</answer>", FORMAT_CREDIT),
        ("<answer>44 * 19 / 35</answer>", FORMAT_CREDIT),  # wrong value
        ("<answer>44.0 + 19 + 35</answer>", FORMAT_CREDIT),  # decimals are not numbers given
        ("<answer>(44 + 19 + 35</answer>", FORMAT_CREDIT),
        ("<answer>44 + 19 + 35)</answer>", FORMAT_CREDIT),
        ("<answer>44 19 + 35</answer>", FORMAT_CREDIT),
        ("<answer>+44 + 19 + 35</answer>", FORMAT_CREDIT),  # no unary plus
        ("<answer>44 ** 19 ** 35</answer>", FORMAT_CREDIT),  # no power, never evaluated
        ("<answer>__import__('os')</answer>", FORMAT_CREDIT),
        ("<answer>٤٤ + 19 + 35</answer>", FORMAT_CREDIT),  # ASCII digits only
        ("<answer>44 / (19 - 19) + 35</answer>", FORMAT_CREDIT),
        ("<answer></answer>", FORMAT_CREDIT),
        ("<answer>" + "(" * 60 + "44+19+35" + ")" * 60 + "</answer>", FORMAT_CREDIT),  # too long
        ("<answer>44 + 19 + 35</answer><answer>1</answer>", FORMAT_CREDIT),  # the last answer counts
        ("<answer>1</answer><answer>44 + 19 + 35</answer>", 1.0),
        ("44 + 19 + 35", 0.0),
        ("<answer>44 + 19 + 35", 0.0),
        ("", 0.0),
    ],
)
def test_reward_table(completion, reward):
    assert TASK.reward(completion, EXAMPLE) == reward


def test_division_is_exact_and_within_tolerance():
    assert TASK.reward("<answer>(1 + 2) / 3 * 7</answer>", {"numbers": [1, 2, 3, 7], "target": 7}) == 1.0
    assert evaluate("10 / 4") == (Fraction(5, 2), [10, 4])
    assert evaluate("2 - 3 * 4") == (Fraction(-10), [2, 3, 4])
    assert evaluate("2 - 3 - 4")[0] == -5 and evaluate("24 / 4 / 2")[0] == 3  # left-associative


@pytest.mark.parametrize("bad", ["", "1 +", "()", "1 2", "2 ** 3", "a", "1e5", "1.5", "-(", "(1))", "7 % 2"])
def test_evaluator_rejects(bad):
    with pytest.raises(ValueError):
        evaluate(bad)


OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def expression_trees():
    """(text, exact value) of random expressions with binary operators and unary minus."""
    leaf = st.integers(0, 99).map(lambda n: (str(n), Fraction(n)))

    def extend(children):
        binary = (
            st.tuples(children, st.sampled_from(sorted(OPS)), children)
            .filter(lambda t: t[1] != "/" or t[2][1] != 0)
            .map(lambda t: (f"({t[0][0]} {t[1]} {t[2][0]})", OPS[t[1]](t[0][1], t[2][1])))
        )
        return binary | children.map(lambda t: (f"-{t[0]}", -t[1]))

    return st.recursive(leaf, extend, max_leaves=8)


@settings(max_examples=200, deadline=1000)
@given(expression_trees())
def test_evaluator_agrees_with_exact_arithmetic(tree):
    text, value = tree
    if len(text) <= 100:
        assert evaluate(text)[0] == value


def test_generated_items_are_solvable_distinct_and_deterministic():
    items = TASK.examples("train", n=200, seed=3)
    assert items == TASK.examples("train", n=200, seed=3)
    assert items != TASK.examples("train", n=200, seed=4)
    assert TASK.examples("train", n=50, seed=3) == items[:50]
    assert len({(tuple(sorted(x["numbers"])), x["target"]) for x in items}) == len(items)
    for item in items:
        assert len(item["numbers"]) == item["difficulty"] in (3, 4)
        assert all(1 <= n <= 99 for n in item["numbers"]) and 1 <= item["target"] <= 999
        assert TASK.reward(f"<answer>{item['solution']}</answer>", item) == 1.0


def test_generated_splits_are_disjoint():
    def key(x):
        return f"{sorted(x['numbers'])}->{x['target']}"

    train, heldout = (TASK.examples(s, n=100) for s in ("train", "heldout"))
    assert not {key(x) for x in train} & {key(x) for x in heldout}
    assert all(is_heldout(key(x)) for x in heldout)


def test_examples_reject_unknown_split():
    with pytest.raises(ValueError, match="unknown split"):
        TASK.examples("test")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_loads_the_public_countdown_format(tmp_path, suffix):
    rows = [{"target": 10 + i, "nums": [i + 1, 9, 10, 1][: 3 + i % 2]} for i in range(40)]
    path = write_records(tmp_path, suffix, rows)
    train, heldout = (TASK.examples(s, source=str(path)) for s in ("train", "heldout"))
    assert len(train) + len(heldout) == 40 and heldout
    item = train[0]
    assert isinstance(item["numbers"], list) and all(type(n) is int for n in item["numbers"])
    assert item["difficulty"] == len(item["numbers"])
    drawn = TASK.examples("train", n=5, seed=1, source=str(path))
    assert len(drawn) == 5 and drawn == TASK.examples("train", n=5, seed=1, source=str(path))
