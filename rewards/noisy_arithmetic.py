"""The embedded testbed: addition learned from a noisy teacher, so that RL has something to amplify.

Measured before this task existed (docs/testbed.md, "Why a noisy teacher"): a tiny model pretrained on
clean answers solves the easy prompts and cannot compute the hard ones, so no optimizer moves its tail
within a CPU budget.
A real base model instead *holds* the right behaviour at some rate, and RL raises that rate. This
task builds such a base model: the pretraining teacher writes the correct sum with probability
q(level) and otherwise a plausible carry error, so the pretrained model samples the right answer
about q of the time. The reward (and every held-out answer) is always the correct sum.

Design (the testbed's spec; calibration in docs/testbed.md):

- prompts, answers and reward are those of ``rewards.arithmetic`` (``"57+68="`` -> ``"521"``, LSD first,
  exact match), on difficulty levels 1-3 (operand digits);
- teacher accuracy q = ``TEACHER_ACCURACY`` = 0.8 / 0.5 / 0.3 for levels 1 / 2 / 3;
- a teacher error is, with equal odds where both exist, a dropped carry (one carry of the column
  addition not propagated) or one digit off by one (mod 10); both always differ from the right sum;
- studies train and evaluate on levels 1-2 (``levels: [1, 2]``): level 3 stays near zero after
  pretraining and would pin any tail that includes it.
"""
from __future__ import annotations

import numpy as np

from rewards.arithmetic import ArithmeticTask

TEACHER_ACCURACY = {1: 0.8, 2: 0.5, 3: 0.3}


def column_sum(a: int, b: int, drop_carry_at: int | None = None) -> str:
    """a + b written least-significant digit first, optionally dropping the carry out of one column."""
    da, db = str(a)[::-1], str(b)[::-1]
    digits, carry = [], 0
    for column in range(max(len(da), len(db))):
        total = sum(int(d[column]) for d in (da, db) if column < len(d)) + carry
        digits.append(str(total % 10))
        carry = 0 if column == drop_carry_at else total // 10
    return "".join(digits) + ("1" if carry else "")


def carry_columns(a: int, b: int) -> list[int]:
    """Columns whose addition carries into the next one."""
    return [c for c in range(max(len(str(a)), len(str(b)))) if column_sum(a, b, c) != column_sum(a, b)]


def teacher_error(a: int, b: int, rng: np.random.Generator) -> str:
    """A plausible wrong answer: a dropped carry or one digit off by one (never the right sum)."""
    carries = carry_columns(a, b)
    if carries and rng.random() < 0.5:
        return column_sum(a, b, drop_carry_at=int(rng.choice(carries)))
    right = column_sum(a, b)
    position = int(rng.integers(len(right)))
    shifted = (int(right[position]) + (1 if rng.random() < 0.5 else -1)) % 10
    return right[:position] + str(shifted) + right[position + 1 :]


class NoisyArithmeticTask(ArithmeticTask):
    """``arithmetic`` on levels 1-3, plus the noisy teacher that writes the pretraining answers."""

    name = "noisy_arithmetic"

    def __init__(self, levels: tuple[int, ...] = tuple(TEACHER_ACCURACY)):
        unknown = set(levels) - set(TEACHER_ACCURACY)
        if unknown:
            raise ValueError(f"noisy_arithmetic: levels {sorted(unknown)} have no teacher accuracy "
                             f"(known levels: {sorted(TEACHER_ACCURACY)})")
        super().__init__(levels)

    def teacher_answer(self, example: dict, rng: np.random.Generator) -> str:
        """The pretraining target: right with probability q(level), else a carry error."""
        if rng.random() < TEACHER_ACCURACY[example["difficulty"]]:
            return example["answer"]
        return teacher_error(example["a"], example["b"], rng)
