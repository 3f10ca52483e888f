"""4x4 Sudoku: fill the grid so every row, column and 2x2 box holds the digits 1-4 once.

Example fields: ``puzzle`` and ``solution``, 16-character strings read row by row with ``0`` for an
empty cell; ``difficulty``, the number of empty cells. Every puzzle has exactly one solution.

Answer format: the solved grid's 16 digits row by row in the last ``<answer>...</answer>``, e.g.
``<answer>1234341221434321</answer>``; separators are ignored (``1 2 3 4`` on four lines works).

Reward (d1's): the fraction of originally empty cells filled correctly, reading the ASCII digits of
the last ``<answer>`` in order, truncated or padded with ``0`` to 16; 0.0 without an answer.
``solved(completion, example)`` reports a full solve separately: the 16 digits equal the solution.

Differences from d1: d1 keeps every ``str.isdigit()`` character, so superscripts and other Unicode
digits shift the grid; here only 0-9 count. The innermost answer counts when tags nest.

Data: generated from the seed (default): a uniformly drawn valid grid, with cells emptied in random
order as long as the solution stays unique, until the level's number of empty cells. Or
``source=<file.csv>`` in d1's format (``dataset/4x4_sudoku_unique_puzzles.csv``: columns
``puzzle``/``solution`` in any case), checked for a valid, unique solution and divided train /
held-out by item hash.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import islice

from rewards.base import Task, chat_prompt, last_answer
from rewards.data import generate_split, load_examples, sample
from rewards.parsing import clip

LEVELS = (6, 8, 10, 12)  # empty cells; 12 (4 givens) is the most a unique 4x4 puzzle can have
UNITS = (
    [[4 * r + c for c in range(4)] for r in range(4)]
    + [[4 * r + c for r in range(4)] for c in range(4)]
    + [[4 * (r0 + r) + c0 + c for r in range(2) for c in range(2)] for r0 in (0, 2) for c0 in (0, 2)]
)
PEERS = [sorted({p for unit in UNITS if i in unit for p in unit} - {i}) for i in range(16)]


def solutions(puzzle: str, limit: int = 2) -> list[str]:
    """Up to ``limit`` completions of ``puzzle`` by backtracking (the givens are not checked)."""
    cells, found = list(puzzle), []

    def fill() -> None:
        if "0" not in cells:
            found.append("".join(cells))
            return
        i = cells.index("0")
        for digit in "1234":
            if len(found) < limit and all(cells[p] != digit for p in PEERS[i]):
                cells[i] = digit
                fill()
        cells[i] = "0"

    fill()
    return found


@lru_cache(maxsize=1)
def all_grids() -> tuple[str, ...]:
    """The 288 valid 4x4 grids."""
    return tuple(solutions("0" * 16, limit=1000))


def _make(rng, empties: int) -> dict | None:
    made = _make_puzzle(rng, empties)
    return made and {"puzzle": made[0], "solution": made[1], "difficulty": empties, "key": made[0]}


def _make_puzzle(rng, empties: int) -> tuple[str, str] | None:
    """A uniformly drawn grid emptied cell by cell while unique; None if it gets stuck early."""
    grids = all_grids()
    solution = grids[int(rng.integers(len(grids)))]
    cells = list(solution)
    for i in rng.permutation(16):
        if cells.count("0") == empties:
            break
        cells[i] = "0"
        if len(solutions("".join(cells))) > 1:
            cells[i] = solution[i]
    puzzle = "".join(cells)
    return (puzzle, solution) if puzzle.count("0") == empties else None


def _digits(completion) -> str | None:
    answer = last_answer(clip(completion))
    if answer is None:
        return None
    return "".join(islice((c for c in answer if "0" <= c <= "9"), 16)).ljust(16, "0")


def _from_record(record: dict) -> dict:
    fields = {k.lower(): str(v).strip() for k, v in record.items()}
    puzzle, solution = fields["puzzle"], fields["solution"]
    if solution not in all_grids() or len(puzzle) != 16 or solutions(puzzle) != [solution]:
        raise ValueError(f"puzzle {puzzle!r} does not have the single solution {solution!r}")
    return {"puzzle": puzzle, "solution": solution, "difficulty": puzzle.count("0")}


class Sudoku4Task(Task):
    name = "sudoku4"
    reward_range = (0.0, 1.0)

    def reward(self, completion: str, example: dict) -> float:
        digits = _digits(completion)
        empty = [i for i, c in enumerate(example["puzzle"]) if c == "0"]
        if digits is None or not empty:
            return 0.0
        return sum(digits[i] == example["solution"][i] for i in empty) / len(empty)

    def solved(self, completion: str, example: dict) -> bool:
        return _digits(completion) == example["solution"]

    def prompt(self, example: dict, tokenizer=None) -> str:
        rows = "\n".join(" ".join(example["puzzle"][4 * r : 4 * r + 4]) for r in range(4))
        text = (
            "Solve this 4x4 Sudoku. Fill each 0 with a digit from 1 to 4 so that every row, every "
            f"column and every 2x2 box contains 1, 2, 3 and 4 exactly once.\n{rows}\n"
            "Think step by step, then give the 16 digits of the solved grid, row by row, inside "
            "<answer></answer>."
        )
        return chat_prompt(text, tokenizer)

    def examples(self, split: str, n: int | None = None, seed: int = 0, source: str | None = None) -> list[dict]:
        """Generated puzzles (default ``n`` = 64 per level, balanced, distinct), or puzzles from ``source``."""
        if source is not None:
            return sample(load_examples(self.name, split, source, _from_record, lambda x: x["puzzle"]), n, seed, split)
        return generate_split(self.name, split, 64 * len(LEVELS) if n is None else n, seed, LEVELS, _make)
