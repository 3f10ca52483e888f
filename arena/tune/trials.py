"""Optuna's side of a sweep: the storage, one study per arm with its trial-seeded TPE sampler, and the trial
lifecycle across processes and machines (claiming a trial, the heartbeat, failing and requeueing stale ones)."""
from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from arena.config import ConfigError, Problem
from arena.rng import name_key, seed_of
from arena.tune.spec import Tune

COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
HEARTBEAT_SECONDS = 60  # a running trial records the time this often ...
STALE_AFTER = 600  # ... and one silent this long is taken for dead (on another machine; here: its pid is gone)
HOST = socket.gethostname()
# trial user attributes
# (a FAIL trial with neither ERROR nor SURPLUS was stale: its process died, and a retry carries RETRY_OF)
OWNER, BEAT, RETRY_OF, ERROR, SURPLUS = ("arena.owner", "arena.heartbeat", "arena.retry_of", "arena.error",
                                         "arena.surplus")


# ---------------------------------------------------------------------------------------------
# Optuna: storage, studies, sampler, trials


def open_storage(url: str):
    """A database URL (``scheme://``) as RDB storage; anything else an Optuna journal file."""
    if "://" in url:
        return optuna.storages.RDBStorage(url)
    from optuna.storages.journal import JournalFileBackend

    Path(url).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(url)))


class TrialSeeded(optuna.samplers.BaseSampler):
    """``TPESampler`` (Optuna's defaults) re-created for each trial with a seed keyed by (seed, arm, trial
    number): reproducible given the history, and a resumed sweep does not replay the first proposals."""

    def __init__(self, seed: int, arm: str, n_startup_trials: int = 10):
        self.seed, self.arm, self.n_startup_trials = seed, arm, n_startup_trials
        self.inner = self._sampler(0)

    def _sampler(self, number: int) -> optuna.samplers.TPESampler:
        return optuna.samplers.TPESampler(n_startup_trials=self.n_startup_trials,
                                          seed=seed_of(self.seed, name_key(self.arm), number) % 2**32)

    def __repr__(self) -> str:
        return (f"TPESampler(Optuna {optuna.__version__} defaults, n_startup_trials={self.n_startup_trials}, "
                f"seed=key({self.seed}, {self.arm!r}, trial number))")

    def before_trial(self, study, trial):
        self.inner = self._sampler(trial.number)
        self.inner.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self.inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values):
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


class TuneError(ConfigError):
    """The storage holds a sweep of the same name with other settings."""


def sampler_for(tune: Tune, arm: str) -> TrialSeeded:
    return TrialSeeded(tune.seed, arm, tune.sampler.n_startup_trials)


def open_studies(tune: Tune, storage) -> dict[str, optuna.Study]:
    """One Optuna study per arm, ``<name>/<arm>``, created or loaded; a loaded one must have the same identity."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies, identity = {}, tune.identity()
    for arm in tune.tuned:
        study = optuna.create_study(storage=storage, study_name=f"{tune.name}/{arm}", direction="maximize",
                                    sampler=sampler_for(tune, arm), pruner=tune.pruner.make(), load_if_exists=True)
        known = study.user_attrs.get("arena.identity")
        if known is None:
            study.set_user_attr("arena.identity", identity)
        elif known != identity:
            raise TuneError([Problem("", f"the storage already holds a sweep {tune.name!r} of arm {arm!r} with "
                                         "other settings (study, evaluation, budget, seeds, objective or space): "
                                         "give this tune another name or storage, or delete the old one")])
        studies[arm] = study
    return studies


@dataclass
class Counts:
    finished: int = 0
    pruned: int = 0
    running: int = 0
    waiting: int = 0
    failed: int = 0  # by an error (not stale, not surplus)

    @property
    def counted(self) -> int:
        return self.finished + self.pruned + self.running + self.waiting


def counts(study: optuna.Study) -> Counts:
    found = study.get_trials(deepcopy=False)
    states = [trial.state for trial in found]
    return Counts(*map(states.count, (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)),
                  sum(trial.state == TrialState.FAIL and ERROR in trial.user_attrs for trial in found))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tell(study: optuna.Study, trial, value: float | None = None, state=TrialState.COMPLETE, error: str = "") -> bool:
    """``study.tell``, with the ``error`` a failed trial records; False when the trial had ended already (failed
    as stale by another worker)."""
    try:
        if error:
            trial.set_user_attr(ERROR, error[:1000])
        study.tell(trial, value, state=state)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    return True


def fail_stale(study: optuna.Study) -> list[int]:
    """Trials left RUNNING by a dead process: marked FAIL and enqueued again with the same options
    (``arena.retry_of``: the first trial of the chain, whose MLflow runs the retry resumes)."""
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = trial.user_attrs.get(OWNER) or {}
        beat = trial.user_attrs.get(BEAT) or (trial.datetime_start.timestamp() if trial.datetime_start else time.time())
        dead = owner.get("host") == HOST and owner.get("pid") != os.getpid() and not _alive(owner.get("pid", 0))
        if not (dead or time.time() - beat > STALE_AFTER):
            continue
        if not tell(study, trial.number, state=TrialState.FAIL):
            continue  # another worker failed it first
        study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.user_attrs.get(RETRY_OF, trial.number)},
                            skip_if_exists=False)
        failed.append(trial.number)
    return failed


def next_arm(tune: Tune, studies: dict) -> str | None:
    """The arm with work left and the fewest trials (finished, pruned, running or queued); None when none has."""
    candidates = []
    for i, arm in enumerate(tune.tuned):
        fail_stale(studies[arm])
        found = counts(studies[arm])
        if found.finished + found.pruned >= tune.trials_per_arm or found.failed >= tune.trials_per_arm:
            continue
        if found.waiting or found.counted < tune.trials_per_arm:
            candidates.append((found.counted, i, arm))
    return min(candidates)[2] if candidates else None


def claim(tune: Tune, study: optuna.Study):
    """A new (or queued) trial of ``study``, or None when it would be one more than ``trials_per_arm``."""
    trial = study.ask()
    numbers = sorted(t.number for t in study.get_trials(deepcopy=False, states=COUNTED))
    if trial.number in numbers and numbers.index(trial.number) >= tune.trials_per_arm:
        trial.set_user_attr(SURPLUS, True)
        tell(study, trial, state=TrialState.FAIL)
        return None
    trial.set_user_attr(OWNER, {"host": HOST, "pid": os.getpid()})
    trial.set_user_attr(BEAT, time.time())
    return trial


@contextlib.contextmanager
def heartbeat(trial):
    """Records the time on the trial every ``HEARTBEAT_SECONDS`` while it runs: the stale test of other machines.

    Workers on several machines can share one storage (a journal on a shared filesystem, a database). A trial
    whose process died stays RUNNING in it, and a RUNNING trial counts toward its arm's ``trials_per_arm``, so
    without a test the arm would never get its trials. On the machine that ran it, the dead owner's pid tells
    (``fail_stale``); a pid of another machine tells nothing here, so there a trial silent for ``STALE_AFTER``
    seconds is taken for dead, failed and queued again, and its retry resumes its runs from their checkpoints.
    """
    stop = threading.Event()

    def beat():
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                trial.set_user_attr(BEAT, time.time())
            except Exception:  # the trial ended meanwhile
                return

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
