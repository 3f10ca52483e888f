"""Every keyed draw keeps its key: the integers each site hands to arena.rng, recorded on the code as it was before
the key domains got names (an independent record that no result moved), and the values those keys give."""
import ast
import enum
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

import arena.estimator_bench
import arena.evaluate
import arena.model.tiny
import arena.report.stats
import arena.runner
import methods.es
import methods.es_noise
import methods.grpo
import methods.likelihood
from arena import rng
from arena.study import EvaluationSpec
from methods.base import make_method
from rewards import Task

KEYED = ("seed_of", "numpy_generator", "torch_generator")
ROOT = Path(__file__).resolve().parents[1]
LIBRARY = [path for package in ("arena", "methods", "rewards") for path in sorted((ROOT / package).rglob("*.py"))
           if path != ROOT / "arena" / "rng.py"]


def record(monkeypatch, *modules) -> list[tuple]:
    """The keys (function name, key) the modules' calls of arena.rng's keyed functions receive, in order."""
    seen = []
    for module in modules:
        for name in KEYED:
            if hasattr(module, name):
                def keyed(*key, _name=name, **options):
                    seen.append((_name, tuple(int(k) for k in key)))
                    return getattr(rng, _name)(*key, **options)
                monkeypatch.setattr(module, name, keyed)
    return seen


def test_the_keyed_functions_give_the_values_they_gave():
    assert rng.seed_of(0, 7, 3) == 6017043774356144487
    assert rng.seed_of(5, 2, 1) == 8434048924178191688
    assert rng.numpy_generator(12, 0).integers(0, 1000, 4).tolist() == [612, 250, 972, 946]
    assert rng.name_key("model.layers.0.mlp.up_proj.weight") == 37553794685495865
    assert torch.rand(3, generator=rng.torch_generator(8, 5, 0, 0, 1, 1)).tolist() == [
        0.6714877486228943, 0.24173545837402344, 0.19828325510025024]


def test_each_key_family_names_distinct_domains():
    families = [value for value in vars(rng).values()
                if isinstance(value, type) and issubclass(value, enum.IntEnum) and value is not enum.IntEnum]
    assert len(families) >= 7
    for family in families:
        assert len({int(member) for member in family.__members__.values()}) == len(family.__members__), family


def _int_constants(tree: ast.Module) -> set[str]:
    """Module-level names bound to an integer literal (``NOISE = 1``, ``A, B = 0, 1``)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple)
                         and isinstance(node.value, ast.Tuple) else [(target, node.value)])
                names |= {t.id for t, v in pairs if isinstance(t, ast.Name) and isinstance(v, ast.Constant)
                          and type(v.value) is int}
    return names


def test_every_domain_of_a_key_is_named_in_arena_rng():
    """No keyed call in arena/, methods/ or rewards/ spells a domain as an integer, here or in a module constant."""
    found = []
    for path in LIBRARY:
        tree = ast.parse(path.read_text())
        constants = _int_constants(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            arguments = node.args if name in KEYED else []
            arguments += [k.value for k in node.keywords if k.arg in ("purpose", "domain")]
            for argument in arguments:
                if (isinstance(argument, ast.Constant) and type(argument.value) is int) or (
                        isinstance(argument, ast.Name) and argument.id in constants):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not found, "key domains spelled as integers (name them in arena/rng.py):\n" + "\n".join(found)


def test_training_prompts_are_keyed_by_seed_train_prompts_step(monkeypatch):
    seen = record(monkeypatch, arena.runner)
    task = SimpleNamespace(examples=lambda split, n, seed, source: [{"seed": seed}], prompt=lambda e, tokenizer: "1+1=")
    policy = SimpleNamespace(tokenizer=None, encode=lambda text: [1])
    run = SimpleNamespace(seed=4, train=SimpleNamespace(prompts_per_step=1), task=SimpleNamespace(source=None))
    examples, _, _ = arena.runner.train_prompts(task, policy, run, step=9)
    assert seen == [("seed_of", (4, 7, 9))]
    assert examples == [{"seed": rng.seed_of(4, 7, 9)}]


class Keyed(Task):
    """A stand-in task whose examples carry the seed they were drawn with."""

    def examples(self, split, n, seed, source=None):
        return [{"a": i, "seed": seed} for i in range(n)]

    def prompt(self, example, tokenizer=None):
        return f"{example['a']}="

    def reward(self, completion, example):
        return 0.0


def test_evaluation_keys(monkeypatch):
    seen = record(monkeypatch, arena.evaluate)
    task = Keyed()
    spec = EvaluationSpec(seed=3, prompts=2, split="heldout", samples=1, max_new_tokens=4, temperature=1.0,
                          hard_fraction=0.5)
    decoded = []
    monkeypatch.setattr(arena.evaluate, "generate", lambda policy, prompts, config, seed, row_ids: (
        decoded.append(seed), SimpleNamespace(texts=["x"] * len(prompts), forward_tokens=0))[1])
    policy = SimpleNamespace(encode=lambda text: [1])
    first = arena.evaluate.Evaluator(task, spec)
    first.decode(policy)
    first.hard_subset(policy)
    second = arena.evaluate.Evaluator(task, spec, draw=2)
    second.decode(policy)
    second.hard_subset(policy)
    assert seen == [("seed_of", (3, 0)), ("seed_of", (3, 1)), ("numpy_generator", (3, 1)),
                    ("seed_of", (3, 2, 2)), ("seed_of", (3, 0, 2)), ("seed_of", (3, 1, 2)),
                    ("numpy_generator", (rng.seed_of(3, 2, 2), 1))]
    assert decoded == [rng.seed_of(3, 0), rng.seed_of(3, 1), rng.seed_of(3, 0, 2), rng.seed_of(3, 1, 2)]


def test_the_prompt_bootstrap_is_keyed_by_twelve_and_the_draw(monkeypatch):
    seen = record(monkeypatch, arena.report.stats)
    values = np.arange(6.0).reshape(1, 6)
    draw = arena.report.stats.Draw(values, values + 1, np.ones(6, bool))
    arena.report.stats.evaluation_variance([(1.0, [draw, draw])], lambda s, e, h: (e - s).mean(-1), resamples=4)
    assert seen == [("numpy_generator", (12, 0)), ("numpy_generator", (12, 1))]


def test_es_keys(monkeypatch, tiny_policy):
    seen = record(monkeypatch, methods.es, methods.es_noise)  # the noise kinds draw, the method decodes
    method = make_method("es", tiny_policy, {"population": 2, "prompts_per_member": 1, "max_new_tokens": 4,
                                             "trainable": "subset",
                                             "trainable_names": ["norm"]}, seed=6)
    method.step([tiny_policy.encode("1+2=")], lambda i, text: 0.0, step=3)
    names = {key[4] for _, key in seen if key[:2] == (6, 1)}
    assert ("seed_of", (6, 2, 3)) in seen
    assert {key[:4] for _, key in seen if key[1] == 1} == {(6, 1, 3, 0)}  # antithetic: members 0, 1 share ε_0
    assert names == {rng.name_key(name) for name, _ in method.params}


def test_grpo_rollout_and_estimator_mask_keys(monkeypatch, tiny_policy):
    for name, options, tails in (("block_grpo", {"estimator": "elbo", "draws": 2}, {(0, 0), (0, 1), (1, 0), (1, 1)}),
                                 ("diffu_grpo", {}, {(0,)})):
        seen = record(monkeypatch, methods.grpo, methods.likelihood)
        method = make_method(name, tiny_policy, {"group_size": 2, "max_new_tokens": 4, "inner_iterations": 2,
                                                 **options}, seed=8)
        method.step([tiny_policy.encode("1+2=")], lambda i, text: float(len(text)), step=5)
        assert seen[0] == ("seed_of", (8, 5))
        masks = [key for function, key in seen[1:]]
        assert {key[:3] for key in masks} == {(8, 5, 0), (8, 5, 1)}
        assert {key[3] for key in masks} == {0, 1}  # the sample ids
        assert {key[4:] for key in masks} == tails  # (draw, purpose: level 0, order 1), or d1's (0,)
        monkeypatch.undo()


def test_gauss_legendre_masks_are_purpose_one(monkeypatch, tiny_policy):
    seen = record(monkeypatch, methods.likelihood)
    batch = methods.likelihood.ScoringBatch.build([tiny_policy.encode("1+2=")], [[5, 6, 7, 8]], tiny_policy.pad_id,
                                                  tiny_policy.block_size)
    methods.likelihood.estimate("gauss_legendre", tiny_policy, batch, (2, 0, 0), nodes=2)
    assert seen == [("torch_generator", (2, 0, 0, 0, 0, 1)), ("torch_generator", (2, 0, 0, 0, 1, 1))]


def test_ebpo_keys_are_its_offset_and_order(monkeypatch, tiny_policy):
    seen = record(monkeypatch, methods.likelihood)
    batch = methods.likelihood.ScoringBatch.build([tiny_policy.encode("1+2=")] * 2, [[5, 6, 7, 8]] * 2, tiny_policy.pad_id,
                                                  tiny_policy.block_size, sample_ids=[0, 3])
    methods.likelihood.estimate("ebpo", tiny_policy, batch, (2, 0, 1))
    assert seen == [("torch_generator", (2, 0, 1, 0, 0, 2)), ("torch_generator", (2, 0, 1, 3, 0, 2)),
                    ("torch_generator", (2, 0, 1, 0, 0, 1)), ("torch_generator", (2, 0, 1, 3, 0, 1))]


def test_the_estimator_bench_keys(monkeypatch, tiny_policy):
    keys = []
    estimate = arena.estimator_bench.estimate

    def recording(name, policy, batch, key, **options):
        keys.append(key)
        return estimate(name, policy, batch, key, **options)

    monkeypatch.setattr(arena.estimator_bench, "estimate", recording)
    prompts = [tiny_policy.encode("1+2=")]
    arena.estimator_bench.measure(tiny_policy, prompts, draws=(1,), nodes=(1,), repeats=1, max_new_tokens=4, seed=3,
                             exact=False, reference_draws=32, progress=False)
    assert set(keys) == {(3, 0, 0), (3, 1, 0), (3, 1, 1)}


def test_pretraining_keys(monkeypatch, tmp_path):
    seen = record(monkeypatch, arena.model.tiny)
    config = arena.model.tiny.TinyConfig(layers=1, hidden=16, heads=2, kv_heads=1, intermediate=32, steps=2, batch=2,
                                         warmup=1, seed=5)
    arena.model.tiny.pretrain(config, tmp_path / "tiny", progress=False)
    assert seen[:5] == [("torch_generator", (5, 0)), ("numpy_generator", (5, 3, 0)), ("torch_generator", (5, 1, 0)),
                        ("torch_generator", (5, 2, 0)), ("numpy_generator", (5, 3, 1))]
