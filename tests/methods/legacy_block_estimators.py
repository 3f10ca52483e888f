"""Frozen copy of the whole-block estimators before sub-blocks (methods/likelihood.py at commit 1735966).

Kept only as the old code path for ``test_whole_sub_block_reduces_exactly_to_the_old_estimators``: with
sub-block = block, the sub-block-aware estimators must return the same masks and bit-identical values.
Do not edit: it is the reference, not code under test.
"""
import numpy as np
import torch

from arena.model.layout import PackedLayout
from arena.rng import torch_generator


def _log_probs_at(policy, hidden, rows, slots, targets, temperature):
    logits = policy.logits(hidden[rows, slots]) / (temperature or 1.0)
    return torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)


def _maskable(batch, block_size):
    positions = torch.arange(batch.ids.shape[1], device=batch.ids.device)
    return batch.completion & (positions % block_size != 0)[None]


def _draw_uniforms(batch, key, draws, shape, purpose):
    return torch.stack([
        torch.stack([1.0 - torch.rand(shape, generator=torch_generator(*key, s, d, purpose)) for d in range(draws)])
        for s in batch.sample_ids
    ]).to(batch.ids.device)


def _ranks(scores, maskable, block_size):
    shape = scores.shape
    keyed = torch.where(maskable, scores, torch.inf).reshape(*shape[:-1], -1, block_size)
    return keyed.argsort(-1).argsort(-1).reshape(shape)


def _blocks(values, block_size):
    return values.repeat_interleave(block_size, -1)


def block_masked(policy, batch, key):
    maskable = _maskable(batch, policy.block_size)
    n, T = maskable.shape
    coef = torch.ones(n, 1, T // policy.block_size, device=maskable.device)
    return _block_estimate(policy, batch, maskable[:, None], coef)


def block_elbo(policy, batch, key, draws, form, antithetic):
    B = policy.block_size
    maskable = _maskable(batch, B)[:, None]
    n, _, T = maskable.shape
    m = maskable.reshape(n, 1, -1, B).sum(-1).float()
    independent = draws // 2 if antithetic else draws
    level = _draw_uniforms(batch, key, independent, (T // B,), purpose=0)
    order = _draw_uniforms(batch, key, independent, (T,), purpose=1)
    if form == "uniform":
        masks = (order <= _blocks(level, B)) & maskable
        coef = 1.0 / level
        if antithetic:
            masks = torch.cat([masks, maskable & ~masks], 1)
            coef = torch.cat([coef, 1.0 / (1.0 - level).clamp_min(1e-12)], 1)
    else:
        count = torch.ceil(level * m).clamp_min(1)
        ranks = _ranks(order, maskable, B)
        masks = (ranks < _blocks(count, B)) & maskable
        coef = m / count
        if antithetic:
            masks = torch.cat([masks, (ranks >= _blocks(count - 1, B)) & maskable], 1)
            coef = torch.cat([coef, m / (m + 1 - count).clamp_min(1)], 1)
    return _block_estimate(policy, batch, masks, coef / draws, monte_carlo=True)


def gauss_legendre_nodes(n):
    x, w = np.polynomial.legendre.leggauss(n)
    return (x + 1) / 2, w / 2


def block_gauss_legendre(policy, batch, key, nodes, exact_count):
    B = policy.block_size
    maskable = _maskable(batch, B)[:, None]
    n, _, T = maskable.shape
    t, w = (torch.tensor(v, dtype=torch.float32, device=maskable.device) for v in gauss_legendre_nodes(nodes))
    order = _draw_uniforms(batch, key, nodes, (T,), purpose=1)
    if exact_count:
        m = maskable.reshape(n, 1, -1, B).sum(-1).float()
        count = torch.ceil(t[None, :, None] * m).clamp_min(1)
        masks = (_ranks(order, maskable, B) < _blocks(count, B)) & maskable
        coef = w[None, :, None] * m / count
    else:
        masks = (order <= t[None, :, None]) & maskable
        coef = (w / t)[None, :, None].expand(n, nodes, T // B)
    return _block_estimate(policy, batch, masks, coef)


def _block_estimate(policy, batch, masks, coef, monte_carlo=False):
    """Returns (logp, units, masks, forward_tokens, draw_values, first_logp)."""
    B = policy.block_size
    n, D, T = masks.shape
    start = int(batch.prompt_lengths.min()) // B * B
    layout = PackedLayout(T, B, n_noisy=D, noisy_start=start)
    noisy = torch.where(masks, policy.mask_id, batch.ids[:, None])[:, :, start:]
    hidden = policy.packed_hidden(batch.ids, batch.valid, noisy, layout)
    blocks = T // B
    device = hidden.device

    first = batch.completion & (torch.arange(T, device=device) % B == 0)[None]
    rows, pos = first.nonzero(as_tuple=True)
    first_terms = _log_probs_at(policy, hidden, rows, layout.predictor_index(pos), batch.ids[rows, pos], batch.temperature)
    first_logp = torch.zeros(n, blocks, device=device).index_put((rows, pos // B), first_terms, accumulate=True)

    rows, draw, pos = masks.nonzero(as_tuple=True)
    slots = layout.predictor_index(pos, draw + 1)
    inner = _log_probs_at(policy, hidden, rows, slots, batch.ids[rows, pos], batch.temperature)
    weighted = inner * coef[rows, draw, pos // B]
    inner_by_draw = torch.zeros(n, D, blocks, device=device).index_put((rows, draw, pos // B), weighted, accumulate=True)
    units = batch.completion.reshape(n, blocks, B).any(-1)
    draw_values = first_logp[:, None] + D * inner_by_draw if monte_carlo else None
    return first_logp + inner_by_draw.sum(1), units, masks, n * layout.total, draw_values, first_logp


LEGACY = {"masked": block_masked, "elbo": block_elbo, "gauss_legendre": block_gauss_legendre}
