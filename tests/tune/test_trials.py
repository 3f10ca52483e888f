"""Optuna's side of a sweep (``arena.tune.trials``), without a model: the trial protocol (fewest first, surplus,
stale trials retried) and the trial-seeded TPE sampler."""
import subprocess
import sys
import time
import types

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from arena import tune as tuning
from arena.cli import main
from arena.study import StudyError
from tune_support import ARMS, write_tune, tune_dir  # noqa: F401 (the fixture in_tmp)


def test_every_arm_gets_the_same_number_of_trials_and_dead_trials_are_retried():
    """The protocol, without a model: trials go to the arm with the fewest; a trial that would be one too many
    (a parallel worker's) fails before it runs; a trial of a dead process is failed and queued again."""
    tune = types.SimpleNamespace(tuned=list(ARMS), trials_per_arm=2)
    studies = {arm: optuna.create_study(direction="maximize") for arm in ARMS}
    order = []
    while (arm := tuning.next_arm(tune, studies)) is not None:
        trial = tuning.claim(tune, studies[arm])
        trial.suggest_float("x", 0, 1)
        order.append(arm)
        if len(order) == 3:  # a parallel worker claims while the arm's second trial runs: one too many
            assert tuning.claim(tune, studies[arm]) is None
            (surplus,) = studies[arm].get_trials(states=(TrialState.FAIL,))
            assert surplus.user_attrs["arena.surplus"] is True and tuning.counts(studies[arm]).failed == 0
        studies[arm].tell(trial, 1.0)
    assert order == ["block_grpo", "es", "block_grpo", "es"]
    for study in studies.values():
        assert tuning.counts(study).finished == 2

    study = studies["es"] = optuna.create_study(direction="maximize")
    trial = tuning.claim(tune, study)
    trial.suggest_float("x", 0, 1)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    trial.set_user_attr("arena.owner", {"host": tuning.HOST, "pid": gone.pid})
    assert tuning.fail_stale(study) == [trial.number]
    assert study.trials[0].state == TrialState.FAIL and tuning.counts(study).failed == 0  # not a failure
    retry = tuning.claim(tune, study)
    assert retry.user_attrs["arena.retry_of"] == 0 and retry.suggest_float("x", 0, 1) == trial.params["x"]
    retry.set_user_attr("arena.owner", {"host": "elsewhere", "pid": 1})  # another machine: its heartbeat decides
    assert tuning.fail_stale(study) == []
    retry.set_user_attr("arena.heartbeat", time.time() - tuning.STALE_AFTER - 1)
    assert tuning.fail_stale(study) == [retry.number]
    assert tuning.claim(tune, study).user_attrs["arena.retry_of"] == 0  # the chain keeps its first trial


def test_the_tpe_startup_trials_are_set_stated_and_obeyed(in_tmp, capsys):
    """sampler.n_startup_trials: stated in the plan, rejected below 1, and given to TPE: on a smooth toy
    objective, the second half of 24 trials lands nearer the optimum after 3 random ones than when all 24 are
    random (median distance 0.064 against 0.173 at seed 0; 0.06-0.08 against 0.17-0.23 for seeds 0-2)."""
    assert main(["tune", str(write_tune(in_tmp, sampler={"n_startup_trials": 4})), "--trials-per-arm", "16",
                 "--dry-run"]) == 0
    assert "sampler TPE, the first 4 trials of each arm random (4 of 16; n_startup_trials)" in capsys.readouterr().out
    with pytest.raises(StudyError, match="sampler.n_startup_trials: must be >= 1, got 0"):
        tuning.load_tune(write_tune(in_tmp, sampler={"n_startup_trials": 0}, trials_per_arm=4))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    errors = {}
    for startup in (3, 24):
        study = optuna.create_study(direction="maximize", sampler=tuning.TrialSeeded(0, "toy", startup))
        study.optimize(lambda trial: -(trial.suggest_float("x", 0, 1) - 0.8) ** 2, n_trials=24)
        errors[startup] = np.median([abs(t.params["x"] - 0.8) for t in study.trials[12:]])
    assert errors[3] < errors[24] / 2, errors
