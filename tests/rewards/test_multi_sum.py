"""The multi-block testbed's task: the reward against an independent oracle, the teacher's stated
probabilities by simulation, the completion's block geometry, disjoint and distinct prompts."""
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest, chisquare

from rewards import get_task
from rewards.data import is_heldout
from rewards.multi_sum import CARRY_RIGHT, DIGITS, NO_CARRY_RIGHT

task = get_task("multi_sum")
digit_lists = st.lists(st.integers(0, 9), min_size=DIGITS, max_size=DIGITS)


def oracle_reward(completion: str, digits: list[int]) -> float:
    """Independent of the module: read each part back as a number written least-significant first."""
    parts = completion.strip().split(";")
    right = 0
    for i in range(len(digits) - 1):
        part = parts[i] if i < len(parts) else ""
        right += len(part) == 2 and part.isdigit() and int(part[::-1]) == digits[i] + digits[i + 1]
    return right / (len(digits) - 1)


@given(digit_lists, st.integers(0, 2**32))
def test_the_reward_is_the_fraction_of_right_parts(digits, seed):
    example = task.make(digits)
    rng = np.random.default_rng(seed)
    assert task.reward(example["answer"], example) == 1.0
    assert task.sample_metrics(example["answer"], example) == {"exact_match": 1.0}
    # corrupt some parts: swap in a random two-character string, or cut the completion short
    parts = example["answer"].split(";")
    for i in rng.choice(len(parts), size=int(rng.integers(0, len(parts) + 1)), replace=False):
        parts[i] = "".join(rng.choice(list("0123456789x"), size=int(rng.integers(0, 4))))
    completion = ";".join(parts[: int(rng.integers(0, len(parts) + 1))])
    assert task.reward(completion, example) == pytest.approx(oracle_reward(completion, digits))
    assert task.sample_metrics(completion, example)["exact_match"] == float(oracle_reward(completion, digits) == 1)


def test_rewards_of_odd_completions_stay_in_range():
    example = task.make([9] * DIGITS)
    for completion in ("", ";;;;", "81;" * 20, "\n81", "garbage", "81;81;81;81;81;81;81;81;81;81;81;"):
        assert 0.0 <= task.reward(completion, example) <= 1.0
    assert task.reward("81;" * 10 + "81", example) == 1.0 and task.reward("81;" * 11, example) == 1.0


def test_the_teacher_writes_each_part_at_the_stated_probabilities():
    """Simulation against the docstring's design: a carry sum right 0.4, else its carry dropped; a sum
    without carry right 0.9, else its units digit one off (+1 / -1 with equal odds), tens digit 0."""
    rng = np.random.default_rng(0)
    counts = {"carry": [0, 0, 0], "plain": [0, 0, 0, 0]}  # right, dropped carry / +1, -1, other
    for example in task.examples("train", n=2000, seed=1):
        written = task.teacher_answer(example, rng).split(";")
        assert len(written) == DIGITS - 1
        for total, part in zip(example["sums"], written):
            right = f"{total % 10}{total // 10}"
            if total >= 10:
                counts["carry"][0 if part == right else 1 if part == f"{total % 10}0" else 2] += 1
            else:
                outcome = {right: 0, f"{(total + 1) % 10}0": 1, f"{(total - 1) % 10}0": 2}.get(part, 3)
                counts["plain"][outcome] += 1
    carry, plain = counts["carry"], counts["plain"]
    assert carry[2] == 0 and plain[3] == 0  # no other kind of error
    assert binomtest(carry[0], sum(carry), CARRY_RIGHT).pvalue > 1e-3
    assert binomtest(plain[0], sum(plain), NO_CARRY_RIGHT).pvalue > 1e-3
    assert chisquare(plain[1:3]).pvalue > 1e-3  # +1 and -1 equally likely
    share = sum(carry) / (sum(carry) + sum(plain))
    assert binomtest(sum(carry), sum(carry) + sum(plain), 0.45).pvalue > 1e-3, share  # 45 of 100 pairs carry


def test_the_mode_of_the_teacher_is_wrong_exactly_on_carry_sums():
    assert CARRY_RIGHT < 1 - CARRY_RIGHT and NO_CARRY_RIGHT > (1 - NO_CARRY_RIGHT)


def test_the_completion_spans_three_blocks_of_sixteen_with_full_sub_blocks():
    from arena.model.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    for example in task.examples("heldout", n=20):
        prompt = len(tokenizer.encode(task.prompt(example)))
        answer = len(tokenizer.encode(example["answer"])) + 1  # the stop token
        assert prompt == 24 and answer == 33
        end = prompt + answer
        blocks = {position // 16 for position in range(prompt, end)}
        assert blocks == {1, 2, 3}
        sub_blocks = [sum(1 for p in range(prompt, end) if p // 8 == s and p % 16) for s in range(3, 7)]
        assert min(sub_blocks) >= 6, sub_blocks  # jointly decoded positions (a block's first token is AR)


def test_splits_are_disjoint_by_a_hash_of_the_whole_prompt_and_draws_are_distinct():
    train = task.examples("train", n=3000, seed=0)
    tuning = task.examples("train", n=512, seed=1)
    heldout = task.examples("heldout", n=1000, seed=0)
    prompts = {name: [task.prompt(e) for e in items] for name, items in
               (("train", train), ("tuning", tuning), ("heldout", heldout))}
    for name, texts in prompts.items():
        assert len(set(texts)) == len(texts), name
    assert not set(prompts["heldout"]) & (set(prompts["train"]) | set(prompts["tuning"]))
    assert not set(prompts["train"]) & set(prompts["tuning"])
    assert all(is_heldout(t.replace(" ", "").rstrip("=")) for t in prompts["heldout"])
    assert not any(is_heldout(t.replace(" ", "").rstrip("=")) for t in prompts["train"])
    assert task.examples("heldout", n=5, seed=3) == task.examples("heldout", n=5, seed=3)


def test_every_digit_pair_occurs_in_both_splits():
    seen = {split: {(a, b) for e in task.examples(split, n=400) for a, b in itertools.pairwise(e["digits"])}
            for split in ("train", "heldout")}
    assert seen["train"] == seen["heldout"] == set(itertools.product(range(10), repeat=2))


def test_the_one_level_is_checked():
    assert type(task)(levels=(11,)).levels == (11,)
    with pytest.raises(ValueError, match="only level is 11"):
        type(task)(levels=(1, 2))
