"""Log-likelihood estimators of completions under the block-diffusion policy (docs/design.md, "The estimators").

Write ℓ_k = log π(y_k | c, y_<k) for block k. Across blocks the chain rule is exact; inside block k
the positions G are given (the prompt tail, or the block's first token, decoded AR from the clean
previous block) and the others are the denoised ones. The sampler denoises a block sub-block by
sub-block (size S, ``batch.sub_block``, by default the policy's, as the sampler's), left to right,
with the later sub-blocks masked meanwhile; so ℓ_k is itself a chain over the sub-blocks s of block k.
With m_s the denoised positions of sub-block s and, for M ⊆ m_s,
S_s(M) = Σ_{i∈M} log p(y_i | y_{m_s - M}, earlier sub-blocks clean, later sub-blocks masked):

    ELBO_k = log p(first token) + Σ_s ∫_0^1 (1/t) E_{M~Bern(t)^m_s}[S_s(M)] dt  ≤  ℓ_k

(for the random-order sampler; each sub-block's term bounds that sub-block's own random-order
likelihood). With S = B it is the whole-block ELBO. The block estimators below estimate each sub-block's
integral, all sub-blocks of all blocks in one forward.

Estimators (``ESTIMATORS``, keyed by the names users write; unit = token for ``ar``/``d1``, block
otherwise):
- ``ar``: causal forward, Σ log p(y_j | y_<j): exact for an AR model, not for this sampler.
- ``d1``: diffu-GRPO's one step (Zhao et al. 2025, arXiv 2504.12216): completion fully masked,
  prompt tokens masked with probability ``p_mask``; mean-field per-token log-probs.
- ``masked``: first-token term + Σ_s S_s(all m_s masked): one pass, neither bound nor unbiased.
- ``elbo``: first-token term + K Monte Carlo draws of each sub-block's integral. ``form="count"``
  (the default): l ~ U{1..m_s}, |M| = l uniform, weight m_s/l. ``form="uniform"``: t ~ U(0,1],
  M ~ Bern(t), weight 1/t: the same expectation (C(m,l)·B(l, m-l+1) = 1/l) but an infinite variance
  (a masked token at small t carries weight 1/t: the second moment diverges like ∫ dt/t), so its
  log-ratios between nearby policies can be huge. Keep ``count``.
  ``antithetic`` pairs draws: (t, M) with (1-t, not M), or for counts (l, M) with (m+1-l, not M plus
  one element of M) — each marginally exact.
- ``gauss_legendre``: Σ_j w_j (1/t_j) S_s(M_j), n Gauss-Legendre nodes on [0,1], one mask per node.
  With Bernoulli(t_j) masks the integrand's expectation is a polynomial of degree m_s-1 in t, so
  n >= ceil(m_s/2) nodes make this unbiased for the ELBO. ``exact_count`` masks |M| = ceil(t_j m_s)
  with weight m_s/|M| integrate a step function of t instead: lower variance, but biased at every
  node count (no n makes it unbiased, unless m_s = 1).
- ``ebpo``: EBPO's estimator (LLaDA 2.1, arXiv 2602.08676): one count-form draw per block, its level
  uniform and the levels of a sequence's blocks stratified (one per stratum of (0, 1)); unbiased for
  each block's ELBO; the sequence's sum has lower variance when the blocks' terms vary alike with the
  level. Derived in ``block_ebpo``.
- ``trajectory``: the exact log-probability of the recorded decoding trajectory (``batch.steps``):
  Σ over decoding steps of log p(tokens committed at that step | the state the sampler was in).

All blocks of a sequence, all K draws and all sub-blocks are scored in one packed forward in which
the noisy streams share one clean stream (``arena.model.layout``: PackedLayout, sub_block_views;
K draws of a block with B/S sub-blocks take K·B/S views). Masks come from generators keyed by
(seed, step, iteration, sample, draw) and are indexed by position and by sub-block, so they differ
across inner iterations and are identical for θ and θ_old inside one; CPU generators give a prefix
of the same stream at any length, so a row's masks do not depend on the padded width of its batch
(tested). The temperature and the sub-block are the sampler's: the likelihood is that of the sampler
that produced the samples (docs/design.md, "The model and its conventions (Fast-dLLM v2)").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Literal

import numpy as np
import torch

from arena.config import Checked, build
from arena.model.layout import (PackedLayout, block_causal_mask, causal_mask, step_ranks, step_views, sub_block_stream,
                                 sub_block_views)
from arena.rng import D1Key, MaskKey, torch_generator


@dataclass
class ScoringBatch:
    """Prompt + completion ids, right-padded to a multiple of the block size, and how they were sampled."""

    ids: torch.Tensor  # (n, T) long
    valid: torch.Tensor  # (n, T) bool
    prompt_lengths: torch.Tensor  # (n,) long
    sample_ids: list[int]  # keys for the masks of each row
    temperature: float = 1.0  # the sampler's temperature
    sub_block: int | None = None  # the sampler's sub-block size; None = the policy's (as SamplerConfig)
    steps: torch.Tensor | None = None  # (n, T) long: the sampler's decoding step per completion token, -1 elsewhere

    @classmethod
    def build(cls, prompts, completions, pad_id: int, block_size: int, temperature: float = 1.0,
              sample_ids=None, device="cpu", sub_block: int | None = None, steps=None) -> "ScoringBatch":
        """``steps``: ``Generation.steps`` (one list per completion), needed by ``trajectory`` only."""
        lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
        T = -(-max(lengths) // block_size) * block_size
        ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)
        for row, (p, c) in enumerate(zip(prompts, completions)):
            ids[row, : lengths[row]] = torch.tensor(list(p) + list(c))
        valid = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
        step_ids = None
        if steps is not None:
            step_ids = torch.full((len(prompts), T), -1, dtype=torch.long)
            for row, (p, c, s) in enumerate(zip(prompts, completions, steps)):
                if len(s) != len(c):
                    raise ValueError(f"row {row}: {len(s)} steps for {len(c)} completion tokens")
                step_ids[row, len(p) : lengths[row]] = torch.tensor(list(s), dtype=torch.long)
            step_ids = step_ids.to(device)
        return cls(ids.to(device), valid.to(device), torch.tensor([len(p) for p in prompts], device=device),
                   list(range(len(prompts))) if sample_ids is None else list(sample_ids), temperature, sub_block,
                   step_ids)

    def rows(self, index: slice) -> "ScoringBatch":
        """The rows ``index`` (a micro-batch); masks stay keyed by each row's own sample id."""
        return ScoringBatch(self.ids[index], self.valid[index], self.prompt_lengths[index], self.sample_ids[index],
                            self.temperature, self.sub_block, None if self.steps is None else self.steps[index])

    @property
    def completion(self) -> torch.Tensor:
        positions = torch.arange(self.ids.shape[1], device=self.ids.device)[None]
        return (positions >= self.prompt_lengths[:, None]) & self.valid


@dataclass
class Estimate:
    logp: torch.Tensor  # (n, U) differentiable per-unit estimates
    units: torch.Tensor  # (n, U) bool: which units count
    masks: torch.Tensor  # (n, D, T) bool: the masks used (True = masked)
    forward_tokens: int
    draw_values: torch.Tensor | None = None  # (n, D, U): each draw's own unbiased estimate (MC only)
    first_token_logp: torch.Tensor | None = None  # (n, blocks): the exact AR terms (block estimators)
    token_logp: torch.Tensor | None = None  # (n, T): each completion token's own term (trajectory)


def _log_probs_at(policy, hidden, rows, slots, targets, temperature: float) -> torch.Tensor:
    """log softmax(logits / T)[target] at the given (row, packed slot) pairs only."""
    logits = policy.logits(hidden[rows, slots]) / (temperature or 1.0)
    return torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)


# ---------------------------------------------------------------------------------------------
# token-unit estimators


def ar(policy, batch: ScoringBatch, key: tuple[int, ...]) -> Estimate:
    n, T = batch.ids.shape
    positions = torch.arange(T, device=batch.ids.device)
    hidden = policy.hidden(batch.ids, positions.expand(n, -1), causal_mask(batch.valid))
    rows, pos = batch.completion.nonzero(as_tuple=True)
    logp = torch.zeros(n, T, device=hidden.device, dtype=torch.float32)
    logp = logp.index_put((rows, pos), _log_probs_at(policy, hidden, rows, pos - 1, batch.ids[rows, pos], batch.temperature))
    return Estimate(logp, batch.completion, torch.zeros(n, 1, T, dtype=torch.bool, device=batch.ids.device), n * T)


def d1(policy, batch: ScoringBatch, key: tuple[int, ...], p_mask: float) -> Estimate:
    n, T = batch.ids.shape
    device = batch.ids.device
    uniforms = torch.stack([torch.rand(T, generator=torch_generator(*key, s, D1Key.PROMPT_MASK)) for s in batch.sample_ids]).to(device)
    prompt = batch.valid & ~batch.completion
    masks = batch.completion | (prompt & (uniforms < p_mask))
    noisy = torch.where(masks, policy.mask_id, batch.ids)
    positions = torch.arange(T, device=device).expand(n, -1)
    hidden = policy.hidden(noisy, positions, block_causal_mask(positions, positions, policy.block_size, batch.valid))
    rows, pos = batch.completion.nonzero(as_tuple=True)
    logp = torch.zeros(n, T, device=device, dtype=torch.float32)
    logp = logp.index_put((rows, pos), _log_probs_at(policy, hidden, rows, pos - 1, batch.ids[rows, pos], batch.temperature))
    return Estimate(logp, batch.completion, masks[:, None], n * T)


# ---------------------------------------------------------------------------------------------
# block-unit estimators: each plans masks (n, D, T) and coefficients (n, D, sub-blocks); one shared pass


def sub_block_of(policy, batch: ScoringBatch) -> int:
    """The sub-block size the samples were decoded with: the batch's, else the policy's (as the sampler)."""
    S = batch.sub_block or policy.sub_block
    if S < 1 or policy.block_size % S:
        raise ValueError(f"sub_block {S} must divide the block size {policy.block_size}")
    return S


def _maskable(batch: ScoringBatch, block_size: int) -> torch.Tensor:
    """Completion positions that are denoised (every completion position but block starts)."""
    positions = torch.arange(batch.ids.shape[1], device=batch.ids.device)
    return batch.completion & (positions % block_size != 0)[None]


def _draw_uniforms(batch: ScoringBatch, key, draws: int, shape, purpose: MaskKey) -> torch.Tensor:
    """(n, draws, *shape) uniforms in (0, 1], keyed by (key..., sample, draw, purpose)."""
    return torch.stack([
        torch.stack([1.0 - torch.rand(shape, generator=torch_generator(*key, s, d, purpose)) for d in range(draws)])
        for s in batch.sample_ids
    ]).to(batch.ids.device)


def _ranks(scores: torch.Tensor, maskable: torch.Tensor, group: int) -> torch.Tensor:
    """Rank of each maskable position inside its group of ``group`` positions (a sub-block) by ``scores``."""
    shape = scores.shape
    keyed = torch.where(maskable, scores, torch.inf).reshape(*shape[:-1], -1, group)
    return keyed.argsort(-1).argsort(-1).reshape(shape)


def _blocks(values: torch.Tensor, size: int) -> torch.Tensor:
    """Per-group values (..., T/size) spread over the positions of each group (..., T)."""
    return values.repeat_interleave(size, -1)


def block_masked(policy, batch: ScoringBatch, key: tuple[int, ...]) -> Estimate:
    S = sub_block_of(policy, batch)
    maskable = _maskable(batch, policy.block_size)
    n, T = maskable.shape
    coef = torch.ones(n, 1, T // S, device=maskable.device)
    return _block_estimate(policy, batch, maskable[:, None], coef, S)


def block_elbo(policy, batch: ScoringBatch, key: tuple[int, ...], draws: int, form: str, antithetic: bool) -> Estimate:
    S = sub_block_of(policy, batch)
    maskable = _maskable(batch, policy.block_size)[:, None]  # (n, 1, T)
    n, _, T = maskable.shape
    m = maskable.reshape(n, 1, -1, S).sum(-1).float()  # (n, 1, sub-blocks): m_s
    independent = draws // 2 if antithetic else draws
    level = _draw_uniforms(batch, key, independent, (T // S,), purpose=MaskKey.LEVEL)  # (n, K', sub-blocks)
    order = _draw_uniforms(batch, key, independent, (T,), purpose=MaskKey.ORDER)  # (n, K', T)
    if form == "uniform":
        masks = (order <= _blocks(level, S)) & maskable
        coef = 1.0 / level
        if antithetic:
            masks = torch.cat([masks, maskable & ~masks], 1)
            coef = torch.cat([coef, 1.0 / (1.0 - level).clamp_min(1e-12)], 1)
    else:
        count = torch.ceil(level * m).clamp_min(1)  # l ~ U{1..m_s}
        ranks = _ranks(order, maskable, S)
        masks = (ranks < _blocks(count, S)) & maskable
        coef = m / count
        if antithetic:  # partner: ranks >= l-1, i.e. not M plus M's last element: size m+1-l
            masks = torch.cat([masks, (ranks >= _blocks(count - 1, S)) & maskable], 1)
            coef = torch.cat([coef, m / (m + 1 - count).clamp_min(1)], 1)
    return _block_estimate(policy, batch, masks, coef / draws, S, monte_carlo=True)


def stratified_levels(active: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """(n, blocks) levels in [0, 1), one per ``active`` block, the N of a row one in each stratum [c/N, (c+1)/N).

    The j-th active block of a row (j = 0..N-1, left to right) gets t_j = frac(u + j/N) for the row's
    ``offset`` u, uniform (only frac(u) matters), written ((j + floor(uN)) mod N + frac(uN)) / N in float64
    so that no rounding carries a level into its neighbour's stratum. Each t_j alone is U[0, 1) (a shift
    of a uniform, mod 1). Inactive blocks get 0 (they have no denoised positions to mask).
    """
    active = active.to(torch.float64)
    N = active.sum(-1, keepdim=True)
    j = active.cumsum(-1) - 1
    scaled = offset.to(torch.float64)[:, None] * N
    stratum = torch.remainder(j + torch.floor(scaled), N.clamp_min(1))
    return torch.where(active > 0, (stratum + scaled - torch.floor(scaled)) / N.clamp_min(1), 0.0)


def block_ebpo(policy, batch: ScoringBatch, key: tuple[int, ...]) -> Estimate:
    """EBPO's block ELBO (LLaDA 2.1, arXiv 2602.08676): one noise level per block, stratified across the
    sequence's blocks, every block's noisy view in one packed forward.

    What it estimates. Block k's term is the first-token term plus, for each sub-block s with m_s
    denoised positions, (m_s / l_s) Σ_{i∈M_s} log p(y_i | the rest of the view), where the view shows
    the clean earlier blocks, the earlier sub-blocks of block k clean and its later ones masked (the
    sampler's state), l_s = floor(t_k m_s) + 1 and M_s is a uniformly random l_s-subset of the sub-block.
    If t_k ~ U[0, 1), l_s is uniform on {1..m_s}, and since C(m,l)·B(l, m-l+1) = 1/l,

        E[(m/l) S_s(M)] = Σ_l (1/m)(m/l) E_{|M|=l}[S_s(M)] = Σ_M B(|M|, m-|M|+1) S_s(M)
                        = ∫_0^1 (1/t) E_{M~Bern(t)}[S_s(M)] dt,

    the continuous-time ELBO of the sub-block given the clean prefix. Summed over sub-blocks, the
    expectation of block k's estimate is the block's sub-block-chain ELBO (the module docstring), which
    is at most log π(y_k | c, y_<k): a lower bound in expectation. Only each level's marginal law
    enters, so any joint law of the levels with uniform marginals keeps every block unbiased. The level
    becomes a count as in ``elbo``'s count form and in DARE's EBPO (arXiv 2604.04215); a Bernoulli(t)
    mask with weight 1/t has the same mean and an infinite variance.

    Stratification. The N blocks of a row that hold denoised positions get t_j = frac(u + j/N), one
    u ~ U[0, 1) per row (``stratified_levels``): each t_j is uniform, and the N levels fall one in each
    stratum [c/N, (c+1)/N). With v_k a block's estimate and g_k(t) = E[v_k | t_k = t],
    Var(Σ_k v_k) = Σ_k E[Var(v_k | t_k)] + Var(Σ_k g_k(t_k)): the mask choice given the levels (the first
    term) is as with independent levels; the second is a systematic-sampling sum, small when the g_k
    are alike (e.g. all falling as more of the block is masked), against Σ_k Var(g_k(t_k)) for
    independent levels. So stratification lowers the variance of what sums over blocks (EBPO's
    sequence-level ratio, ``sequence_logprob``), not of one block's term: block_grpo's per-block ratios
    each see one block's term, and only their correlation within a sequence changes. With one block
    (N = 1) there is nothing to stratify.

    Against ``elbo``. With sub-block = block, block k's estimate has exactly the law of the 1-draw
    count-form ``elbo``'s; only the joint law across blocks differs (stratified here, independent there).
    With sub-blocks, ``elbo`` draws one level per sub-block, independently, and ``ebpo`` one per block,
    shared by its sub-blocks (l_s = floor(t_k m_s) + 1): still unbiased, but the sub-block terms of a block
    move together, which can raise one block's variance. Cost: one mask per block, B/S views, as the
    1-draw ``elbo``: T + (B/S)·(T - start) packed positions per sequence, one forward. Keys: the offset
    (key..., sample, 0, OFFSET) and the order of the positions (key..., sample, 0, ORDER).
    """
    S, B = sub_block_of(policy, batch), policy.block_size
    maskable = _maskable(batch, B)[:, None]  # (n, 1, T)
    n, _, T = maskable.shape
    m = maskable.reshape(n, 1, -1, S).sum(-1).float()  # (n, 1, sub-blocks): m_s
    offset = _draw_uniforms(batch, key, 1, (1,), purpose=MaskKey.OFFSET)[:, 0, 0]
    levels = stratified_levels(maskable.reshape(n, T // B, B).any(-1), offset)  # (n, blocks)
    count = torch.minimum(torch.floor(_blocks(levels, B // S)[:, None] * m) + 1, m.clamp_min(1)).float()
    order = _draw_uniforms(batch, key, 1, (T,), purpose=MaskKey.ORDER)
    masks = (_ranks(order, maskable, S) < _blocks(count, S)) & maskable
    return _block_estimate(policy, batch, masks, m / count, S, monte_carlo=True)


def gauss_legendre_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of n-point Gauss-Legendre quadrature on [0, 1]."""
    x, w = np.polynomial.legendre.leggauss(n)
    return (x + 1) / 2, w / 2


def block_gauss_legendre(policy, batch: ScoringBatch, key: tuple[int, ...], nodes: int, exact_count: bool) -> Estimate:
    S = sub_block_of(policy, batch)
    maskable = _maskable(batch, policy.block_size)[:, None]
    n, _, T = maskable.shape
    t, w = (torch.tensor(v, dtype=torch.float32, device=maskable.device) for v in gauss_legendre_nodes(nodes))
    order = _draw_uniforms(batch, key, nodes, (T,), purpose=MaskKey.ORDER)  # one mask per node
    if exact_count:
        m = maskable.reshape(n, 1, -1, S).sum(-1).float()
        count = torch.ceil(t[None, :, None] * m).clamp_min(1)  # (n, nodes, sub-blocks)
        masks = (_ranks(order, maskable, S) < _blocks(count, S)) & maskable
        coef = w[None, :, None] * m / count
    else:
        masks = (order <= t[None, :, None]) & maskable
        coef = (w / t)[None, :, None].expand(n, nodes, T // S)
    return _block_estimate(policy, batch, masks, coef, S)


def _packed_forward(policy, batch: ScoringBatch, views: torch.Tensor):
    """One forward of [clean | views]: hidden states, the layout, and the (n, blocks) first-token terms."""
    B = policy.block_size
    n, V, T = views.shape
    start = int(batch.prompt_lengths.min()) // B * B
    layout = PackedLayout(T, B, n_noisy=V, noisy_start=start)
    noisy = torch.where(views, policy.mask_id, batch.ids[:, None])[:, :, start:]
    hidden = policy.packed_hidden(batch.ids, batch.valid, noisy, layout)
    first = batch.completion & (torch.arange(T, device=hidden.device) % B == 0)[None]
    rows, pos = first.nonzero(as_tuple=True)
    first_terms = _log_probs_at(policy, hidden, rows, layout.predictor_index(pos), batch.ids[rows, pos], batch.temperature)
    first_logp = torch.zeros(n, T // B, device=hidden.device).index_put((rows, pos // B), first_terms, accumulate=True)
    return hidden, layout, first_logp


def _block_estimate(policy, batch: ScoringBatch, masks, coef, sub_block: int, monte_carlo: bool = False) -> Estimate:
    """Σ over blocks' first-token terms + Σ_d coef[d, sub-block] Σ_{i in M_d} log p_d(y_i), per block.

    Mask d of sub-block s is scored in its own view (``sub_block_views``): earlier sub-blocks clean,
    later sub-blocks masked, as the sampler saw them; D masks of B/S sub-blocks take D·B/S views.
    """
    B, S = policy.block_size, sub_block
    n, D, T = masks.shape
    views = sub_block_views(masks, _maskable(batch, B)[:, None], B, S)
    hidden, layout, first_logp = _packed_forward(policy, batch, views)
    blocks = T // B

    rows, draw, pos = masks.nonzero(as_tuple=True)
    slots = layout.predictor_index(pos, sub_block_stream(draw, pos, B, S) + 1)
    inner = _log_probs_at(policy, hidden, rows, slots, batch.ids[rows, pos], batch.temperature)
    weighted = inner * coef[rows, draw, pos // S]
    inner_by_draw = torch.zeros(n, D, blocks, device=hidden.device).index_put((rows, draw, pos // B), weighted, accumulate=True)
    units = batch.completion.reshape(n, blocks, B).any(-1)
    # Monte Carlo: each draw alone (first-token term + D x its weighted inner sum) is unbiased too
    draw_values = first_logp[:, None] + D * inner_by_draw if monte_carlo else None
    return Estimate(first_logp + inner_by_draw.sum(1), units, masks, n * layout.total, draw_values, first_logp)


def trajectory(policy, batch: ScoringBatch, key: tuple[int, ...]) -> Estimate:
    """Exact log-probability of the recorded decoding trajectory, per block (``batch.steps`` needed).

    The sampler, at each decoding step of a block, forwards the block in its current state (tokens
    decoded at earlier steps visible, the rest masked, later sub-blocks included), draws a token for
    each candidate position and commits some of them. The trajectory's probability is the product
    over steps of p_θ(committed tokens | that state) times the probability of which positions were
    committed. Under ``order: random`` that choice is uniform, independent of θ, so this estimate is
    log π_θ(trajectory) up to a constant and its ratios between policies are exact. Under
    ``order: confidence`` the choice depends on θ through the drawn tokens' probabilities (and on
    draws that were discarded); it is treated as given, so this is the exact log-probability of the
    committed tokens along the recorded order. The first token of a block is its AR term, as in the
    other block estimators. Token i's term is log p(y_i | positions of earlier steps visible): the
    block's (v+1)-th step is view v (``step_views``), so a block of V steps costs V·B tokens in the
    one packed forward. Deterministic: ``key`` is unused. Unit: block (see ``ESTIMATORS``). At the
    batch's temperature (0: the untempered probabilities greedy rows report), without top-p
    truncation (RL rollouts keep top_p = 1): then each term is the log of the probability the
    sampler recorded drawing that token with.
    """
    if batch.steps is None:
        raise ValueError("the trajectory estimator needs the sampler's recorded steps: build the ScoringBatch "
                         "with steps=Generation.steps")
    B = policy.block_size
    maskable = _maskable(batch, B)
    if (batch.steps[maskable] < 0).any():
        raise ValueError("trajectory: a denoised completion position has no recorded step")
    n, T = maskable.shape
    ranks = step_ranks(batch.steps, maskable, B)
    views = step_views(ranks, int(ranks.max()) + 1 if maskable.any() else 0)
    hidden, layout, first_logp = _packed_forward(policy, batch, views)

    rows, pos = maskable.nonzero(as_tuple=True)
    slots = layout.predictor_index(pos, ranks[rows, pos] + 1)
    inner = _log_probs_at(policy, hidden, rows, slots, batch.ids[rows, pos], batch.temperature)
    logp = first_logp.index_put((rows, pos // B), inner, accumulate=True)
    first = batch.completion & ~maskable
    token_logp = torch.zeros(n, T, device=hidden.device).index_put((rows, pos), inner)
    token_logp = token_logp.index_put(first.nonzero(as_tuple=True), first_logp.repeat_interleave(B, -1)[first])
    units = batch.completion.reshape(n, T // B, B).any(-1)
    return Estimate(logp, units, views, n * layout.total, None, first_logp, token_logp)


# ---------------------------------------------------------------------------------------------
# the vocabulary: one entry per name users write, with its function, unit and options (one default each)


@dataclass(frozen=True)
class NoOptions(Checked):
    pass


@dataclass(frozen=True)
class D1Options(Checked):
    p_mask: float = 0.15  # prompt masking probability (d1 runs: 0.15; its config default is 0.3)

    def problems(self):
        if not 0.0 <= self.p_mask < 1.0:
            yield "p_mask", f"must be in [0, 1), got {self.p_mask!r}"


ElboForm = Literal["count", "uniform"]


@dataclass(frozen=True)
class ElboOptions(Checked):
    draws: int = 2  # Monte Carlo draws per block, sharing one clean stream
    form: ElboForm = "count"  # count: l ~ U{1..m}, weight m/l; uniform: t ~ U(0,1], weight 1/t (infinite variance)
    antithetic: bool = False  # pair each draw with its complement

    def problems(self):
        if self.draws < 1:
            yield "draws", f"must be >= 1, got {self.draws!r}"
        elif self.antithetic and self.draws % 2:
            yield "draws", f"antithetic draws come in pairs: must be even, got {self.draws!r}"


@dataclass(frozen=True)
class GaussLegendreOptions(Checked):
    nodes: int = 2  # quadrature nodes; with Bernoulli masks (exact_count off), >= ceil(m_s/2) make it unbiased
    exact_count: bool = False  # |M| = ceil(t m_s) masks: lower variance, biased at every node count

    def problems(self):
        if self.nodes < 1:
            yield "nodes", f"must be >= 1, got {self.nodes!r}"


@dataclass(frozen=True)
class Estimator:
    function: Callable[..., Estimate]
    unit: Literal["token", "block"]  # what one importance ratio covers
    options: type  # a Checked dataclass: the estimator's options and their defaults


ESTIMATORS = {
    "ar": Estimator(ar, "token", NoOptions),
    "d1": Estimator(d1, "token", D1Options),
    "masked": Estimator(block_masked, "block", NoOptions),
    "elbo": Estimator(block_elbo, "block", ElboOptions),
    "gauss_legendre": Estimator(block_gauss_legendre, "block", GaussLegendreOptions),
    "ebpo": Estimator(block_ebpo, "block", NoOptions),
    # block: one ratio per block, like the other block estimators (block_grpo compares them unit for
    # unit); the tokens of one decoding step are one joint action, which a token unit would split
    "trajectory": Estimator(trajectory, "block", NoOptions),
}
BLOCK_ESTIMATORS = tuple(name for name, spec in ESTIMATORS.items() if spec.unit == "block")


def get_estimator(name: str) -> Estimator:
    if name not in ESTIMATORS:
        raise KeyError(f"unknown estimator {name!r}; known: {', '.join(ESTIMATORS)}")
    return ESTIMATORS[name]


def unit_mask(name: str, batch: ScoringBatch, block_size: int) -> torch.Tensor:
    """Which units of each row an estimator reports: completion tokens, or blocks holding any."""
    if get_estimator(name).unit == "token":
        return batch.completion
    return batch.completion.reshape(len(batch.sample_ids), -1, block_size).any(-1)  # as _block_estimate


@dataclass(frozen=True)
class Scorer:
    """An estimator with every one of its options, checked once (by ``Scorer.of``, or by the method config that
    holds them): ``scorer(policy, batch, key)`` estimates, as often as a method scores."""

    name: str  # a name of ESTIMATORS
    options: dict  # every option of its option class

    @classmethod
    def of(cls, name: str, **options) -> "Scorer":
        """Estimator ``name`` with ``options`` (the rest at their defaults), checked against its own option class."""
        checked = build(get_estimator(name).options, options, where=f"estimator[{name}]")
        return cls(name, asdict(checked))

    def __call__(self, policy, batch: ScoringBatch, key: tuple[int, ...]) -> Estimate:
        """The estimate of ``batch`` under ``policy``; ``key`` = (seed, step, iteration) keys the masks."""
        return ESTIMATORS[self.name].function(policy, batch, tuple(key), **self.options)


def estimate(name: str, policy, batch: ScoringBatch, key: tuple[int, ...], **options) -> Estimate:
    """Run estimator ``name`` once with its options (the rest at their defaults), checked first; a method
    scoring many batches holds a ``Scorer`` instead."""
    return Scorer.of(name, **options)(policy, batch, key)


def sequence_logprob(est: Estimate) -> torch.Tensor:
    """Σ over a sequence's units: the sequence log-prob estimate (n,)."""
    return (est.logp * est.units).sum(-1)

