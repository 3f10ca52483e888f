"""The tiny model's pretraining: the objective's masks, determinism, the on-disk cache."""
import json

import torch

from arena import tiny
from arena.policy import load_policy
from arena.rng import torch_generator
from arena.tiny import TinyConfig, complementary_masks, pretrain

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
    assert reports[0]["heldout_accuracy"] == reports[1]["heldout_accuracy"]
    assert set(reports[0]["heldout_accuracy"]) == {1, 2, 3, 4}
    assert json.loads((tmp_path / "a" / "config.json").read_text())["model_type"] == "Fast_dLLM_Qwen"
    assert (a.block_size, a.sub_block) == (QUICK.block_size, QUICK.sub_block)


def test_cache_is_keyed_by_config(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENA_CACHE", str(tmp_path))
    built = []
    monkeypatch.setattr(tiny, "pretrain", lambda config, path, progress: built.append(path) or path.mkdir()
                        or (path / "config.json").write_text("{}"))
    first = tiny.pretrained_path(QUICK)
    assert tiny.pretrained_path(QUICK) == first and len(built) == 1  # cached: not rebuilt
    other = tiny.pretrained_path(TinyConfig(**{**QUICK.__dict__, "seed": 1}))
    assert other != first and len(built) == 2
