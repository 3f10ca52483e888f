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


def test_a_stale_shipped_checkpoint_is_refused(monkeypatch):
    monkeypatch.setattr(tiny, "TinyConfig", lambda: TinyConfig(steps=7))
    with pytest.raises(CheckpointError, match="arena pretrain --out"):
        tiny.shipped_checkpoint()


def test_rebuild_comparison_flags_only_differences_beyond_noise():
    shipped = {"heldout_prompts_per_level": 128, "heldout_greedy": {"1": 0.9, "2": 0.5},
               "heldout_sampled": {"1": 0.6, "2": 0.4}}
    close = {"heldout_greedy": {"1": 0.88, "2": 0.52}, "heldout_sampled": {"1": 0.62, "2": 0.41}}
    far = {"heldout_greedy": {"1": 0.9, "2": 0.1}, "heldout_sampled": {"1": 0.6, "2": 0.4}}
    assert tiny.matches_within_noise(close, shipped) == []
    assert tiny.matches_within_noise(far, shipped) == ["heldout_greedy level 2: 0.100 vs shipped 0.500"]
