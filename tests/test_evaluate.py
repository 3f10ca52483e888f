"""Tail metrics against hand-computed values and brute force; the hard subset has no regression to the mean."""
import contextlib
import itertools
import math

import numpy as np
import pytest

from arena.evaluate import Evaluation, Evaluator, RewardError, checked_reward, lower_cvar, pass_at_k, select_hard
from arena.study import EvaluationSpec
from rewards import Task


def test_lower_cvar_by_hand():
    p = np.array([1.0, 0.0, 0.5, 0.25, 0.75])
    assert lower_cvar(p, 0.2) == 0.0  # ceil(1.0) = 1 prompt
    assert lower_cvar(p, 0.25) == 0.125  # ceil(1.25) = 2 prompts: 0 and 0.25
    assert lower_cvar(p, 0.5) == pytest.approx(0.25)  # ceil(2.5) = 3: 0, 0.25, 0.5
    assert lower_cvar(p, 1.0) == pytest.approx(0.5)  # the mean
    assert lower_cvar(np.array([0.3] * 8), 0.25) == pytest.approx(0.3)


@pytest.mark.parametrize("n,c,k", [(8, 0, 1), (8, 3, 1), (8, 3, 2), (8, 3, 6), (8, 8, 4), (5, 2, 5), (6, 1, 3)])
def test_pass_at_k_is_the_chance_that_k_of_n_draws_without_replacement_hit(n, c, k):
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute)


def spec(**changes):
    values = dict(prompts=4, samples=2, temperature=1.0, max_new_tokens=4, alphas=(0.25, 0.5), primary_alpha=0.5,
                  hard_fraction=0.5, points=3, seed=0, split="heldout")
    return EvaluationSpec(**{**values, **changes})


class Levels(Task):
    """A stand-in task: four held-out prompts of two levels, reward = the completion as a number."""

    name = "levels"

    def examples(self, split, n, seed, source=None):
        return [{"difficulty": 1 + i % 2, "index": i} for i in range(n)]

    def prompt(self, example, tokenizer=None):
        return f"level {example['difficulty']} #{example['index']}"

    def reward(self, completion, example):
        return float(completion)


def test_metrics_by_hand():
    evaluator = Evaluator(Levels(), spec())
    start = Evaluation(np.array([[0, 0], [0, 1], [1, 1], [0, 0]], dtype=float), [])
    now = Evaluation(np.array([[1, 0], [0, 1], [1, 1], [0, 0]], dtype=float), [])
    hard = np.array([True, False, False, True])
    got = evaluator.metrics(now, start, hard)
    # per prompt: start (0, .5, 1, 0), now (.5, .5, 1, 0)
    assert got["mean_reward"] == 0.5 and got["mean_gain"] == pytest.approx(0.125)
    assert got["tail_reward"] == 0.25 and got["tail_gain"] == 0.25  # α = 0.5: the 2 lowest
    assert got["tail_reward_a0.25"] == 0.0 and got["tail_gain_a0.25"] == 0.0
    assert got["zero_share"] == 0.25
    assert got["hard_reward"] == 0.25 and got["hard_gain"] == 0.25
    assert got["pass_at_2"] == 0.75
    assert got["level1_mean_reward"] == 0.75 and got["level2_mean_reward"] == 0.25  # prompts 0, 2 and 1, 3


class Counted(Levels):
    """``Levels`` with a per-sample metric: whether the completion is "1"."""

    def sample_metrics(self, completion, example):
        return {"is_one": float(completion == "1")}


def test_a_task_s_sample_metrics_are_averaged_over_samples_with_their_gain():
    evaluator = Evaluator(Counted(), spec())
    rows = lambda texts: [{"prompt": "", "completion": t, "reward": float(t)} for t in texts]  # noqa: E731
    start = Evaluation(np.zeros((4, 2)), rows(["0", "0", "0", "1", "1", "1", "0", "0"]))
    now = Evaluation(np.zeros((4, 2)), rows(["1", "1", "1", "1", "1", "1", "0", "0"]))
    got = evaluator.metrics(now, start, np.ones(4, dtype=bool))
    assert got["is_one"] == 0.75 and got["is_one_gain"] == 0.375
    assert "is_one" not in Evaluator(Levels(), spec()).metrics(now, start, np.ones(4, dtype=bool))


def test_a_hard_subset_picked_on_independent_samples_shows_no_gain_for_a_frozen_policy():
    """Frozen policy, prompts with true success rates q_i, k samples per evaluation. Picking the hard
    subset on the measuring samples fakes a gain at the next evaluation (regression to the mean); picking
    it on independent samples, as the evaluator does, gives a gain consistent with zero."""
    rng = np.random.default_rng(0)
    q, k, fraction = rng.uniform(0, 1, 200), 4, 0.25
    honest, naive = [], []
    for replication in range(300):
        draw = lambda: rng.binomial(k, q) / k  # noqa: E731  one evaluation's per-prompt rewards
        selection, start, later = draw(), draw(), draw()
        picked = select_hard(selection, fraction, replication)
        honest.append(later[picked].mean() - start[picked].mean())
        naive_pick = select_hard(start, fraction, replication)
        naive.append(later[naive_pick].mean() - start[naive_pick].mean())
    stderr = np.std(honest) / math.sqrt(len(honest))
    assert abs(np.mean(honest)) < 3 * stderr
    assert np.mean(naive) > 10 * stderr  # the check has power: the naive choice shows a large fake gain


def test_select_hard_breaks_ties_by_a_keyed_order_not_by_index():
    flat = np.zeros(100)
    picks = [np.flatnonzero(select_hard(flat, 0.1, seed)) for seed in range(3)]
    assert all(len(p) == 10 for p in picks)
    assert not np.array_equal(picks[0], np.arange(10)) and not np.array_equal(picks[0], picks[1])


def test_a_reward_that_raises_or_returns_nan_is_named():
    class Broken(Levels):
        def reward(self, completion, example):
            return float("nan") if completion == "nan" else 1 / 0

    with pytest.raises(RewardError, match=r"task 'levels': reward returned nan \(prompt 'p', completion 'nan'\)"):
        checked_reward(Broken(), {}, "p", "nan")
    with pytest.raises(RewardError, match="reward raised ZeroDivisionError.*completion 'x'"):
        checked_reward(Broken(), {}, "p", "x")


def test_the_evaluation_split_picks_the_prompts_train_for_tuning_heldout_for_reports():
    from arena.study import EvaluationSpec
    from rewards.noisy_arithmetic import NoisyArithmeticTask

    task = NoisyArithmeticTask(levels=(1, 2))
    held, train = (Evaluator(task, EvaluationSpec(prompts=32, split=split)).examples for split in ("heldout", "train"))
    question = lambda examples: {task.prompt(e) for e in examples}  # noqa: E731
    assert question(held) & question(train) == set()  # the splits never share a prompt
    assert question(train) <= question(task.examples("train", n=256, seed=0))
    assert held == task.examples("heldout", n=32, seed=0, distinct=True)


def test_evaluation_prompts_are_distinct_and_asking_for_more_than_the_pool_holds_is_an_error():
    """Level 1 has 100 operand pairs, 18 of them held out: a distinct draw over levels 1-2 takes all 18 and fills
    the rest from level 2; 19 level-1 prompts are more than the split holds; a task that repeats prompts is named."""
    from arena.evaluate import EvaluationError
    from arena.study import EvaluationSpec
    from rewards.noisy_arithmetic import NoisyArithmeticTask

    task = NoisyArithmeticTask(levels=(1, 2))
    evaluator = Evaluator(task, EvaluationSpec(prompts=128))
    assert len(set(evaluator.texts)) == 128
    assert sum(level == 1 for level in evaluator.levels) == 18
    with pytest.raises(EvaluationError, match=r"evaluation.prompts: 19 distinct prompts .* holds 18 distinct items"):
        Evaluator(NoisyArithmeticTask(levels=(1,)), EvaluationSpec(prompts=19))

    class Repeating(Levels):
        def prompt(self, example, tokenizer=None):
            return f"level {example['difficulty']}"

    with pytest.raises(EvaluationError, match="task 'levels' gave 2 distinct prompts of the 4 asked for"):
        Evaluator(Repeating(), spec())


def test_evaluation_draws_are_independent_samples_of_prompts_with_their_own_seeds():
    from arena.study import EvaluationSpec
    from rewards.noisy_arithmetic import NoisyArithmeticTask

    task = NoisyArithmeticTask(levels=(1, 2))
    spec = EvaluationSpec(prompts=64, draws=3)
    draws = [Evaluator(task, spec, draw=d) for d in range(3)]
    assert draws[0].texts == Evaluator(task, spec).texts  # draw 0 is the evaluation every point decodes
    assert all(len(set(d.texts)) == 64 for d in draws) and len({tuple(d.texts) for d in draws}) == 3


def test_level_counts_sum_to_the_draw_and_stay_within_one_of_each_share():
    from arena.evaluate import level_counts

    for shares in (((1, 0.25), (2, 0.25), (3, 0.25), (4, 0.25)), ((1, 0.015), (2, 0.985)), ((2, 1 / 3), (3, 2 / 3))):
        for n in (1, 7, 128, 130, 1024):
            counts = dict(level_counts(shares, n))
            assert sum(counts.values()) == n
            assert all(abs(counts[level] - share * n) < 1 for level, share in shares)
    assert level_counts(((1, 0.25), (2, 0.25), (3, 0.25), (4, 0.25)), 130) == [(1, 33), (2, 33), (3, 32), (4, 32)]


def test_stratified_draws_hold_the_stated_level_shares_whatever_their_size():
    """A balanced draw's mix depends on its size (level 1's 18 held-out pairs are 14% of 128 prompts); a stratified
    one holds its shares at every size, with distinct held-out prompts, and a share the pool cannot fill is named."""
    from arena.evaluate import EvaluationError
    from rewards.data import is_heldout
    from rewards.noisy_arithmetic import NoisyArithmeticTask

    task = NoisyArithmeticTask(levels=(1, 2))
    shares = {1: 0.0125, 2: 0.9875}
    for prompts in (80, 640):
        evaluator = Evaluator(task, EvaluationSpec(prompts=prompts, level_shares=tuple(shares.items())))
        assert [evaluator.levels.count(level) for level in (1, 2)] == [round(share * prompts) for share in shares.values()]
        assert len(set(evaluator.texts)) == prompts
        assert all(is_heldout(f"{e['a']}+{e['b']}") for e in evaluator.examples)
    balanced = Evaluator(task, EvaluationSpec(prompts=128)).levels
    assert balanced.count(1) == 18  # the pool, not a share
    with pytest.raises(EvaluationError, match="evaluation.prompts: 128 distinct prompts .* holds 18 distinct items"):
        Evaluator(task, EvaluationSpec(prompts=128, level_shares=((1, 0.5), (2, 0.5))))
    with pytest.raises(EvaluationError, match=r"level_shares: level\(s\) \[3\] are not among the task's levels \[1, 2\]"):
        Evaluator(task, EvaluationSpec(prompts=8, level_shares=((2, 0.5), (3, 0.5))))


def test_level_shares_are_checked_where_the_study_file_gives_them():
    from arena.config import ConfigError, build

    assert build(EvaluationSpec, {"level_shares": {2: 0.75, 1: 0.25}}).level_shares == ((1, 0.25), (2, 0.75))
    for shares, message in (({1: 0.5, 2: 0.4}, "level_shares: must sum to 1, got 0.9"),
                            ([0.5, 0.5], "level_shares: expected a mapping of difficulty levels to shares"),
                            ({"1": 1.0}, "level_shares: expected integer levels with shares in \\(0, 1\\], got '1': 1.0")):
        with pytest.raises(ConfigError, match=message):
            build(EvaluationSpec, {"level_shares": shares})


class Digits(Task):
    """Eight held-out prompts; reward: the share of digits in the completion (many distinct values); every call is
    recorded, to count what each process decoded."""

    name = "digits"
    calls: list[str] = []

    def examples(self, split, n, seed, source=None):
        return [{"index": i} for i in range(n)]

    def prompt(self, example, tokenizer=None):
        return f"{example['index']} + {example['index']} ="

    def reward(self, completion, example):
        Digits.calls.append(self.prompt(example))
        return sum(c.isdigit() for c in completion) / max(1, len(completion))


def _sharded_decode(rank: int, world: int, directory: str) -> None:
    import torch

    from arena.model.tiny import build_policy
    from conftest import SMALL, gloo_rank, sharpen

    torch.set_num_threads(1)
    with gloo_rank(f"{directory}/store-{world}", rank, world) if world > 1 else contextlib.nullcontext():
        evaluator = Evaluator(Digits(), spec(prompts=8, samples=3, max_new_tokens=12, temperature=0.8))
        got = evaluator.decode(sharpen(build_policy(SMALL)))
        torch.save({"rewards": got.rewards, "completions": got.completions, "calls": Digits.calls},
                   f"{directory}/rank{rank}-of-{world}.pt")


@pytest.mark.slow  # spawns two processes
def test_two_gloo_processes_decode_each_sample_once_and_gather_the_one_process_evaluation(tmp_path):
    """Each rank decodes and rewards its share of the 8 x 3 rows; every rank receives the one-process evaluation,
    its rewards and completions equal to the last bit."""
    import torch
    import torch.multiprocessing as mp

    mp.spawn(_sharded_decode, args=(1, str(tmp_path)), nprocs=1)
    mp.spawn(_sharded_decode, args=(2, str(tmp_path)), nprocs=2)
    one, *two = (torch.load(tmp_path / name, weights_only=False) for name in ("rank0-of-1.pt", "rank0-of-2.pt",
                                                                                "rank1-of-2.pt"))
    assert len(set(one["rewards"].flat)) > 3  # the rewards vary: a misplaced row would show
    for rank in two:
        assert np.array_equal(rank["rewards"], one["rewards"]) and rank["completions"] == one["completions"]
    assert len(one["calls"]) == 24 and [len(rank["calls"]) for rank in two] == [12, 12]
    assert sorted(two[0]["calls"] + two[1]["calls"]) == sorted(one["calls"])


class Varied(Digits):
    """Prompts of 3 to 21 characters: chunks of one evaluation start at different prompt lengths."""

    def prompt(self, example, tokenizer=None):
        i = example["index"]
        return " + ".join(str(j) for j in range(i % 4 + 1)) + f" = {i}"


def test_an_evaluation_decoded_in_chunks_is_the_one_call_decode(tiny_policy, monkeypatch):
    """``decode_batch`` cuts the 7 x 3 rows into generate calls of that many: rewards and completions equal to
    the last bit (fp32, one thread) to decoding every row in one call, whatever the chunk size."""
    import torch

    import arena.evaluate

    calls, inner = [], arena.evaluate.generate
    monkeypatch.setattr(arena.evaluate, "generate", lambda policy, prompts, *a, **k: calls.append(len(prompts))
                        or inner(policy, prompts, *a, **k))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sized = dict(prompts=7, samples=3, max_new_tokens=12, temperature=0.8)
        whole = Evaluator(Varied(), spec(**sized)).decode(tiny_policy)
        assert calls == [21] and len(set(whole.rewards.flat)) > 3  # the rewards vary: a misplaced row would show
        for batch, sizes in ((1, [1] * 21), (4, [4, 4, 4, 4, 4, 1]), (10, [10, 10, 1]), (64, [21])):
            calls.clear()
            got = Evaluator(Varied(), spec(**sized, decode_batch=batch)).decode(tiny_policy)
            assert calls == sizes
            assert np.array_equal(got.rewards, whole.rewards) and got.completions == whole.completions, batch
    finally:
        torch.set_num_threads(threads)


def test_a_decode_batch_below_one_is_named():
    from arena.config import ConfigError, build

    with pytest.raises(ConfigError, match="decode_batch: must be >= 1, got 0"):
        build(EvaluationSpec, {"decode_batch": 0})
