"""Equal-budget hyperparameter sweeps: ``arena tune TUNE.yaml`` gives every tuned arm of a study the same
number of Optuna trials, each trial one run of the study, and writes the best options as a study snippet.

A tune file names a base study and a search space per arm over the options of the arm's method. Every
section but ``study`` and ``space`` is optional; the values shown are the defaults (``space``: an example)::

    # arena tune tunes/es_vs_blockgrpo.yaml --trials-per-arm 8
    name: es_vs_blockgrpo_tune  # default: the file's stem; names the Optuna studies (<name>/<arm>), the journal,
                                # the MLflow experiment and reports/<name>/
    study: studies/es_vs_blockgrpo.yaml  # required: the base study (a path from the working directory)
    arms: null                  # the arms to tune, a list; null: every arm of the study
    space:                      # required: per tuned arm, option -> distribution, over the method's Config fields
      block_grpo:
        lr: {log_uniform: [1.0e-5, 1.0e-3]}
        draws: {choice: [1, 2, 4]}       # also: uniform: [low, high], int_uniform: [low, high]
      es:
        sigma: {log_uniform: [3.0e-3, 1.0e-1]}
        alpha: {log_uniform: [3.0e-3, 1.0e-1]}
    trials_per_arm: null        # required here or as --trials-per-arm N: finished + pruned trials per arm
    objective: tail_gain        # tail_gain: the tail gain at the end | tail_auc: the area under the tail-reward
                                # curve divided by the budget (the average tail reward over the run)
    seeds: 1                    # training seeds per trial: a count n (the first n integers that are not
                                # seeds of the study) or a list; a trial's value is the mean over its seeds
    evaluation: {}              # merged over the study's evaluation section; defaults: split train (the training
                                # split's own prompts, never the held-out ones the study reports on), seed the study's + 1,
                                # draws 1 (the objective reads draw 0 only)
    budget: {}                  # merged over the study's budget section
    pruner: {name: median, n_startup_trials: 2, n_warmup_steps: 0}  # median | percentile | threshold | none
    sampler: {n_startup_trials: 10}  # TPE: the first n trials of each arm are random (Optuna's default 10)
    seed: 0                     # keys each arm's TPE sampler (with the arm and the trial number)
    storage: null               # null: <workdir>/tune/<name>.journal, an Optuna journal file; a file path;
                                # or a database URL (postgresql://..., mysql://..., sqlite:///...)
    tracking: {uri: null, experiment: null}  # uri null: the study's; experiment null: the tune's name

Trials go to the arm with the fewest until every arm has ``trials_per_arm`` finished or pruned ones, and
no arm gets more (a trial one too many, claimed by a parallel worker at the same moment, is failed before
it runs: ``arena.surplus``). A failed trial (a reward that raised, a non-finite step) does not count; an
arm stops after ``trials_per_arm`` of them. A trial runs the arm with the sampled options over its seeds
through ``arena.runner.execute`` (an MLflow child run per seed, tagged ``arena.tune`` and ``arena.trial``)
and reports the objective's running value at each evaluation point after the start to the pruner; a
trial left RUNNING by a dead process (this machine: its pid is gone; another: no heartbeat for
``STALE_AFTER`` s) is failed and queued again with its options (``arena.retry_of``), and the retry resumes
its runs from their checkpoints. The recipe and the details: docs/reporting.md, "Tuning".

In code: ``load_tune(path, profile, trials_per_arm)`` parses and validates the file against its base study
(``Tune``, each search-space entry a ``Distribution``: every problem at once, with its line; ``Tune.settings``:
the base study as trials run it); ``describe_tune(tune, workdir)`` is what ``--dry-run`` prints; ``sweep(tune,
placement, uri, workdir, out)`` runs and writes ``best.yaml``: each trial is an Optuna objective
(``arena.tune.sweep.objective``).
"""
from arena.tune.spec import Distribution, PrunerSpec, SamplerSpec, Tune, describe_tune, load_tune
from arena.tune.sweep import SweepResult, sweep
from arena.tune.trials import HOST, STALE_AFTER, TrialSeeded, TuneError, claim, counts, fail_stale, next_arm

__all__ = ["HOST", "STALE_AFTER", "Distribution", "PrunerSpec", "SamplerSpec", "SweepResult", "TrialSeeded", "Tune",
           "TuneError", "claim", "counts", "describe_tune", "fail_stale", "load_tune", "next_arm", "sweep"]
