"""The in-block dependence measure (``OracleSubBlock.dependence``: exact log-probability minus the sum of
single-position masked marginals) on toy models whose joint is written down by hand, so the answer is known:
a perfectly correlated two-token sub-block gives log 2 nats, a 0.4 / 0.6 swap gives -log 0.4 or -log 0.6, a
product distribution gives 0, and sub-blocks are measured each on its own."""
import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from methods.oracle import completion_blocks

MASK, A, B, PROMPT = 0, 1, 2, 3
VOCAB = 4


class JointModel(torch.nn.Module):
    """A 'model' that knows a joint distribution over each sub-block's tokens and predicts, at position j - 1,
    p(token j | the sub-block's visible tokens), computed by summing the joint over the consistent strings.

    Sub-blocks are independent of each other, so the later sub-blocks being masked changes nothing."""

    def __init__(self, joints: dict[int, dict[tuple, float]], width: int):
        super().__init__()
        self.joints, self.width = joints, width  # first position of each sub-block -> {tokens: probability}

    def forward(self, input_ids, position_ids=None, attention_mask=None):
        n, length = input_ids.shape
        logits = torch.full((n, length, VOCAB), -1e9)
        for row in range(n):
            for start, joint in self.joints.items():
                seen = input_ids[row, start : start + self.width].tolist()
                consistent = {y: p for y, p in joint.items() if all(s in (MASK, t) for s, t in zip(seen, y))}
                for i in range(self.width):
                    if start + i >= length:
                        continue
                    total = sum(consistent.values())
                    for token in (A, B):
                        mass = sum(p for y, p in consistent.items() if y[i] == token)
                        logits[row, start + i - 1, token] = math.log(mass / total) if mass else -1e9
        return SimpleNamespace(logits=logits)


def toy_policy(joints, width: int, block_size: int = 8):
    return SimpleNamespace(model=JointModel(joints, width), block_size=block_size, sub_block=width, mask_id=MASK,
                           device=torch.device("cpu"))


def dependences(policy, prompt, completion):
    return [part.dependence for block in completion_blocks(policy, prompt, completion) for part in block.parts]


@pytest.mark.parametrize("completion", [[A, A], [B, B]])
def test_a_perfectly_correlated_pair_is_log_2_nats(completion):
    policy = toy_policy({6: {(A, A): 0.5, (B, B): 0.5}}, width=2)
    (part,) = [p for block in completion_blocks(policy, [PROMPT] * 6, completion) for p in block.parts]
    assert part.exact == pytest.approx(math.log(0.5), abs=1e-6)
    assert part.marginal == pytest.approx(2 * math.log(0.5), abs=1e-6)
    assert part.dependence == pytest.approx(math.log(2), abs=1e-6)


def test_a_swap_with_odds_04_06_gives_minus_log_of_the_written_orientation():
    """The in-block teacher's two modes, right "ab" 0.4 and swapped "ba" 0.6: each digit's marginal is the
    written orientation's probability, so the joint gains -log p(orientation) over the marginals' product."""
    policy = toy_policy({6: {(A, B): 0.4, (B, A): 0.6}}, width=2)
    assert dependences(policy, [PROMPT] * 6, [A, B]) == [pytest.approx(-math.log(0.4), abs=1e-6)]
    assert dependences(policy, [PROMPT] * 6, [B, A]) == [pytest.approx(-math.log(0.6), abs=1e-6)]


def test_a_product_distribution_has_no_dependence():
    joint = {(a, b): pa * pb for (a, pa), (b, pb) in itertools.product([(A, 0.3), (B, 0.7)], [(A, 0.6), (B, 0.4)])}
    policy = toy_policy({6: joint}, width=2)
    for completion in joint:
        assert dependences(policy, [PROMPT] * 6, list(completion)) == [pytest.approx(0.0, abs=1e-6)]


def test_three_perfectly_correlated_tokens_are_2_log_2_and_sub_blocks_are_measured_apart():
    """Two sub-blocks of 4 in one block of 8, after a prompt of 1 token: the first holds 3 denoised positions
    (all equal: 2 log 2), the second 4 independent fair tokens (0)."""
    independent = {y: 1 / 16 for y in itertools.product((A, B), repeat=4)}
    policy = toy_policy({0: {(PROMPT, A, A, A): 0.5, (PROMPT, B, B, B): 0.5}, 4: independent}, width=4)
    values = dependences(policy, [PROMPT], [B, B, B, A, B, B, A])
    assert values == [pytest.approx(2 * math.log(2), abs=1e-6), pytest.approx(0.0, abs=1e-6)]
