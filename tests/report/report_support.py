"""What the tests of ``arena.report`` share: studies logged with known synthetic curves through arena.tracking
into a SQLite store (runs, tags, params, metrics and artifacts as arena/runner.py writes them; no model), the
report of one of them, and readers of the figures and files a report writes.

The fixtures ``store`` and ``synthetic`` are imported by each test module (a second conftest.py would shadow
tests/conftest.py); an imported fixture is one fixture per module, so what they build is kept in ``BUILT``
and built once per session, as one module-scoped fixture did when the tests were one file."""
import math
import re

import numpy as np
import pytest
import yaml
from matplotlib.collections import PolyCollection
from matplotlib.text import Text
from PIL import Image
from scipy import stats

from arena.report.comparison import write_study_report
from arena.rng import name_key
from arena.study import load_study
from arena.tracking import Tracker

BUILT: dict = {}  # store, synthetic: built by the first test that asks


ARMS = ("grpo", "block_grpo", "es")  # reference first
PROMPTS, SAMPLES, POINTS, AMOUNT, ALPHA = 24, 4, 4, 300, 0.25
MARKS = [0, 100, 200, 300]
DRIFT = {"grpo": 0.0, "block_grpo": 0.25, "es": 0.1}  # how far each arm lifts the success probabilities
SECONDS_PER_SAMPLE = {"grpo": 0.1, "block_grpo": 0.2, "es": 0.1}  # block_grpo twice as slow: a wall-clock panel
FLOPS_PER_SAMPLE = {"grpo": 6e6, "block_grpo": 2e7, "es": 1e6}  # ES has no backward pass
FIGURES = ("tail_reward", "mean_reward", "levels", "final_tail_gain", "tail_profile")
CURVE_FIGURES = ("tail_reward", "mean_reward", "levels")
DEFAULT_COLUMNS = ["arm", "seeds", r"tail gain ($\alpha$=0.25)", "vs reference (tail gain)", "verdict"]  # the docs' set
LABELS = {"grpo": "GRPO", "block_grpo": "Block-GRPO (ELBO, 2 draws, lr 1e-4)", "es": "ES"}  # one long on purpose


def study_file(folder, name: str, seeds: list[int], labels: dict | None = None, file: str | None = None):
    study = {
        "name": name, "task": {"name": "noisy_arithmetic", "levels": [1, 2]}, "train": {"prompts_per_step": 4},
        "evaluation": {"prompts": PROMPTS, "samples": SAMPLES, "points": POINTS, "alphas": [ALPHA, 0.5],
                       "primary_alpha": ALPHA},
        "budget": {"unit": "samples", "amount": AMOUNT}, "seeds": seeds, "reference": "grpo",
        "arms": {"grpo": {"method": "grpo", "options": {"lr": 1e-4, "group_size": 4}},
                 "block_grpo": {"method": "block_grpo", "options": {"lr": 1e-4, "group_size": 4}},
                 "es": {"method": "es", "options": {"population": 4}}},
    }
    for arm, label in (labels or {}).items():
        study["arms"][arm]["label"] = label
    path = folder / f"{file or name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def lower_cvar(per_prompt, alpha):
    return np.sort(per_prompt)[:math.ceil(alpha * len(per_prompt))].mean()


def synthetic_rewards(arm: str, seed: int, point: int) -> np.ndarray:
    """(prompts, samples) binary rewards; every run shares the start (point 0), as the runner's cached start."""
    generator = np.random.default_rng([seed if point else 0, point, name_key(arm) if point else 0])
    probability = np.clip(np.linspace(0.05, 0.9, PROMPTS) + DRIFT[arm] * point / (POINTS - 1) * (1 + 0.3 * seed)
                          - 0.02 * seed * (point > 0), 0, 1)
    return (generator.random((PROMPTS, SAMPLES)) < probability[:, None]).astype(float)


def log_run(tracker, run, parent_id: str, tags: dict | None = None, params: dict | None = None,
            status: str = "FINISHED") -> str:
    """One (arm, seed) run as arena/runner.py logs it: tags, params, study.yaml, then at every mark the eval/*
    and budget/* rows, completions.json and per_prompt_rewards.npz; train/* rows between marks."""
    tags = tags or {"arena.study": run.study, "arena.arm": run.arm, "arena.seed": str(run.seed),
                    "arena.config_hash": run.config_hash, "arena.method": run.method, "arena.profile": "none",
                    "arena.git_commit": "test"}
    run_id = tracker.start_run(f"{run.arm}/seed{run.seed}", parent_id, tags, params or run.resolved())
    tracker.log_text(run_id, "# synthetic\n", "study.yaml")
    start = synthetic_rewards(run.arm, run.seed, 0).mean(axis=1)
    levels = np.arange(PROMPTS) % 2 + 1
    for point, mark in enumerate(MARKS):
        rewards = synthetic_rewards(run.arm, run.seed, point)
        p = rewards.mean(axis=1)
        samples = mark + 4 * (point > 0)  # the runner evaluates after the step that reaches the mark
        tail = lower_cvar(p, ALPHA)
        rows = {"eval/tail_reward": tail, "eval/tail_gain": tail - lower_cvar(start, ALPHA),
                "eval/mean_reward": p.mean(), "eval/mean_gain": p.mean() - start.mean(),
                "eval/tail_reward_a0.5": lower_cvar(p, 0.5), "eval/level1_mean_reward": p[levels == 1].mean(),
                "eval/level2_mean_reward": p[levels == 2].mean(), "eval/weight_drift": 0.01 * point,
                "budget/samples": samples, "budget/tokens": 6 * samples, "budget/forward_tokens": 20 * samples,
                "budget/flops": samples * FLOPS_PER_SAMPLE[run.arm],
                "budget/seconds": samples * SECONDS_PER_SAMPLE[run.arm] * (1 + 0.05 * run.seed)}
        tracker.log_rows(run_id, [(key, value, mark) for key, value in rows.items()])
        if point:
            tracker.log_rows(run_id, [("train/reward_mean", 0.5, mark - 50), ("train/samples", 16, mark + 4)])
        tracker.log_table(run_id, [{"prompt": "1+1=", "completion": "2", "reward": 1.0}],
                          f"evaluations/{mark:09d}/completions.json")
        tracker.log_npz(run_id, {"rewards": rewards, "hard": p < 0.3}, f"evaluations/{mark:09d}/per_prompt_rewards.npz")
    tracker.finish(run_id, status)
    return run_id


def log_study(tracker, study) -> str:
    parent_id = tracker.start_parent(f"{study.name} test", {"arena.study": study.name, "arena.git_commit": "test",
                                                            "arena.profile": "none"})
    for run in study.runs():
        log_run(tracker, run, parent_id)
    tracker.finish(parent_id)
    return parent_id


@pytest.fixture(name="store", scope="session")
def report_store(tmp_path_factory):
    """Three studies in one store: 'synthetic' (3 arms x 4 seeds), 'pair' (3 arms x 2 seeds: t bands wider than
    the reward range) and 'single' (3 arms x 1 seed)."""
    if "store" in BUILT:
        return BUILT["store"]
    folder = tmp_path_factory.mktemp("report")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    studies = {name: load_study(study_file(folder, name, seeds)) for name, seeds in
               (("synthetic", [0, 1, 2, 3]), ("pair", [0, 1]), ("single", [0]))}
    parents = {name: log_study(Tracker(uri, name), study) for name, study in studies.items()}
    BUILT["store"] = folder, uri, studies, parents
    return BUILT["store"]


def report_of(store, name: str):
    folder, uri, studies, _ = store
    return write_study_report(studies[name], Tracker(uri, name), folder / f"direct-{name}", log=False)


@pytest.fixture(name="synthetic", scope="session")
def synthetic_report(store):
    if "synthetic" not in BUILT:
        BUILT["synthetic"] = report_of(store, "synthetic")
    return BUILT["synthetic"]


def final_values(study, key: str) -> dict[str, np.ndarray]:
    """Per arm, each seed's value of ``key`` at the last mark, recomputed here from the synthetic rewards."""
    start = synthetic_rewards("grpo", 0, 0).mean(axis=1)
    out = {}
    for arm in ARMS:
        values = []
        for seed in study.seeds:
            p = synthetic_rewards(arm, seed, POINTS - 1).mean(axis=1)
            values.append({"tail_gain": lower_cvar(p, ALPHA) - lower_cvar(start, ALPHA), "mean": p.mean()}[key])
        out[arm] = np.array(values)
    return out


def lines_of(axis, arms):
    return [line for line in axis.get_lines() if line.get_label() in arms]


def bands_of(axis):
    return [c for c in axis.collections if isinstance(c, PolyCollection)]


def t_interval(values):
    """scipy's Student-t interval of a mean over seeds."""
    values = np.asarray(values)
    return stats.t.interval(0.95, len(values) - 1, values.mean(), stats.sem(values))


def pdf_width(path) -> float:
    """The page width of a PDF in inches, from its MediaBox (points)."""
    x0, _, x1, _ = map(float, re.search(rb"/MediaBox\s*\[([^\]]*)\]", path.read_bytes()).group(1).split())
    return (x1 - x0) / 72


def png_width(path) -> float:
    """The width of a PNG in inches: its pixels at the dpi it records."""
    image = Image.open(path)
    return image.size[0] / image.info["dpi"][0]


def assert_one_column(report):
    """Every figure file 3.4 in wide (the PDFs measured 4.38-4.64 in when a long note widened the tight bounding
    box), and nothing drawn outside the page: the drawn extent of every artist lies within the figure."""
    for name, figure in report.figures.items():
        for width in (pdf_width(report.directory / f"{name}.pdf"), png_width(report.directory / f"{name}.png")):
            assert width == pytest.approx(3.4, abs=0.01), name
        figure.canvas.draw()  # lay it out again at the canvas's dpi, which the measure below uses
        drawn = figure.get_tightbbox(figure.canvas.get_renderer())
        assert drawn.x0 >= -0.01 and drawn.x1 <= 3.41 and drawn.y0 >= -0.01, (name, drawn)
        assert drawn.y1 <= figure.get_figheight() + 0.01, (name, drawn)


def texts(figure) -> list[str]:
    return [text.get_text() for text in figure.findobj(Text) if text.get_text()]


def table_heads(out) -> list[str]:
    lines = (out / "table.tex").read_text().splitlines()
    return [cell.strip() for cell in lines[lines.index(r"\toprule") + 1].removesuffix(r"\\").split("&")]
