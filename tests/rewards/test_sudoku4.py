import pytest

from rewards.data import is_heldout
from rewards.sudoku4 import LEVELS, UNITS, Sudoku4Task, all_grids, solutions

TASK = Sudoku4Task()
SOLUTION = "1432324141232314"
PUZZLE = "1430324141200310"  # empty cells 3, 11, 12, 15
EXAMPLE = {"puzzle": PUZZLE, "solution": SOLUTION}


@pytest.mark.parametrize(
    "completion, reward, solved",
    [
        (f"<answer>{SOLUTION}</answer>", 1.0, True),
        ("reasoning\n<answer>\n1 4 3 2\n3 2 4 1\n4 1 2 3\n2 3 1 4\n</answer>", 1.0, True),
        ("<answer>1432|3241|4123|2314</answer>", 1.0, True),
        (f"<answer>{SOLUTION}5555</answer>", 1.0, True),  # truncated to 16
        (f"<answer>{PUZZLE}</answer>", 0.0, False),
        ("<answer>1432324141232310</answer>", 0.75, False),  # last empty cell wrong
        ("<answer>143</answer>", 0.0, False),  # padded with 0
        ("<answer>1432324141</answer>", 0.25, False),
        ("<answer>row 1: 1432 ...</answer>", 0.0, False),  # "1" of the label shifts the grid
        (f"<answer>{SOLUTION[:3]}²{SOLUTION[3:]}</answer>", 1.0, True),  # only 0-9 count
        (f"<answer>{SOLUTION}</answer><answer>0000</answer>", 0.0, False),
        (f"<answer>0000</answer><answer>{SOLUTION}</answer>", 1.0, True),
        (SOLUTION, 0.0, False),
        (f"<answer>{SOLUTION}", 0.0, False),
        ("", 0.0, False),
    ],
)
def test_reward_table(completion, reward, solved):
    assert TASK.reward(completion, EXAMPLE) == pytest.approx(reward)
    assert TASK.solved(completion, EXAMPLE) is solved


def test_all_grids_are_the_288_valid_ones():
    grids = all_grids()
    assert len(set(grids)) == 288
    assert all({grid[i] for i in unit} == set("1234") for grid in grids for unit in UNITS)


def test_solution_counting():
    assert solutions(PUZZLE) == [SOLUTION]
    assert len(solutions("0" * 16, limit=2)) == 2
    assert solutions("1100" + "0" * 12) == []


def test_generated_puzzles_are_unique_distinct_and_deterministic():
    items = TASK.examples("train", n=120, seed=5)
    assert items == TASK.examples("train", n=120, seed=5)
    assert items != TASK.examples("train", n=120, seed=6)
    assert len({x["puzzle"] for x in items}) == len(items)
    assert {x["difficulty"] for x in items} == set(LEVELS)
    for item in items:
        assert solutions(item["puzzle"]) == [item["solution"]]
        assert item["puzzle"].count("0") == item["difficulty"]
        assert all(p in ("0", s) for p, s in zip(item["puzzle"], item["solution"]))
        assert TASK.reward(f"<answer>{item['solution']}</answer>", item) == 1.0


def test_generated_splits_are_disjoint():
    train, heldout = (TASK.examples(s, n=80) for s in ("train", "heldout"))
    assert not {x["puzzle"] for x in train} & {x["puzzle"] for x in heldout}
    assert all(is_heldout(x["puzzle"]) for x in heldout)


def test_loads_d1_csv(tmp_path):
    rows = TASK.examples("train", n=30, seed=1) + TASK.examples("heldout", n=10, seed=1)
    path = tmp_path / "4x4_sudoku_unique_puzzles.csv"
    path.write_text("Puzzle,Solution\n" + "".join(f"{x['puzzle']},{x['solution']}\n" for x in rows))
    train, heldout = (TASK.examples(s, source=str(path)) for s in ("train", "heldout"))
    assert sorted(x["puzzle"] for x in train + heldout) == sorted(x["puzzle"] for x in rows)
    assert {x["puzzle"] for x in heldout} == {x["puzzle"] for x in rows if is_heldout(x["puzzle"])}
    assert any(x["puzzle"].startswith("0") for x in rows)  # leading zeros survive CSV loading


@pytest.mark.parametrize(
    "puzzle, solution",
    [
        ("0" * 16, SOLUTION),  # many solutions
        (PUZZLE, "1432324141232341"),  # not a valid grid
        ("2430324141200310", SOLUTION),  # givens contradict the solution
        (PUZZLE[:15], SOLUTION),
    ],
)
def test_csv_rows_without_a_single_solution_are_rejected(tmp_path, puzzle, solution):
    path = tmp_path / "bad.csv"
    path.write_text(f"puzzle,solution\n{puzzle},{solution}\n")
    with pytest.raises(ValueError, match="record 0"):
        TASK.examples("train", source=str(path))
