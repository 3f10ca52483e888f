"""A task defined outside arena, named in a study by import path (docs/extending.md).

The units digit of a sum: prompt ``"a+b="`` (the embedded tiny model's format), reward 1.0 when the
completion's first character is the last digit of a + b, else 0.0. Difficulty levels are the operand
digits (1-3), stored in each example's ``"difficulty"`` (the evaluation reports a mean per level).
Items come from ``rewards.data.generate_split``: deterministic in the seed, balanced over the levels,
train and held-out disjoint by a hash of the item.

    task: {name: "examples.plugins.digits_task:DigitsTask", levels: [1, 2]}
"""
from __future__ import annotations

from rewards import Task, chat_prompt
from rewards.data import generate_split

LEVELS = (1, 2, 3)


class DigitsTask(Task):  # rewards.Task: the optional members' defaults
    name = "units_digit"
    reward_range = (0.0, 1.0)  # with rewards in {0, 1}, the evaluation also reports pass@k

    def __init__(self, levels: tuple[int, ...] = LEVELS):
        if not levels or not set(levels) <= set(LEVELS):  # a ValueError is reported at task.levels
            raise ValueError(f"units_digit: levels must be among {list(LEVELS)}, got {list(levels)}")
        self.levels = tuple(levels)

    def reward(self, completion: str, example: dict) -> float:
        """Pure, never raises, stays in reward_range."""
        return 1.0 if completion.strip()[:1] == example["answer"] else 0.0

    def prompt(self, example: dict, tokenizer=None) -> str:
        # chat_prompt applies a checkpoint's chat template (Fast-dLLM v2); the tiny tokenizer has none
        return chat_prompt(f"{example['a']}+{example['b']}=", tokenizer)

    def examples(self, split: str, n: int | None = None, seed: int = 0, source: str | None = None) -> list[dict]:
        """``n`` items of ``split`` ("train" or "heldout"; default 64 per level), the same for the same seed."""
        if source is not None:
            raise ValueError(f"{self.name}: items are generated from the seed; 'source' is not supported")
        n = 64 * len(self.levels) if n is None else n
        return generate_split(self.name, split, n, seed, self.levels, self._draw, distinct=False)

    @staticmethod
    def _draw(rng, digits: int) -> dict:
        """One item of a level from a keyed generator; "key" identifies it for the train/held-out split."""
        low, high = (0 if digits == 1 else 10 ** (digits - 1)), 10**digits
        a, b = (int(x) for x in rng.integers(low, high, size=2))
        return {"a": a, "b": b, "answer": str((a + b) % 10), "difficulty": digits, "key": f"{a}+{b}"}
