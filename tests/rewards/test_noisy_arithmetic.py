"""The testbed's noisy teacher: right with probability q(level), otherwise a plausible carry error."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest

from rewards import get_task
from rewards.noisy_arithmetic import TEACHER_ACCURACY, carry_columns, column_sum, teacher_error

operands = st.integers(0, 9999)


@given(operands, operands)
def test_column_sum_is_the_reversed_sum(a, b):
    assert column_sum(a, b) == str(a + b)[::-1]


@given(operands, operands)
def test_a_dropped_carry_is_the_sum_less_that_carry(a, b):
    """Against arithmetic: dropping the carry out of column c removes 10^(c+1) from the sum, and the
    carries that it would have set off further up are recomputed from the smaller sum. The columns are
    all written, so a dropped final carry leaves leading zeros (1+9999 -> "0000"), as a pupil would."""
    for column in carry_columns(a, b):
        low = 10 ** (column + 1)
        expected = (a % low + b % low) % low + (a // low + b // low) * low  # the columns above, without it
        written = column_sum(a, b, drop_carry_at=column)
        assert int(written[::-1]) == expected and len(written) >= max(len(str(a)), len(str(b)))


@given(operands, operands, st.integers(0, 2**32))
def test_a_teacher_error_is_never_the_right_sum(a, b, seed):
    assert teacher_error(a, b, np.random.default_rng(seed)) != column_sum(a, b)


def test_the_teacher_is_right_at_rate_q_per_level():
    task = get_task("noisy_arithmetic")
    rng = np.random.default_rng(0)
    examples = task.examples("train", n=3000, seed=0)
    for level, q in TEACHER_ACCURACY.items():
        mine = [e for e in examples if e["difficulty"] == level]
        right = sum(task.teacher_answer(e, rng) == e["answer"] for e in mine)
        assert binomtest(right, len(mine), q).pvalue > 1e-3, (level, right / len(mine), q)
    assert task.reward(examples[0]["answer"], examples[0]) == 1.0  # the reward is the right sum, always


def test_levels_can_be_narrowed_and_are_checked():
    task = type(get_task("noisy_arithmetic"))(levels=(1, 2))
    assert {e["difficulty"] for e in task.examples("heldout", n=20)} == {1, 2}
    try:
        type(task)(levels=(4,))
    except ValueError as error:
        assert "levels [4]" in str(error)
    else:
        raise AssertionError("level 4 has no teacher accuracy and must be refused")
