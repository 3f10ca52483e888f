"""``arena estimators`` on a small random-init policy: records, the bias verdicts, and the report it writes.

The policy decodes sub-blocks of 2 in blocks of 4, and the report must be sub-block aware: sampled with that
sub-block, every block estimator scored with it, the references the sub-block-chain ELBO and log-likelihood.
The bias checks are z-tests with the report's own stderr: the Monte Carlo ELBO (and Gauss-Legendre with
n >= ceil(m_s/2) nodes, m_s <= 2 here) must lie within 5 stderr of the analytic sub-block-chain ELBO. The keys
are fixed, so the outcome is deterministic; a fresh key would fail with probability about 6e-7 per check.
"""
import pytest

from arena.cli import build_parser
from arena.estimator_bench import measure, settings
import arena.estimator_bench
from methods.likelihood import ESTIMATORS
from rewards import get_task

FIELDS = {"estimator", "draws", "nodes", "block_size", "sub_block", "bias", "bias_stderr", "std", "std_sequence",
          "forward_tokens", "seconds"}


def arithmetic_prompts(policy, n):
    task = get_task("arithmetic")
    return [policy.encode(task.prompt(e)) for e in task.examples("heldout", n=n, seed=0)]


@pytest.fixture(scope="module")
def report(tiny_policy):
    return measure(tiny_policy, arithmetic_prompts(tiny_policy, 4), draws=(1, 2), nodes=(1, 2), repeats=48,
                   max_new_tokens=8, progress=False)


def test_samples_with_the_policys_sub_block(tiny_policy, monkeypatch):
    """The completions come from the random-order sampler with the policy's own sub-block (2 in blocks of 4),
    their steps recorded, and the scoring batch carries that sub-block."""
    seen = {}
    generate, score = arena.estimator_bench.generate, arena.estimator_bench.score

    def recording_generate(policy, prompts, config, seed):
        seen["config"] = config
        return generate(policy, prompts, config, seed=seed)

    def recording_score(policy, batch, setting, key, repeats):
        seen.setdefault("batches", []).append(batch)
        return score(policy, batch, setting, key, repeats)

    monkeypatch.setattr(arena.estimator_bench, "generate", recording_generate)
    monkeypatch.setattr(arena.estimator_bench, "score", recording_score)
    measured = measure(tiny_policy, arithmetic_prompts(tiny_policy, 2), draws=(1,), nodes=(1,), repeats=2,
                       max_new_tokens=4, progress=False)
    assert (seen["config"].order, seen["config"].sub_block, seen["config"].temperature) == ("random", 2, 1.0)
    assert measured.sub_block == 2 and all(r["sub_block"] == 2 for r in measured.records)
    assert all(b.sub_block == 2 and b.steps is not None for b in seen["batches"])


@pytest.mark.slow
def test_records_cover_every_estimator_with_their_fields(report):
    assert {r["estimator"] for r in report.records} == set(ESTIMATORS)
    for r in report.records:
        assert FIELDS <= set(r), r
        assert r["block_size"] == 4 and r["reference"] == "analytic"
        assert r["forward_tokens"] > 0 and r["seconds"] > 0 and r["std"] >= 0
    elbo = [r for r in report.records if r["estimator"] == "elbo"]
    assert {(r["variant"], r["draws"]) for r in elbo} == {
        ("form=uniform", 1), ("form=uniform", 2), ("form=uniform antithetic", 2),
        ("form=count", 1), ("form=count", 2), ("form=count antithetic", 2)}
    by_streams = {r["draws"]: r["forward_tokens"] for r in elbo}
    assert by_streams[2] > by_streams[1]  # one more noisy stream costs more
    masked = next(r for r in report.records if r["estimator"] == "masked")
    ar = next(r for r in report.records if r["estimator"] == "ar")  # the clean stream alone: T per sequence
    count = {r["draws"]: r["forward_tokens"] for r in elbo if r["variant"] == "form=count"}
    ebpo = next(r for r in report.records if r["estimator"] == "ebpo")
    assert masked["forward_tokens"] == ebpo["forward_tokens"] == count[1]  # one mask each, one view per sub-block
    assert count[2] - ar["forward_tokens"] == pytest.approx(2 * (count[1] - ar["forward_tokens"]))  # views per mask


def test_monte_carlo_elbo_is_unbiased_and_block_masked_is_not(report):
    unbiased = [r for r in report.records if r["estimator"] == "elbo"]
    unbiased += [r for r in report.records if r["estimator"] == "gauss_legendre" and not r["options"]["exact_count"]
                 and r["nodes"] == 2]
    unbiased += [r for r in report.records if r["estimator"] == "ebpo"]
    for r in unbiased:
        assert abs(r["bias"]) < 5 * r["bias_stderr"], r
    masked = next(r for r in report.records if r["estimator"] == "masked")
    assert masked["std"] == 0.0 and masked["bias_stderr"] == 0.0  # one deterministic pass
    assert abs(masked["bias"]) > 5 * min(r["bias_stderr"] for r in unbiased), masked
    for r in report.records:  # the analytic ELBO is a lower bound of the exact log-likelihood
        assert r["bias_exact"] - r["bias"] <= 1e-6


def test_trajectory_is_reported_deterministic_and_above_the_elbo(report):
    """trajectory: one value per block (std 0), log p(y | recorded order). Its expectation is log P(y) + KL(order
    posterior || uniform) >= the exact log-lik >= the ELBO, so over the sampled blocks it lies above the ELBO."""
    trajectory = next(r for r in report.records if r["estimator"] == "trajectory")
    assert trajectory["std"] == 0.0 and trajectory["bias_stderr"] == 0.0
    assert trajectory["bias"] > 0 and trajectory["bias_exact"] is not None


def test_settings_follow_the_estimator_table():
    """Every estimator, each flag both ways, each enumerated option over its values, counts from the lists."""
    found = {(s.estimator, s.variant, s.count) for s in settings([1, 3], [2])}
    assert found == {
        ("ar", "", None), ("d1", "p_mask=0.15", None), ("masked", "", None),
        ("elbo", "form=count", 1), ("elbo", "form=count", 3), ("elbo", "form=uniform", 1), ("elbo", "form=uniform", 3),
        ("gauss_legendre", "", 2), ("gauss_legendre", "exact_count", 2), ("ebpo", "", None), ("trajectory", "", None),
    }  # antithetic draws come in pairs: none with K = 1 or 3


def test_monte_carlo_reference_when_not_enumerated(tiny_policy):
    report = measure(tiny_policy, arithmetic_prompts(tiny_policy, 2), draws=(2,), nodes=(2,), repeats=16,
                     max_new_tokens=4, exact=False, reference_draws=32, progress=False)
    assert all(r["reference"] == "monte_carlo (32 draws)" and r["bias_exact"] is None for r in report.records)
    count = next(r for r in report.records if r["estimator"] == "elbo" and r["variant"] == "form=count")
    assert abs(count["bias"]) < 5 * count["bias_stderr"]


def test_command_line_options():
    args = build_parser().parse_args(["estimators", "--draws", "2,8", "--nodes", "3", "--seed", "4"])
    assert (args.draws, args.nodes, args.seed, args.model) == ([2, 8], [3], 4, "tiny")
    assert str(args.out) == "reports/estimators"  # bad values: tests/test_cli.py
