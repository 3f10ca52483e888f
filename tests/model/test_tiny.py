"""The tiny model's pretraining: the objective's masks, determinism, the on-disk cache."""
import json

import pytest
import torch

from arena.model import tiny
from arena.model import load_policy
from arena.rng import torch_generator
from arena.model.policy import CheckpointError
from arena.model.tiny import TinyConfig, complementary_masks, pretrain

QUICK = TinyConfig(layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64, steps=25, batch=16, warmup=5)


def test_complementary_masks_cover_each_maskable_position_once():
    target = torch.zeros(64, 24, dtype=torch.bool)
    target[:, 5:21] = True
    masks = complementary_masks(target, 8, torch_generator(0))
    maskable = target & (torch.arange(24) % 8 != 0)
    assert torch.equal(masks.sum(1), maskable.long())  # exactly once, and never a block start or prompt
    rates = masks[:, 0].float().sum() / maskable.sum()
    assert 0.3 < rates < 0.7  # t ~ U(eps, 1) per block: half of the positions on average


def test_pretraining_is_deterministic_learns_and_writes_a_loadable_checkpoint(tmp_path, monkeypatch):
    losses = []
    original = tiny.diffusion_loss

    def recording(*args, **kwargs):
        loss = original(*args, **kwargs)
        losses.append(loss.item())
        return loss

    monkeypatch.setattr(tiny, "diffusion_loss", recording)
    reports = [pretrain(QUICK, tmp_path / name, progress=False) for name in ("a", "b")]
    assert sum(losses[:5]) / 5 > sum(losses[20:25]) / 5 + 0.5  # it learns
    a = load_policy(str(tmp_path / "a"), device="cpu")
    b = load_policy(str(tmp_path / "b"), device="cpu")
    for (name, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.equal(pa, pb), name
    assert reports[0]["heldout_greedy"] == reports[1]["heldout_greedy"]
    assert set(reports[0]["heldout_sampled"]) == {"1", "2", "3"}
    assert json.loads((tmp_path / "a" / "config.json").read_text())["model_type"] == "Fast_dLLM_Qwen"
    assert (a.block_size, a.sub_block) == (QUICK.block_size, QUICK.sub_block)


def test_shipped_checkpoint_loads_without_training_and_reproduces_its_accuracy(monkeypatch, tmp_path):
    """One starting model for everyone: the shipped bytes load on an empty cache, and evaluating them
    here gives exactly the accuracy recorded when they were built (greedy and sampled, every level)."""
    monkeypatch.setenv("ARENA_CACHE", str(tmp_path))
    monkeypatch.setattr(tiny, "pretrain", lambda *a, **k: pytest.fail("load_policy('tiny') must not train"))
    policy = load_policy("tiny", device="cpu")
    shipped = tiny.shipped_report()
    assert shipped["digest"] == TinyConfig().digest()
    from rewards import get_task

    with tiny.one_thread():
        report = tiny.evaluate_levels(policy, get_task(TinyConfig().task), shipped["heldout_prompts_per_level"])
    assert report["heldout_greedy"] == shipped["heldout_greedy"]
    assert report["heldout_sampled"] == shipped["heldout_sampled"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, geometry", [("tiny-multiblock", (16, 8)), ("tiny-inblock", (32, 8))])
def test_each_further_checkpoint_loads_under_its_own_name_at_its_geometry(monkeypatch, tmp_path, name, geometry):
    """The multi-block and in-block models: their own bytes and recipe, at their block / sub-block geometry, at
    most 8 MB, and evaluating them here gives exactly the rewards recorded when they were built."""
    monkeypatch.setenv("ARENA_CACHE", str(tmp_path))
    monkeypatch.setattr(tiny, "pretrain", lambda *a, **k: pytest.fail("load_policy must not train"))
    recipe, shipped_dir = tiny.MODELS[name]
    policy = load_policy(name, device="cpu")
    assert (policy.block_size, policy.sub_block) == geometry == (recipe.block_size, recipe.sub_block)
    assert sum(f.stat().st_size for f in shipped_dir.iterdir()) <= 8 * 2**20
    shipped = tiny.shipped_report(name)
    assert shipped["digest"] == recipe.digest() != TinyConfig().digest()
    from rewards import get_task

    with tiny.one_thread():
        report = tiny.evaluate_levels(policy, get_task(recipe.task), shipped["heldout_prompts_per_level"])
    assert report["heldout_greedy"] == shipped["heldout_greedy"]
    assert report["heldout_sampled"] == shipped["heldout_sampled"]
    assert list(tmp_path.iterdir()) == []


def test_a_stale_shipped_checkpoint_is_refused(monkeypatch):
    monkeypatch.setitem(tiny.MODELS, "tiny", (TinyConfig(steps=7), tiny.MODELS["tiny"][1]))
    with pytest.raises(CheckpointError, match="arena pretrain --model tiny --out"):
        tiny.shipped_checkpoint()
    with pytest.raises(CheckpointError, match="unknown embedded model 'tiny-x'; known: tiny, tiny-multiblock, tiny-inblock"):
        tiny.shipped_checkpoint("tiny-x")


def test_an_embedded_model_that_does_not_ship_yet_says_how_to_build_it(monkeypatch, tmp_path, capsys):
    """tiny-inblock's recipe is registered before its checkpoint ships: loading it names the rebuild command,
    `arena pretrain` builds it and says there is nothing to compare with, instead of failing after training, and
    `arena run` refuses a study on it with that one error before it opens a store or starts a run."""
    from arena.cli import main

    monkeypatch.setitem(tiny.MODELS, "tiny-inblock", (tiny.MODELS["tiny-inblock"][0], tmp_path / "absent"))
    with pytest.raises(CheckpointError, match="arena pretrain --model tiny-inblock --out"):
        load_policy("tiny-inblock")
    report = {"digest": "d", "seconds": 1.0, "heldout_greedy": {"1": 0.5}, "heldout_sampled": {"1": 0.4}}
    monkeypatch.setattr(tiny, "pretrain", lambda config, path, progress: report)
    assert main(["pretrain", "--model", "tiny-inblock", "--out", str(tmp_path / "built"), "--quiet"]) == 0
    assert "no tiny-inblock checkpoint ships yet: nothing to compare with" in capsys.readouterr().out
    study = tmp_path / "study.yaml"
    study.write_text("model: tiny-inblock\ntask: {name: swap_sums}\narms: {a: {method: grpo}}\n")
    assert main(["run", str(study), "--workdir", str(tmp_path / "w"), "--tracking-uri", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "tiny-inblock checkpoint is missing" in err and "Traceback" not in err and not (tmp_path / "m").exists()


def test_rebuild_comparison_flags_only_differences_beyond_noise():
    shipped = {"heldout_prompts_per_level": 128, "heldout_greedy": {"1": 0.9, "2": 0.5},
               "heldout_sampled": {"1": 0.6, "2": 0.4}}
    close = {"heldout_greedy": {"1": 0.88, "2": 0.52}, "heldout_sampled": {"1": 0.62, "2": 0.41}}
    far = {"heldout_greedy": {"1": 0.9, "2": 0.1}, "heldout_sampled": {"1": 0.6, "2": 0.4}}
    assert tiny.matches_within_noise(close, shipped) == []
    assert tiny.matches_within_noise(far, shipped) == ["heldout_greedy level 2: 0.100 vs shipped 0.500"]
