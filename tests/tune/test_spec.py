"""The tune file (``arena.tune.spec``): its mistakes all reported at once with their lines, its own keys checked
by the one validator, the plan it prints, the seeds and evaluation a trial gets, and the pruners it names."""

import numpy as np
import optuna
import pytest
import yaml

from arena import tune as tuning
from arena.cli import main
from arena.study import StudyError, load_study
from tune_support import ROOT, STUDY, write_tune, tune_dir  # noqa: F401 (the fixture in_tmp)


def test_tune_file_mistakes_are_reported_at_once_with_their_lines(in_tmp, capsys):
    path = in_tmp / "tune.yaml"
    path.write_text(
        "study: study.yaml\n"                                      # 1
        "trails_per_arm: 3\n"                                      # 2
        "objective: tail\n"                                        # 3
        "pruner: {name: threshold}\n"                              # 4
        "space:\n"                                                 # 5
        "  block_grpo:\n"                                          # 6
        "    lrr: {log_uniform: [1.0e-5, 1.0e-3]}\n"               # 7
        "    group_size: {int_uniform: [1, 8]}\n"                  # 8
        "    lr: {uniform: [0.1, 0.01]}\n"                         # 9
        "  es:\n"                                                  # 10
        "    sigma: {log_uniform: [0, 0.1]}\n"                     # 11
        "    shaping: {choice: [zscore, ranks]}\n"                 # 12
        "  nope:\n"                                                # 13
        "    lr: {uniform: [0, 1]}\n")                             # 14
    with pytest.raises(StudyError) as error:
        tuning.load_tune(path)
    lines = [str(p) for p in error.value.problems]
    tune = str(path)
    expected = [
        f"{tune}:2: trails_per_arm: unknown option; did you mean 'trials_per_arm'?",
        f"{tune}:3: objective: must be one of 'tail_gain', 'tail_auc', got 'tail'",
        f"{tune}:4: pruner.name: a threshold pruner needs lower, upper or both",
        f"{tune}:7: space.block_grpo.lrr: unknown option; did you mean 'lr'? (block_grpo options)",
        f"{tune}:8: space.block_grpo.group_size.int_uniform[0]: must be >= 2, got 1",
        f"{tune}:9: space.block_grpo.lr.uniform: expected finite low < high, got [0.1, 0.01]",
        f"{tune}:11: space.es.sigma.log_uniform: a log-uniform range needs low > 0, got 0",
        f"{tune}:13: space.nope: unknown arm; known: block_grpo, es",
    ]
    for line in expected:
        assert line in lines, (line, lines)
    assert any(line.startswith(f"{tune}:12: space.es.shaping.choice[1]: must be one of") for line in lines)
    assert any("trials_per_arm: required: here or as --trials-per-arm N" in line for line in lines)
    assert main(["tune", str(path)]) == 2
    assert f"arena tune: {len(lines)} problems:" in capsys.readouterr().err


def test_the_tune_files_own_keys_are_checked_by_the_one_validator(in_tmp):
    path = write_tune(in_tmp, name="my tune", seed=-1, storage=5, trials_per_arm=0, tracking={"uri": 3},
                      pruner={"name": "median", "lower": 0.1})
    with pytest.raises(StudyError) as error:
        tuning.load_tune(path)
    assert {p.path: p.message for p in error.value.problems} == {
        "name": "must use only letters, digits, _ . - (it names files), got 'my tune'",
        "seed": "must be >= 0, got -1",
        "storage": "expected a string or null, got 5",
        "trials_per_arm": "expected an integer >= 1, got 0",
        "tracking.uri": "expected a string or null, got 3",
        "pruner.lower": "goes with name: threshold, not 'median'",
    }
    assert tuning.load_tune(write_tune(in_tmp, name=None, seeds=None), trials_per_arm=2).name == "tune"


def test_dry_run_and_the_shipped_tune_file(in_tmp, capsys, monkeypatch):
    assert main(["tune", str(write_tune(in_tmp)), "--trials-per-arm", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "tune tune: study study.yaml, 2 arms x 3 trials" in out
    assert "evaluation on the train split, seed 1 (the study reports on the heldout split, seed 0)" in out and "block_grpo (block_grpo): lr log_uniform" in out
    assert not (in_tmp / ".arena").exists() and not (in_tmp / "mlflow.db").exists()
    monkeypatch.chdir(ROOT)
    shipped = tuning.load_tune("tunes/es_vs_blockgrpo.yaml")
    base = load_study("studies/es_vs_blockgrpo.yaml")
    assert shipped.tuned == list(base.arms) and shipped.settings.evaluation.seed != base.evaluation.seed
    assert (shipped.settings.evaluation.draws, base.evaluation.draws) == (1, 2)  # the objective reads draw 0 only
    assert not set(shipped.settings.seeds) & set(base.seeds)


def test_a_trial_avoids_every_arms_seeds_trains_its_own_and_ignores_the_final_draws(in_tmp):
    """Trial seeds are free of the study's and of each arm's own seeds, a trial runs them (not the arm's), and a
    study whose verdicts rest on larger final draws still tunes on one draw."""
    arms = {**STUDY["arms"], "block_grpo": {**STUDY["arms"]["block_grpo"], "seeds": [0, 1, 2]}}
    (in_tmp / "study.yaml").write_text(yaml.safe_dump({**STUDY, "arms": arms, "analysis": {"draws": [1, 2]},
                                                       "evaluation": {**STUDY["evaluation"], "draws": 3,
                                                                      "draw_prompts": 6}}))
    tune = tuning.load_tune(write_tune(in_tmp, seeds=2), trials_per_arm=2)
    assert tune.settings.seeds == (3, 4) and tune.settings.evaluation.draws == 1
    trial = tune.study_for("block_grpo", {"lr": 1e-4})
    assert [run.seed for run in trial.runs()] == [3, 4]


@pytest.mark.parametrize("path", sorted((ROOT / "tunes").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_tune_file_dry_runs(path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["tune", str(path.relative_to(ROOT)), "--dry-run"]) == 0
    assert f"study studies/{path.stem}.yaml" in capsys.readouterr().out  # a tune file is named after its study


@pytest.mark.parametrize("value, pruned", [(0.25, False), (0.15, True)])
def test_the_percentile_pruner_prunes_the_bottom_share_it_names(value, pruned):
    """pruner {name: percentile, percentile: 25}: a trial is pruned below the 25th percentile of the finished
    trials' values at that step (numpy's, the oracle: 0.175 of 0.1..0.4), not below the 75th. Optuna's own argument
    means the share kept at the top, so passed through unchanged it would prune 0.25 too."""
    from arena.tune.spec import PrunerSpec

    study = optuna.create_study(direction="maximize",
                                pruner=PrunerSpec(name="percentile", percentile=25.0, n_startup_trials=4).make())
    for finished in (0.1, 0.2, 0.3, 0.4):
        trial = study.ask()
        trial.report(finished, 1)
        study.tell(trial, finished)
    assert np.percentile([0.1, 0.2, 0.3, 0.4], 25) == pytest.approx(0.175)
    trial = study.ask()
    trial.report(value, 1)
    assert bool(trial.should_prune()) is pruned


def test_a_distribution_is_one_kind_of_range_or_choice_and_checks_itself(in_tmp):
    """Each entry is exactly one of the four kinds (a misspelt one gets a close match), and its values fit the
    kind; the well-formed entries beside the broken ones still go through the method's own validator."""
    space = {"block_grpo": {"lr": {"log_unifrom": [1e-5, 1e-3]}, "group_size": {"choice": [2, 2]},
                            "max_new_tokens": {"int_uniform": [0, 8]}},
             "es": {"sigma": {"uniform": [0.1, 0.2], "choice": [0.1]}, "population": {"int_uniform": [4, 8.5]},
                    "alpha": {"choice": []}, "shaping": {"choice": [["zscore"]]}}}
    with pytest.raises(StudyError) as error:
        tuning.load_tune(write_tune(in_tmp, trials_per_arm=1, space=space))
    found = {p.path: p.message for p in error.value.problems}
    kinds = "{uniform: [low, high]}, {log_uniform: [low, high]}, {int_uniform: [low, high]} or {choice: [a, b, ...]}"
    assert found == {
        "space.block_grpo.lr.log_unifrom": "unknown option; did you mean 'log_uniform'?",
        "space.block_grpo.lr": f"expected one of {kinds}; got {{}}",
        "space.block_grpo.group_size.choice": "choices must be distinct, got [2, 2]",
        "space.block_grpo.max_new_tokens.int_uniform[0]": "must be >= 1, got 0",  # the method's check
        "space.es.sigma": f"expected one of {kinds}; got {{'uniform': [0.1, 0.2], 'choice': [0.1]}}",
        "space.es.population.int_uniform": "expected [low, high], two integers, got [4, 8.5]",
        "space.es.alpha.choice": "expected a non-empty list, got []",
        "space.es.shaping.choice[0]": "a choice is a number, a string, true/false or null, got ['zscore']",
    }


def test_a_distribution_proposes_values_of_its_kind_within_its_range():
    """Sampled through Optuna: a log range stays inside it and covers its decades, an integer range gives
    integers at both ends, a choice only its values."""
    from arena.tune.spec import Distribution

    space = {"lr": Distribution(log_uniform=(1e-5, 1e-1)), "k": Distribution(int_uniform=(2, 4)),
             "shaping": Distribution(choice=("zscore", None)), "u": Distribution(uniform=(-1, 1))}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = []
    for _ in range(200):
        trial = study.ask()
        drawn.append({option: d.suggest(trial, option) for option, d in space.items()})
        study.tell(trial, 0.0)
    lrs = np.array([d["lr"] for d in drawn])
    assert lrs.min() >= 1e-5 and lrs.max() <= 1e-1
    assert np.histogram(np.log10(lrs), bins=4, range=(-5, -1))[0].min() > 25  # uniform in the log: ~50 a decade
    assert {d["k"] for d in drawn} == {2, 3, 4} and all(type(d["k"]) is int for d in drawn)
    assert {d["shaping"] for d in drawn} == {"zscore", None}
    assert all(-1 <= d["u"] <= 1 for d in drawn) and type(drawn[0]["u"]) is float
