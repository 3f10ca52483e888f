"""The sub-block cache against an independent single-row decoder that has no key/value cache at all.

The oracle recomputes the stale keys/values by hand: a cached step of sub-block s is one forward over
[clean prefix | the block as it was at the last refresh | the current sub-block], where the sub-block's
queries see the prefix, the refresh-time block outside sub-block s, and themselves. Every key/value the
cached path reuses is recomputed there from the same inputs, so the two must decode the same tokens.
fp32 weights, one thread (pinned by the fixture below).
"""
import dataclasses
import math

import pytest
import torch

from arena.model import load_policy
from arena.model.sampler import SamplerConfig, draw, generate
from arena.rng import torch_generator
from conftest import StopShifted
from arena.config import StudyError
from arena.study import validate
from methods.likelihood import ScoringBatch, estimate

PROMPTS = [[5, 6, 7], [9, 10, 11, 12], [13] * 8, [20, 21, 22, 23, 24], [30], [40, 41, 42, 43, 44, 45, 46],
           [50 + i for i in range(19)]]  # every alignment case against blocks of 4, 8 and 16, and a long prefix


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def policies(tiny_policy):
    # tiny: blocks of 8, sub-blocks of 4; tiny-multiblock: blocks of 16, sub-blocks of 8 (Fast-dLLM v2's in-block
    # geometry); the multiblock model as trained, with its stop token, and both without it (every block decoded)
    multi = load_policy("tiny-multiblock")
    return {"tiny": StopShifted(tiny_policy, -math.inf), "multi": multi, "multi-nostop": StopShifted(multi, -math.inf)}


def hidden_of(policy, ids: list[int], positions: list[int], allowed: torch.Tensor) -> torch.Tensor:
    """Last hidden states (len(ids), d) of one row under an explicit (Q, K) boolean mask, no cache."""
    mask = allowed[None, None]
    return policy.hidden(torch.tensor([ids]), torch.tensor([positions]), mask)[0]


def block_causal(positions: list[int], B: int) -> torch.Tensor:
    blocks = torch.tensor(positions) // B
    return blocks[:, None] >= blocks[None, :]


class Oracle:
    """One row decoded with the sub-block cache's semantics, every forward recomputed from token ids."""

    def __init__(self, policy, prompt: list[int], config: SamplerConfig, seed: int, row: int):
        self.policy, self.config, self.B = policy, config, policy.block_size
        self.S = config.sub_block or policy.sub_block
        self.generator = torch_generator(seed, row)
        self.temperature = torch.tensor([config.temperature])
        self.prompt, self.denoise_tokens = prompt, 0  # positions forwarded by the denoising steps
        self.decoded = {}  # absolute position -> (token, probability)

    def uniforms(self, shape):
        return torch.rand(shape, generator=self.generator, dtype=torch.float64)

    def logits(self, ids, positions, allowed, queries: int) -> torch.Tensor:
        return self.policy.logits(hidden_of(self.policy, ids, positions, allowed)[-queries:])

    def ar_token(self, clean: list[int]) -> int:
        logits = self.logits(clean, list(range(len(clean))), block_causal(list(range(len(clean))), self.B), self.B)
        token, prob = draw(logits[-1:], self.temperature, self.config.top_p, self.uniforms(()).float()[None])
        self.decoded[len(clean)] = (int(token), float(prob))
        return int(token)

    def step_logits(self, clean, block, pending, kept, sub_start) -> tuple[list, list[int]]:
        """Logit for each in-block position (from the position before it) at one step; the new kept block."""
        L, B, S = len(clean), self.B, self.S
        if kept is None or pending[sub_start]:  # refresh: the whole block, kept from here
            positions = list(range(L + B))
            logits = self.logits(clean + block, positions, block_causal(positions, B), B)
            self.denoise_tokens += B
            return [None] + list(logits[:-1]), list(block)
        # the refresh-time block at its positions, then the current sub-block again at its own positions
        positions = list(range(L + B)) + list(range(L + sub_start, L + sub_start + S))
        allowed = torch.zeros(L + B + S, L + B + S, dtype=torch.bool)
        allowed[: L + B, : L + B] = block_causal(positions[: L + B], B)
        allowed[L + B :, : L + B] = True
        allowed[L + B :, L + sub_start : L + sub_start + S] = False  # stale copies of the sub-block: not seen
        allowed[L + B :, L + B :] = True
        logits = self.logits(clean + kept + block[sub_start : sub_start + S], positions, allowed, S)
        self.denoise_tokens += S
        out = [None] * B
        for i in range(1, S):
            out[sub_start + i] = logits[i - 1]
        return out, kept

    def denoise(self, clean: list[int], block: list[int], given: int) -> list[int]:
        """Decode the block's positions from ``given`` on (those before are prompt tail or the AR token)."""
        B, S, kept = self.B, self.S, None
        pending = [j >= given for j in range(B)]
        while any(pending):
            sub_start = pending.index(True) // S * S
            logits, kept = self.step_logits(clean, block, pending, kept, sub_start)
            candidates = [j for j in range(sub_start, sub_start + S) if pending[j]]
            u = self.uniforms((2, B))
            tokens, probs = draw(torch.stack([logits[j] for j in candidates]), self.temperature.expand(len(candidates)),
                                 self.config.top_p, u[0, : len(candidates)].float())
            score = u[1, : len(candidates)] if self.config.order == "random" else probs
            best = int(score.argmax())
            for k, j in enumerate(candidates):
                if k == best or (self.config.order == "confidence" and score[k] > self.config.threshold):
                    block[j], pending[j] = int(tokens[k]), False
                    self.decoded[len(clean) + j] = (int(tokens[k]), float(probs[k]))
        return block

    @torch.no_grad()
    def run(self) -> tuple[list[int], list[float]]:
        B, prompt, mask = self.B, self.prompt, self.policy.mask_id
        clean = prompt[: len(prompt) // B * B]
        block = prompt[len(clean) :] + [mask] * (B - len(prompt) + len(clean))
        if len(block) == B and block[0] == mask:
            block[0] = self.ar_token(clean)
        end = math.ceil((len(prompt) + self.config.max_new_tokens) / B) * B
        while True:
            clean = clean + self.denoise(clean, block, given=max(1, len(prompt) - len(clean)))
            completion = [self.decoded[p][0] for p in range(len(prompt), len(clean))]
            if self.policy.eos_id in completion or len(clean) >= end:
                return completion, [self.decoded[p][1] for p in range(len(prompt), len(clean))]
            block = [mask] * B
            block[0] = self.ar_token(clean)


CASES = [  # (model, temperature, threshold, order, sub_block)
    ("tiny", 0.0, 1.0, "confidence", None), ("tiny", 1.0, 1.0, "confidence", 2), ("tiny", 0.8, 0.3, "confidence", 2),
    ("multi", 1.0, 1.0, "confidence", None), ("multi-nostop", 0.0, 1.0, "confidence", None),
    ("multi-nostop", 1.0, 1.0, "confidence", 4), ("multi-nostop", 0.9, 0.2, "confidence", 4),
    ("multi-nostop", 1.0, 1.0, "random", None),
]


@pytest.mark.parametrize("model,temperature,threshold,order,sub_block", CASES)
def test_batch_decodes_as_the_cache_free_oracle(policies, model, temperature, threshold, order, sub_block):
    policy = policies[model]
    config = SamplerConfig(max_new_tokens=20, temperature=temperature, threshold=threshold, order=order,
                           sub_block=sub_block, sub_block_cache=True)
    batch = generate(policy, PROMPTS, config, seed=7)
    for row, prompt in enumerate(PROMPTS):
        tokens, probs = Oracle(policy, prompt, config, seed=7, row=row).run()
        assert batch.tokens[row] == tokens, (row, prompt)
        assert batch.probs[row] == pytest.approx(probs, rel=1e-4, abs=1e-7), (row, prompt)


@pytest.mark.parametrize("model,sub_block", [("tiny", 2), ("multi-nostop", 4), ("multi-nostop", None)])
def test_single_rows_forward_the_positions_the_oracle_counts(policies, model, sub_block):
    """Which steps refresh (B positions) and which forward the sub-block (S), as the oracle's rule decides."""
    policy = policies[model]
    B = policy.block_size
    config = SamplerConfig(max_new_tokens=24, temperature=1.0, sub_block=sub_block, sub_block_cache=True)
    for row, prompt in enumerate(PROMPTS):
        alone = generate(policy, [prompt], config, seed=3, row_ids=[row])
        oracle = Oracle(policy, prompt, config, seed=3, row=row)
        assert alone.tokens[0] == oracle.run()[0]
        prefix = len(prompt) // B * B  # one forward of the prompt's whole blocks
        commits = (len(prompt) + len(alone.tokens[0])) // B - len(prompt) // B - 1  # the last block is not committed
        assert alone.forward_tokens == prefix + oracle.denoise_tokens + B * commits, (row, prompt)


def test_one_sub_block_per_block_is_the_uncached_sampler(policies):
    """With S = B nothing is stale (the step forwards every position again): the cache changes no token."""
    policy = policies["multi-nostop"]
    config = SamplerConfig(max_new_tokens=30, temperature=1.0, sub_block=policy.block_size)
    plain = generate(policy, PROMPTS, config, seed=2)
    cached = generate(policy, PROMPTS, dataclasses.replace(config, sub_block_cache=True), seed=2)
    assert cached.tokens == plain.tokens
    assert sum(cached.probs, []) == pytest.approx(sum(plain.probs, []), rel=1e-4)


def test_off_never_touches_the_block_cache(tiny_policy, monkeypatch):
    import arena.model.sampler as sampler

    def refuse(*args, **kwargs):
        raise AssertionError("the block cache was used with sub_block_cache off")

    monkeypatch.setattr(sampler, "BlockCacheView", refuse)
    monkeypatch.setattr(sampler, "BlockCache", refuse)
    generate(tiny_policy, PROMPTS, SamplerConfig(max_new_tokens=12, temperature=1.0), seed=0)


def test_the_cache_needs_the_prefix_cache():
    with pytest.raises(ValueError, match="use_cache"):
        SamplerConfig(sub_block_cache=True, use_cache=False)


def test_a_study_refuses_the_trajectory_estimator_on_cached_rollouts():
    arm = {"method": "block_grpo", "options": {"estimator": "trajectory", "sub_block_cache": True}}
    with pytest.raises(StudyError, match=r"arms\.cached\.options\.sub_block_cache: the trajectory estimator"):
        validate({"arms": {"cached": arm}}, "s.yaml")
    arm["options"]["estimator"] = "elbo"  # an estimator that does not replay the steps takes them
    assert validate({"arms": {"cached": arm}}, "s.yaml").arms["cached"].method == "block_grpo"


def test_the_option_is_in_a_runs_identity_only_when_on():
    runs = {str(value): validate({"arms": {"g": {"method": "grpo", "options": value}}}, "s.yaml").runs()[0].config_hash
            for value in ({}, {"sub_block_cache": False}, {"sub_block_cache": True})}
    assert len(set(runs.values())) == 2  # off, written or not, keeps the hash runs had before the option


def test_cached_rollouts_are_not_what_the_trajectory_estimator_scores(policies):
    """Why the study refuses the pair: on cached rollouts the replayed terms leave the sampler's probabilities."""
    policy = policies["multi-nostop"]
    config = SamplerConfig(max_new_tokens=30, temperature=1.0, sub_block_cache=True)
    out = generate(policy, PROMPTS, config, seed=1)
    batch = ScoringBatch.build(PROMPTS, out.tokens, policy.pad_id, policy.block_size, 1.0, steps=out.steps)
    with torch.no_grad():
        est = estimate("trajectory", policy, batch, (0, 0, 0))
    gaps = [float((est.token_logp[row, len(p) : len(p) + len(probs)].double()
                   - torch.tensor(probs, dtype=torch.float64).log()).abs().max())
            for row, (p, probs) in enumerate(zip(PROMPTS, out.probs))]
    assert max(gaps) > 1e-2
