"""The in-block testbed's task: the reward against an independent oracle (partial credit), the teacher's
stated probabilities and coherent alternative by simulation, the levels' digit ranges, the varying prompt
lengths and two-block geometry, and the share of block starts on informative characters against brute force."""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest

from rewards import get_task, load_task
from rewards.data import is_heldout
from rewards.swap_sums import CARRY_RIGHT, DIGIT_RANGES, LENGTHS, NO_CARRY_RIGHT, block_start_share

task = get_task("swap_sums")
digit_lists = st.lists(st.integers(0, 9), min_size=min(LENGTHS), max_size=max(LENGTHS))


def oracle_reward(completion: str, digits: list[int]) -> float:
    """Independent of the module: count the parts equal to the sum zero-padded to two digits, then reversed."""
    parts = completion.strip().split(";") + [""] * len(digits)
    return sum(parts[i] == f"{a + b:02d}"[::-1] for i, (a, b) in enumerate(zip(digits, digits[1:]))) / (len(digits) - 1)


@given(digit_lists, st.integers(0, 2**32))
def test_the_reward_is_the_fraction_of_right_parts(digits, seed):
    example = task.make(digits, level=2)
    rng = np.random.default_rng(seed)
    assert task.reward(example["answer"], example) == 1.0
    assert task.sample_metrics(example["answer"], example) == {"exact_match": 1.0}
    parts = example["answer"].split(";")  # swap some parts, garble some, cut the completion short
    for i in rng.choice(len(parts), size=int(rng.integers(0, len(parts) + 1)), replace=False):
        parts[i] = parts[i][::-1] if rng.random() < 0.5 else "".join(rng.choice(list("0123456789x"), size=2))
    completion = ";".join(parts[: int(rng.integers(0, len(parts) + 1))])
    assert task.reward(completion, example) == pytest.approx(oracle_reward(completion, digits))
    assert task.sample_metrics(completion, example)["exact_match"] == float(oracle_reward(completion, digits) == 1)


def test_partial_credit_counts_each_part():
    example = task.make([9, 6, 0, 2], level=2)  # sums 15, 6, 2: "51;60;20"
    assert [task.reward(c, example) for c in ("51;60;20", "15;60;20", "15;06;20", "15;06;02", "")] == \
        [1.0, pytest.approx(2 / 3), pytest.approx(1 / 3), 0.0, 0.0]


def test_the_teacher_writes_right_or_swapped_at_the_stated_probabilities():
    """A carry sum right 0.4, else its two digits swapped; without carry right 0.8, else swapped; a sum
    whose swap is itself always right; never any other string (so the two digits are fully dependent)."""
    rng = np.random.default_rng(0)
    counts = {"carry": [0, 0], "plain": [0, 0]}
    for example in task.examples("train", n=1500, seed=1):
        written = task.teacher_answer(example, rng).split(";")
        assert len(written) == len(example["sums"])
        for total, part in zip(example["sums"], written):
            right = f"{total % 10}{total // 10}"
            assert part in (right, right[::-1]), (total, part)
            if right != right[::-1]:
                counts["carry" if total >= 10 else "plain"][part != right] += 1
    assert binomtest(counts["carry"][0], sum(counts["carry"]), CARRY_RIGHT).pvalue > 1e-3
    assert binomtest(counts["plain"][0], sum(counts["plain"]), NO_CARRY_RIGHT).pvalue > 1e-3
    assert CARRY_RIGHT < 0.5 < NO_CARRY_RIGHT  # the mode is wrong exactly on carry sums


def test_levels_set_the_digit_range_and_so_the_carries():
    for level, (lo, hi) in DIGIT_RANGES.items():
        examples = load_task("swap_sums", (level,)).examples("train", n=300, seed=2)
        digits = {d for e in examples for d in e["digits"]}
        assert digits == set(range(lo, hi + 1)) and {e["difficulty"] for e in examples} == {level}
        carries = [t >= 10 for e in examples for t in e["sums"]]
        assert (not any(carries)) if level == 1 else all(carries) if level == 3 else 0.35 < np.mean(carries) < 0.55
    assert [e["difficulty"] for e in task.examples("train", n=6)] == [1, 2, 3, 1, 2, 3]
    with pytest.raises(ValueError, match="levels must be among"):
        type(task)(levels=(4,))


def test_prompt_lengths_vary_and_every_sequence_fits_two_blocks_of_32():
    from arena.model.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    lengths = set()
    for example in task.examples("heldout", n=300):
        prompt = len(tokenizer.encode(task.prompt(example)))
        answer = len(tokenizer.encode(example["answer"])) + 1  # the stop token
        lengths.add(prompt)
        assert prompt == 2 * len(example["digits"]) and prompt + answer <= 64
    assert lengths == {2 * n for n in LENGTHS}


def brute_force_share(examples, block_size: int) -> tuple[float, float, float]:
    """Walk each prompt + answer text; at every position that is a multiple of the block size inside the answer,
    is the character a digit (reward-relevant), does it change when its part is swapped (informative), and is
    its part, besides, a sum of two digits that reaches 10 (wrong-mode)?"""
    relevant = informative = wrong = starts = 0
    for example in examples:
        prompt, parts = task.prompt(example), example["answer"].split(";")
        for position in range(0, len(prompt) + len(example["answer"]), block_size):
            index = position - len(prompt)
            if index < 0:
                continue
            starts += 1
            part, offset = divmod(index, 3)
            if offset < 2:
                relevant += 1
                swapped = ";".join(p[::-1] if i == part else p for i, p in enumerate(parts))
                changes = swapped[index] != example["answer"][index]
                informative += changes
                wrong += changes and example["digits"][part] + example["digits"][part + 1] > 9
    return relevant / starts, informative / starts, wrong / starts


@pytest.mark.parametrize("levels", [(1, 2, 3), (2,), (3,)])
def test_the_share_of_block_starts_on_informative_tokens_matches_brute_force(levels):
    share = block_start_share(levels, 32)
    assert share["reward_relevant"] == Fraction(2, 3)  # 4 of the 6 prompt lengths put position 32 on a digit
    examples = load_task("swap_sums", levels).examples("train", n=3000, seed=5)
    counted_shares = brute_force_share(examples, 32)
    for counted, exact in zip(counted_shares, (share["reward_relevant"], share["informative"], share["wrong_mode"])):
        stderr = float(exact * (1 - exact) / len(examples)) ** 0.5
        assert abs(counted - float(exact)) < 4 * stderr, (counted, float(exact))
    assert block_start_share((1, 2, 3), 32)["informative"] == Fraction(31, 50)
    # by hand: 2/3 on a digit, times the carry pairs whose swap differs: none, (45 - 8)/100, 23/25
    assert block_start_share((1, 2, 3), 32)["wrong_mode"] == Fraction(2, 3) * (0 + Fraction(37, 100) + Fraction(23, 25)) / 3


def test_splits_are_disjoint_by_a_hash_of_the_whole_prompt_and_draws_are_distinct():
    train, heldout = task.examples("train", n=2000, seed=0), task.examples("heldout", n=600, seed=0)
    texts = {name: [task.prompt(e) for e in items] for name, items in (("train", train), ("heldout", heldout))}
    assert all(len(set(v)) == len(v) for v in texts.values())
    assert not set(texts["train"]) & set(texts["heldout"])
    assert all(is_heldout(t.replace(" ", "").rstrip("=")) for t in texts["heldout"])
    assert not any(is_heldout(t.replace(" ", "").rstrip("=")) for t in texts["train"])
