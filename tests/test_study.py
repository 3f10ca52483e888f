"""Study files: every mistake at once with its YAML path and line; the one-variable rule; runs and hashes."""
import dataclasses
import textwrap

import pytest
import yaml

from arena.config import ConfigError
from arena.study import RunSpec, Study, StudyError, TaskSpec, load_study, validate
from methods import method_class
from rewards import load_task

VALID = """\
# arena run studies/three.yaml
model: tiny
task:
  name: noisy_arithmetic
  levels: [1, 2]
train:
  prompts_per_step: 16
evaluation:
  prompts: 32
  samples: 4
  alphas: [0.1, 0.25, 0.5]
  primary_alpha: 0.25
budget:
  unit: samples
  amount: 2048
seeds: [0, 1, 2]
reference: block_grpo
arms:
  block_grpo:
    method: block_grpo
    options: {estimator: elbo, draws: 2, lr: 1.0e-4}
  grpo:
    method: grpo
    options: {lr: 1.0e-4}
  es:
    method: es
    options: {sigma: 0.01, alpha: 0.01}
    overrides: {train: {prompts_per_step: 32}}
    confounded_because: "ES needs more prompts per member to rank members"
"""


def write(tmp_path, text: str, name: str = "study.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def errors(path) -> list[str]:
    with pytest.raises(StudyError) as caught:
        load_study(path)
    assert isinstance(caught.value, ConfigError)
    lines = str(caught.value).splitlines()
    assert len(lines) == len(caught.value.problems)
    return lines


def arms(text: str) -> str:
    """A minimal study with the given arms section."""
    return "seeds: 1\narms:\n" + textwrap.indent(textwrap.dedent(text), "  ")


# ---------------------------------------------------------------------------------------------
# a valid study


def test_a_valid_study_expands_into_arms_times_seeds_with_stable_distinct_hashes(tmp_path):
    study = load_study(write(tmp_path, VALID, "three.yaml"))
    assert study.name == "three" and study.reference == "block_grpo" and study.seeds == (0, 1, 2)
    assert study.task == TaskSpec("noisy_arithmetic", (1, 2)) and study.tracking.experiment == "three"
    runs = study.runs()
    assert [(r.arm, r.seed) for r in runs] == [(a, s) for a in ("block_grpo", "grpo", "es") for s in (0, 1, 2)]
    assert len({r.config_hash for r in runs}) == 9 and all(len(r.config_hash) == 12 for r in runs)
    assert [r.config_hash for r in runs] == [r.config_hash for r in load_study(write(tmp_path, VALID, "3.yaml")).runs()]
    es = runs[-1]
    assert es.train.prompts_per_step == 32 and runs[0].train.prompts_per_step == 16
    assert es.options == {"sigma": 0.01, "alpha": 0.01}  # as written; the runner builds the config
    assert es.config.population == method_class("es").Config().population
    resolved = es.resolved()
    assert resolved["options"]["population"] == es.config.population and resolved["budget"]["unit"] == "samples"
    assert yaml.safe_load(yaml.safe_dump(resolved)) == resolved and es.budget_unit == "samples"


def test_a_changed_option_changes_only_that_arms_hashes(tmp_path):
    before = {(r.arm, r.seed): r.config_hash for r in load_study(write(tmp_path, VALID)).runs()}
    changed = VALID.replace("options: {lr: 1.0e-4}", "options: {lr: 2.0e-4}")
    after = {(r.arm, r.seed): r.config_hash for r in load_study(write(tmp_path, changed)).runs()}
    assert {key for key in before if before[key] != after[key]} == {("grpo", s) for s in (0, 1, 2)}


def test_writing_a_default_out_or_1e_minus_4_changes_nothing(tmp_path):
    plain = load_study(write(tmp_path, arms("a: {method: grpo}\nb: {method: grpo, options: {lr: 1e-4}}\n")))
    default_lr = method_class("grpo").Config().lr
    explicit = load_study(write(tmp_path, arms(f"a: {{method: grpo, options: {{lr: {default_lr!r}, group_size: 6}}}}\n"
                                               "b: {method: grpo, options: {lr: 1.0e-4}}\n")))
    assert [r.config_hash for r in plain.runs()] == [r.config_hash for r in explicit.runs()]
    assert plain.arms["b"].options == {"lr": 1e-4}  # YAML 1.1 would read '1e-4' as text


def test_the_resolved_yaml_loads_again_into_the_same_runs(tmp_path):
    study = load_study(write(tmp_path, VALID))
    again = validate(yaml.safe_load(study.resolved_yaml()), "again.yaml")
    assert [r.config_hash for r in again.runs()] == [r.config_hash for r in study.runs()]
    assert study.resolved_yaml().startswith("# resolved from ")


def test_an_arm_label_names_it_in_reports_and_changes_no_hash(tmp_path):
    """``label:`` is presentation: the runs and their hashes are those of the study without it, the resolved study
    keeps it, the controls and unlabelled arms go by their names, and a label must be non-empty text."""
    labelled = VALID.replace("method: es\n", "method: es\n    label: 'ES (σ = 0.01)'\n")
    study, plain = load_study(write(tmp_path, labelled)), load_study(write(tmp_path, VALID, "plain.yaml"))
    assert [r.config_hash for r in study.runs()] == [r.config_hash for r in plain.runs()]
    assert validate(yaml.safe_load(study.resolved_yaml()), "again.yaml").arms["es"].label == "ES (σ = 0.01)"
    assert study.labels() == {"block_grpo": "block_grpo", "grpo": "grpo", "es": "ES (σ = 0.01)",
                              "frozen": "frozen", "sharpen": "sharpen"}  # the controls, on by default
    assert errors(write(tmp_path, VALID.replace("method: es\n", "method: es\n    label: ' '\n"))) == [
        f"{tmp_path / 'study.yaml'}:27: arms.es.label: must be a non-empty text (the arm's name in figures and "
        "tables), or null for the arm's name"]
    assert "arms.es.label" in errors(write(tmp_path, VALID.replace("method: es\n", "method: es\n    label: [a]\n")))[0]


def test_defaults_and_a_seed_count(tmp_path):
    study = load_study(write(tmp_path, arms("only: {method: grpo}\n").replace("seeds: 1", "seeds: 4")))
    assert study.seeds == (0, 1, 2, 3) and study.model == "tiny" and study.reference == "only"
    assert study.task == TaskSpec("noisy_arithmetic", (1, 2)) and study.budget.amount == 2048
    study = validate({"arms": {"x": {"method": "es"}}, "task": {"levels": [1]}}, "s.yaml")
    assert study.task == TaskSpec("noisy_arithmetic", (1,))


def test_controls_are_on_unless_a_study_opts_out_and_never_change_a_runs_hash(tmp_path):
    study = load_study(write(tmp_path, VALID))
    assert study.controls == ("frozen", "sharpen")
    off = load_study(write(tmp_path, VALID + "controls: []\n", "off.yaml"))
    assert off.controls == () and [r.config_hash for r in off.runs()] == [r.config_hash for r in study.runs()]


def test_a_run_holds_its_arms_config_built_once(tmp_path, monkeypatch):
    study = load_study(write(tmp_path, VALID))
    built = []
    monkeypatch.setattr("arena.study.build", lambda *args, **kwargs: built.append(args))
    runs = study.runs()
    assert all(run.config is study.arms[run.arm].config for run in runs) and built == []
    assert runs[0].config.estimator == "elbo" and runs[0].config.draws == 2
    monkeypatch.undo()
    alone = dataclasses.replace(runs[0], config=None)  # a run made without its arm builds its own
    assert alone.config == runs[0].config and alone.config is not runs[0].config
    assert alone.config_hash == runs[0].config_hash


def test_the_profile_is_part_of_every_hash_and_sections_stay_replaceable(tmp_path):
    study = load_study(write(tmp_path, VALID))
    quick = dataclasses.replace(study, profile="quick", model="tiny")
    assert all(a.config_hash != b.config_hash for a, b in zip(study.runs(), quick.runs()))
    run = study.runs()[0]
    assert dataclasses.replace(run, seed=run.seed).config_hash == run.config_hash
    with pytest.raises(ConfigError, match=r"arms\.grpo: differs from the reference arm 'block_grpo' in 2 variables"):
        dataclasses.replace(study, arms={**study.arms, "grpo": dataclasses.replace(
            study.arms["grpo"], overrides={"train": {"prompts_per_step": 8}})})


# ---------------------------------------------------------------------------------------------
# one problem each, with its path and line


def test_a_bad_method_option_names_its_path_and_line(tmp_path):
    text = VALID.replace("options: {lr: 1.0e-4}\n", "options:\n      lr: -1\n")
    line = text.splitlines().index("      lr: -1") + 1
    path = write(tmp_path, text)
    assert errors(path) == [f"{path}:{line}: arms.grpo.options.lr: must be >= 0, got -1"]


def test_wrong_types_and_unknown_keys_with_a_close_match(tmp_path):
    path = write(tmp_path, """\
        seeds: 1
        evaluation:
          samples: many
          temprature: 0.5
        budget: {unit: hours}
        arms:
          a: {method: grpo, option: {lr: 1.0e-4}}
        """)
    assert errors(path) == [
        f"{path}:3: evaluation.samples: expected an integer, got 'many'",
        f"{path}:4: evaluation.temprature: unknown option; did you mean 'temperature'?",
        f"{path}:5: budget.unit: must be one of 'samples', 'tokens', 'forward_tokens', 'flops', 'seconds', got 'hours'",
        f"{path}:7: arms.a.option: unknown option; did you mean 'options'?",
    ]


def test_unknown_top_level_key_and_method_option_key(tmp_path):
    path = write(tmp_path, "seed: [0]\n" + arms("a: {method: es, options: {sigmaa: 0.1}}\n"))
    assert errors(path) == [f"{path}:1: seed: unknown option; did you mean 'seeds'?",
                            f"{path}:4: arms.a.options.sigmaa: unknown option; did you mean 'sigma'?"]


def test_missing_arms(tmp_path):
    path = write(tmp_path, "model: tiny\n")
    assert errors(path) == [f"{path}: arms: required: a mapping of arm name -> {{method, options}}"]


def test_arms_differing_in_two_variables(tmp_path):
    path = write(tmp_path, arms("""\
        grpo: {method: grpo}
        grpo_fast:
          method: grpo
          options: {lr: 1.0e-3}
          overrides: {train: {prompts_per_step: 32}}
        """))
    assert errors(path) == [f"{path}:4: arms.grpo_fast: differs from the reference arm 'grpo' in 2 variables "
                            "(options.lr, train.prompts_per_step); change one variable per arm, or say why in "
                            "confounded_because"]


def test_an_arm_identical_to_the_reference(tmp_path):
    path = write(tmp_path, arms("a: {method: es}\nb: {method: es, options: {sigma: 0.001}}\n"))
    assert errors(path) == [f"{path}:4: arms.b: differs from the reference arm 'a' in nothing (identical); change "
                            "one variable per arm, or say why in confounded_because"]


def test_confounded_because_lifts_the_one_variable_rule(tmp_path):
    text = arms("a: {method: grpo}\nb: {method: grpo, options: {lr: 1.0e-3, beta: 0.04}}\n")
    assert "in 2 variables (options.beta, options.lr)" in errors(write(tmp_path, text))[0]
    study = load_study(write(tmp_path, text.replace("beta: 0.04}", "beta: 0.04}, confounded_because: 'd1 recipe'")))
    assert study.differences("b") == ["options.beta", "options.lr"]  # in the config's field order


def test_a_different_method_is_one_variable_whatever_its_options(tmp_path):
    study = load_study(write(tmp_path, arms("a: {method: grpo, options: {lr: 1.0e-4}}\nb: {method: es, "
                                            "options: {sigma: 0.1}}\nc: {method: block_grpo, options: {draws: 4}}\n")))
    assert study.differences("b") == ["method"] and study.differences("c") == ["method"]


def test_a_different_estimator_carries_its_own_options(tmp_path):
    """block_grpo holds every estimator's options; only the ones the arm's estimator uses can differ."""
    study = load_study(write(tmp_path, arms(
        "elbo: {method: block_grpo, options: {estimator: elbo, draws: 4}}\n"
        "quadrature: {method: block_grpo, options: {estimator: gauss_legendre, nodes: 1}}\n"
        "masked: {method: block_grpo, options: {estimator: masked, nodes: 3}}\n"
        "more_draws: {method: block_grpo, options: {draws: 8}}\n")))
    assert study.differences("quadrature") == ["options.estimator"]  # not draws 4 -> 2, not nodes 2 -> 1
    assert study.differences("masked") == ["options.estimator"]
    assert study.differences("more_draws") == ["options.draws"]
    path = write(tmp_path, arms("a: {method: block_grpo, options: {estimator: masked}}\n"
                                "b: {method: block_grpo, options: {estimator: masked, nodes: 3}}\n"
                                "c: {method: block_grpo, options: {estimator: gauss_legendre, lr: 1.0e-3}}\n"))
    assert errors(path) == [
        f"{path}:4: arms.b: differs from the reference arm 'a' in nothing (identical); change one variable per "
        "arm, or say why in confounded_because",
        f"{path}:5: arms.c: differs from the reference arm 'a' in 2 variables (options.lr, options.estimator); "
        "change one variable per arm, or say why in confounded_because"]


def test_unknown_method_and_unknown_task_list_the_known_ones(tmp_path):
    path = write(tmp_path, "task: {name: arithmetc}\n" + arms("a: {method: grop}\n"))
    found = errors(path)
    assert found[0].startswith(f"{path}:1: task.name: unknown task 'arithmetc'; known tasks: arithmetic, ")
    assert found[1].startswith(f"{path}:4: arms.a.method: unknown method 'grop'; known methods: block_grpo, ")
    assert ", grpo" in found[1] and "noisy_arithmetic" in found[0]


def test_bad_levels_are_refused_by_the_task_itself(tmp_path):
    path = write(tmp_path, "task:\n  name: noisy_arithmetic\n  levels: [1, 7]\n" + arms("a: {method: es}\n"))
    assert errors(path) == [f"{path}:3: task.levels: noisy_arithmetic: levels [7] have no teacher accuracy "
                            "(known levels: [1, 2, 3])"]
    path = write(tmp_path, "task: {name: gsm8k, levels: [1]}\n" + arms("a: {method: es}\n"))
    assert errors(path)[0].startswith(f"{path}:1: task.levels: cannot build task 'gsm8k': ")


def test_negative_budget(tmp_path):
    path = write(tmp_path, "budget:\n  amount: -5\n" + arms("a: {method: es}\n"))
    assert errors(path) == [f"{path}:2: budget.amount: must be a finite number > 0, got -5"]


def test_primary_alpha_not_in_alphas_and_alphas_out_of_range(tmp_path):
    path = write(tmp_path, "evaluation:\n  alphas: [0.1, 1.5]\n  primary_alpha: 0.3\n" + arms("a: {method: es}\n"))
    assert errors(path) == [f"{path}:2: evaluation.alphas[1]: must be a number in (0, 1], got 1.5",
                            f"{path}:3: evaluation.primary_alpha: must be one of alphas [0.1, 1.5], got 0.3"]


def test_final_draw_sizes_and_pooled_draws_are_checked_where_they_are_written(tmp_path):
    path = write(tmp_path, "evaluation:\n  draw_prompts: 64\n  draw_samples: 0\n"
                 "analysis:\n  draws: [1, 1]\n" + arms("a: {method: es}\n"))
    assert errors(path) == [
        f"{path}:2: evaluation.draw_prompts: sizes evaluation draws 1..draws-1, and with draws: 1 there are none; "
        "set draws >= 2",
        f"{path}:3: evaluation.draw_samples: must be >= 1, got 0",
        f"{path}:5: analysis.draws: must list distinct evaluation draws (0, 1, ...), or be null for all, got [1, 1]"]
    path = write(tmp_path, "evaluation:\n  draws: 2\nanalysis:\n  draws: [1, 2]\n" + arms("a: {method: es}\n"))
    assert errors(path) == [f"{path}:4: analysis.draws: pools draws [1, 2], but evaluation.draws is 2 (draws 0..1)"]


def test_final_draws_take_their_own_size_and_a_study_without_them_keeps_its_old_hash(tmp_path):
    """The oracle for the hash is the value this study had before draw_prompts, draw_samples and analysis.draws
    existed (computed at 06093a7): adding a field must not orphan the runs a store already holds."""
    raw = {"name": "h", "evaluation": {"prompts": 12, "samples": 2, "draws": 2}, "seeds": [0],
           "arms": {"grpo": {"method": "grpo", "options": {"lr": 1e-4}}}}
    assert validate(raw, "h.yaml").runs()[0].config_hash == "0d6d139a72e7"
    sized = validate({**raw, "evaluation": {**raw["evaluation"], "draws": 3, "draw_prompts": 40, "draw_samples": 16},
                      "analysis": {"draws": [1, 2]}}, "h.yaml")
    spec = sized.evaluation
    assert (spec.of_draw(0).prompts, spec.of_draw(0).samples) == (12, 2)
    assert (spec.of_draw(2).prompts, spec.of_draw(2).samples) == (40, 16)
    assert sized.analysis.draws == (1, 2) and sized.runs()[0].config_hash != "0d6d139a72e7"


def test_bad_seeds_and_reference(tmp_path):
    path = write(tmp_path, "seeds: [0, -1, 0]\nreference: nobody\narms:\n  a: {method: es}\n")
    assert errors(path) == [f"{path}:1: seeds[1]: must be a non-negative integer, got -1",
                            f"{path}:1: seeds: must be distinct, got [0, -1, 0]",
                            f"{path}:2: reference: no arm named 'nobody'; arms: a"]


def test_an_arm_may_train_more_seeds_than_the_study_and_a_profile_seed_count_overrules_it(tmp_path):
    """A parity claim needs more seeds than a decided difference: an arm's own seeds add runs for that arm alone,
    at the hashes those seeds would have under the study's seeds (so the runs a store holds are found again)."""
    text = VALID.replace("    options: {lr: 1.0e-4}\n  es:", "    options: {lr: 1.0e-4}\n    seeds: 6\n  es:")
    text += "at:\n  fast-dllm-v2-7b: {seeds: 2}\n"
    study, plain = load_study(write(tmp_path, text)), load_study(write(tmp_path, VALID, "plain.yaml"))
    assert study.seeds_of("grpo") == (0, 1, 2, 3, 4, 5) and study.seeds_of("es") == (0, 1, 2)
    ranged = load_study(write(tmp_path, text.replace("seeds: 6", "seeds: {first: 20, count: 3}"), "ranged.yaml"))
    assert ranged.seeds_of("grpo") == (20, 21, 22)
    assert [(r.arm, r.seed) for r in study.runs()].count(("grpo", 5)) == 1 and len(study.runs()) == 3 + 6 + 3
    hashes = {(r.arm, r.seed): r.config_hash for r in plain.runs()}
    assert all(hashes[(r.arm, r.seed)] == r.config_hash for r in study.runs() if (r.arm, r.seed) in hashes)
    again = load_study(write(tmp_path, study.resolved_yaml(), "resolved.yaml"))
    assert [(r.arm, r.seed, r.config_hash) for r in again.runs()] == [(r.arm, r.seed, r.config_hash) for r in study.runs()]
    scaled = load_study(tmp_path / "study.yaml", profile="fast-dllm-v2-7b")
    assert {r.seed for r in scaled.runs()} == {0, 1}  # the profile's 2 seeds, for grpo too


def test_bad_arm_seeds_and_seeds_given_as_an_override(tmp_path):
    path = write(tmp_path, arms("a: {method: es, seeds: [1, 1]}\nb: {method: es, seeds: -2, "
                                "overrides: {seeds: 3}}\n"))
    assert errors(path) == [
        f"{path}:3: arms.a.seeds: must be distinct, got [1, 1]",
        f"{path}:4: arms.b.seeds: expected a list of non-negative integers, a count >= 1 or {{first: N >= 0, count: M "
        ">= 1}, got -2",
        f"{path}:4: arms.b.overrides.seeds: an arm's own seeds are its 'seeds' key (beside 'options'), not an override"]


def test_only_train_may_be_overridden(tmp_path):
    path = write(tmp_path, arms("a: {method: es}\nb: {method: es, overrides: {evaluation: {samples: 2}, "
                                "train: {prompts_per_stp: 2}}}\n"))
    assert errors(path) == [
        f"{path}:4: arms.b.overrides.evaluation: only the train section may be overridden; evaluation is shared by "
        "every arm",
        f"{path}:4: arms.b.overrides.train.prompts_per_stp: unknown option; did you mean 'prompts_per_step'?",
    ]


def test_bad_yaml_empty_file_and_a_list(tmp_path):
    path = write(tmp_path, "arms:\n  a: {method: es\n  b: 1\n")
    (found,) = errors(path)
    assert found.startswith(f"{path}:3: invalid YAML: ") and "(column " in found
    path = write(tmp_path, "# nothing but a comment\n")
    assert errors(path) == [f"{path}: the file is empty; a study needs at least an 'arms:' section"]
    path = write(tmp_path, "- a\n- b\n")
    assert errors(path) == [f"{path}:1: a study is a mapping of sections (model, task, ..., arms), got ['a', 'b']"]
    assert errors(tmp_path / "absent.yaml")[0].startswith(f"{tmp_path / 'absent.yaml'}: cannot read the study: ")


def test_duplicate_keys_are_reported_once(tmp_path):
    path = write(tmp_path, arms("a: {method: es}\na: {method: grpo}\n"))
    assert errors(path) == [f"{path}:4: arms.a: duplicate key (first on line 3); the later one would win"]


def test_import_paths_that_do_not_exist(tmp_path):
    path = write(tmp_path, "task: {name: 'no_such_module:Task'}\n" + arms(
        "a: {method: 'study_plugins:Nothing'}\nb: {method: 'study_plugins:not_a_task'}\n"))
    assert errors(path) == [
        f"{path}:1: task.name: cannot import 'no_such_module:Task': ModuleNotFoundError: No module named "
        "'no_such_module'",
        f"{path}:4: arms.a.method: cannot import 'study_plugins:Nothing': AttributeError: module 'study_plugins' "
        "has no attribute 'Nothing'",
        f"{path}:5: arms.b.method: 'study_plugins:not_a_task' has no Config dataclass",
    ]
    path = write(tmp_path, "task: {name: 'study_plugins:not_a_task'}\n" + arms("a: {method: es}\n"))
    assert errors(path) == [f"{path}:1: task.name: 'study_plugins:not_a_task' did not give a Task: a task subclasses "
                            "rewards.Task, which declares its optional members (reward_range, sample_metrics)"]


# ---------------------------------------------------------------------------------------------
# all at once; import paths that work


def test_several_mistakes_are_reported_together(tmp_path):
    path = write(tmp_path, """\
        modle: tiny
        evaluation: {points: 1}
        budget: {amount: -1}
        arms:
          a: {method: grpo}
          b: {method: grpo, options: {lr: -1}}
          c: {method: grpo, options: {lr: 1.0e-3, beta: 0.1}}
          d: {method: nope}
        """)
    found = errors(path)
    assert [line.split(": ")[1] for line in found] == [
        "modle", "evaluation.points", "budget.amount", "arms.b.options.lr", "arms.c", "arms.d.method"]
    assert found[0] == f"{path}:1: modle: unknown option; did you mean 'model'?"
    assert [line.split(":")[1] for line in found] == ["1", "2", "3", "6", "7", "8"]  # in file order


def test_an_import_path_task_and_method_work(tmp_path):
    study = load_study(write(tmp_path, """\
        task: {name: 'study_plugins:CountingTask', levels: [1, 3]}
        seeds: 2
        arms:
          still: {method: 'study_plugins:Stay'}
          faster: {method: 'study_plugins:Stay', options: {lr: 0.5}}
          grpo: {method: grpo}
        """))
    assert [r.method for r in study.runs()] == ["study_plugins:Stay"] * 4 + ["grpo"] * 2
    assert study.differences("faster") == ["options.lr"] and study.differences("grpo") == ["method"]
    task = load_task(study.task.name, study.task.levels)
    assert task.levels == (1, 3) and task.reward("2", task.examples("train", 2)[1]) == 1.0
    assert load_task("study_plugins:make_counting_task").levels == (1, 2)
    path = write(tmp_path, "task: {name: 'study_plugins:CountingTask', levels: [4]}\n" + arms(
        "a: {method: 'study_plugins:Stay', options: {lr: 0}}\n"))
    assert errors(path) == [f"{path}:1: task.levels: counting: levels must be among 1, 2, 3, got [4]",
                            f"{path}:4: arms.a.options.lr: must be > 0, got 0"]


def test_a_surrogate_or_clip_options_that_cannot_act_at_one_inner_iteration_are_a_warning(tmp_path, capsys):
    """At inner_iterations 1 every ratio is exactly 1: a GRPO variant's surrogate and the clip options change
    nothing, so `arena validate` says so (and still passes); at 2 they act, and nothing is said."""
    from arena.cli import main

    text = arms("""\
        grpo: {method: grpo}
        dual: {method: 'study_plugins:DualClipGRPO'}
        clip: {method: grpo, options: {clip_eps: 0.3}}
        """)
    path = write(tmp_path, text)
    assert [line.split(":")[0] for line in load_study(path).warnings()] == ["arms.dual", "arms.clip"]
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert (f"arena validate: warning: {path}: arms.dual: with inner_iterations: 1 every ratio is exactly 1, so the "
            "surrogate of study_plugins:DualClipGRPO cannot change the update (the run is, bit for bit, what it would "
            "be without them); set inner_iterations >= 2 to let the ratios move") in err
    assert f"{path}: arms.clip: with inner_iterations: 1 every ratio is exactly 1, so clip_eps: 0.3 cannot" in err
    acting = write(tmp_path, text.replace("{method: grpo}", "{method: grpo, options: {inner_iterations: 2}}")
                   .replace("DualClipGRPO'}", "DualClipGRPO', options: {inner_iterations: 2}}")
                   .replace("clip_eps: 0.3}", "clip_eps: 0.3, inner_iterations: 2}"), "acting.yaml")
    assert load_study(acting).warnings() == []


def test_validate_takes_a_raw_dict_so_a_profile_can_rewrite_it_first():
    raw = yaml.safe_load(VALID)
    raw["model"], raw["arms"]["grpo"]["options"]["lr"] = "tiny", 3e-4
    study = validate(raw, "studies/x.yaml")
    assert study.name == "x" and study.source_path == "studies/x.yaml"
    with pytest.raises(StudyError) as caught:
        validate({**raw, "budget": {"amount": 0}}, "studies/x.yaml")
    assert str(caught.value) == "studies/x.yaml: budget.amount: must be a finite number > 0, got 0"
    assert isinstance(Study(arms={"a": study.arms["es"]}).runs()[0], RunSpec)


def test_a_broken_reference_arm_adds_no_comparison_errors(tmp_path):
    path = write(tmp_path, arms("a: {method: grpo, options: {lr: -1}}\nb: {method: es}\nc: {method: es}\n"))
    assert errors(path) == [f"{path}:3: arms.a.options.lr: must be >= 0, got -1"]


def test_seeds_and_name_are_checked_and_weights_are_not_needed_to_validate(tmp_path):
    """A study for a cluster validates on a laptop: missing weights are the run's error (with how to get them)."""
    path = write(tmp_path, "name: my study\nmodel: ./no/such/dir\nseeds: 0\narms: {a: {method: es}}\n")
    assert errors(path) == [
        f"{path}:1: name: must use only letters, digits, _ . - (it names directories), got 'my study'",
        f"{path}:3: seeds: expected a list of non-negative integers, a count >= 1 or {{first: N >= 0, count: M >= 1}}, "
        "got 0",
    ]


def test_every_place_that_lists_the_budget_units_agrees():
    """arena.budget.UNITS is the one list: the study schema, what a run meters and logs, the report's axis
    labels and ``arena report --x`` take theirs from it or must match it, and the docs name every unit."""
    import argparse
    import typing
    from pathlib import Path

    from arena import cli
    from arena.budget import UNITS, Meter
    from arena.report.comparison import X_LABELS
    from arena.study import BudgetSpec

    assert typing.get_args(typing.get_type_hints(BudgetSpec)["unit"]) == UNITS
    assert tuple(Meter().as_dict()) == UNITS
    assert tuple(X_LABELS) == UNITS
    parser = argparse.ArgumentParser()
    cli.add_report(parser.add_subparsers())
    report = parser._subparsers._group_actions[0].choices["report"]
    (x,) = [action for action in report._actions if "--x" in action.option_strings]
    assert tuple(x.choices) == UNITS
    row = next(line for line in (Path(__file__).parents[1] / "docs" / "studies.md").read_text().splitlines()
               if line.startswith("| `unit` |"))
    assert all(f"`{unit}`" in row for unit in UNITS), row


def test_the_schema_tables_of_docs_studies_md_name_every_key():
    """Each key a study may write has a row in its section's table of docs/studies.md (a row may name several)."""
    import re
    from pathlib import Path

    from arena.study import SECTIONS, ArmSpec

    text = (Path(__file__).parents[1] / "docs" / "studies.md").read_text().split("## The schema", 1)[1]
    tables = {heading: re.findall(r"^\| (`[^|]*`) \|", body, re.M)
              for heading, body in re.findall(r"^### (.+?)\n(.*?)(?=^##)", text, re.M | re.S)}
    schema = {"Top level": Study, **{f"`{name}`": spec for name, spec in SECTIONS.items()}, "`arms`": ArmSpec}
    missing = [f"{heading}: {f.name}" for heading, spec in schema.items() for f in dataclasses.fields(spec)
               if f.name not in ("source_path", "profile")  # set by arena, not written
               and not any(f"`{f.name}`" in cell for cell in tables.get(heading, []))]
    assert not missing, missing
