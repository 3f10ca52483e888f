"""Synthetic multi-digit addition: the embedded tiny model's task, with graded difficulty.

Prompt ``"a+b="``; the answer is the sum written **least-significant digit first** and ends the
completion (the tokenizer's stop token follows). Example: ``"57+68="`` -> ``"521"`` (125 reversed).
Writing the answer LSD-first makes every digit a local function of the operands' digits and the
incoming carry, so a tiny model learns it within the CPU budget, while the carry chains of long
operands remain hard: difficulty = number of digits of each operand (1..4).

Reward: 1.0 when the completion (stripped) equals the reversed sum exactly, else 0.0.

Splits are disjoint by construction: a pair (a, b) is held out when a keyed hash of it falls in the
held-out fifth, so train and held-out never share an item; draws come from a generator keyed by
(seed, split, difficulty). Training draws may repeat a pair; an evaluation draw (``distinct=True``)
never does: level 1 holds only 100 pairs (18 held out), so a distinct draw balanced over levels takes
all of a small level and fills the rest from the others (``rewards.data.generate_split``), and asking
for more pairs than a split holds is an error.
"""
from __future__ import annotations

from functools import cache

from rewards.base import Task, chat_prompt
from rewards.data import SPLITS, generate_split, is_heldout

LEVELS = (1, 2, 3, 4)
COUNTED = 3  # levels up to this one have their split's pairs counted; above, the pools dwarf any draw


def operand_range(digits: int) -> range:
    return range(0 if digits == 1 else 10 ** (digits - 1), 10**digits)


@cache
def pairs_on_split(digits: int, split: str) -> int | None:
    """How many distinct pairs (a, b) of ``digits``-digit operands fall on ``split`` (None above ``COUNTED``)."""
    if split not in SPLITS or digits > COUNTED:
        return None
    operands = operand_range(digits)
    held = sum(is_heldout(f"{a}+{b}") for a in operands for b in operands)
    return held if split == "heldout" else len(operands) ** 2 - held


class ArithmeticTask(Task):
    name = "arithmetic"
    reward_range = (0.0, 1.0)

    def __init__(self, levels: tuple[int, ...] = LEVELS):
        self.levels = tuple(levels)

    def reward(self, completion: str, example: dict) -> float:
        try:
            return 1.0 if completion.strip() == example["answer"] else 0.0
        except Exception:
            return 0.0

    def prompt(self, example: dict, tokenizer=None) -> str:
        text = f"{example['a']}+{example['b']}="
        return text if tokenizer is None else chat_prompt(text, tokenizer)

    def make(self, a: int, b: int) -> dict:
        digits = max(len(str(a)), len(str(b)))
        return {"a": a, "b": b, "answer": str(a + b)[::-1], "difficulty": digits}

    def examples(self, split: str, n: int | None = None, seed: int = 0, source: str | None = None,
                 distinct: bool = False) -> list[dict]:
        """``n`` items (default 64 per level), balanced over ``self.levels``, deterministic in ``seed``;
        ``distinct``: no pair twice (an evaluation draw)."""
        if source is not None:
            raise ValueError(f"{self.name}: items are generated from the seed; 'source' is not supported")
        levels = self.levels
        return generate_split("arithmetic", split, 64 * len(levels) if n is None else n, seed, levels, self._draw,
                              distinct=distinct, pool=lambda digits: pairs_on_split(digits, split))

    def _draw(self, rng, digits: int) -> dict:
        operands = operand_range(digits)
        a, b = (int(x) for x in rng.integers(operands.start, operands.stop, size=2))
        return {**self.make(a, b), "key": f"{a}+{b}"}
