"""Packed [clean | noisy] scoring against scoring every block in its own forward pass (property 2 of docs/design.md)."""
import pytest
import torch

from arena.model.layout import PackedLayout, step_ranks, step_views, sub_block_stream, sub_block_views
from arena.rng import torch_generator
from methods.oracle import next_token_logprobs

B = 4


def packed_logprobs(policy, ids, valid, noisy, layout, stream_of_row=1):
    """log p of every token from the packed forward, via the layout's token-shift bookkeeping."""
    hidden = policy.packed_hidden(ids, valid, noisy, layout)
    logp = torch.log_softmax(policy.logits(hidden), -1)
    positions = torch.arange(max(1, layout.noisy_start), layout.length)
    index = layout.predictor_index(positions, stream_of_row)
    return positions, logp[:, index].gather(-1, ids[:, positions, None]).squeeze(-1)


def per_block_logprob(policy, row_ids, row_noisy, j):
    """Oracle: the token at j scored in a forward of its own (clean prefix + its block)."""
    k = j // B
    if j % B == 0:  # AR first token: the clean sequence up to the end of block k-1
        return float(next_token_logprobs(policy, row_ids[None, :j])[0, j - 1, row_ids[j]])
    sequence = torch.cat([row_ids[: k * B], row_noisy[k * B : (k + 1) * B]])
    return float(next_token_logprobs(policy, sequence[None])[0, j - 1, row_ids[j]])


@pytest.mark.parametrize("prompt_len", [1, 2, 3, 4, 5, 7, 8, 9, 12])
def test_packed_equals_per_block(tiny_policy, prompt_len):
    policy, T = tiny_policy, 16
    generator = torch_generator(prompt_len, 1)
    ids = torch.randint(4, 90, (1, T), generator=generator)
    positions = torch.arange(T)
    maskable = (positions >= prompt_len) & (positions % B != 0)
    mask = maskable & (torch.rand(T, generator=generator) < 0.6)
    noisy_full = torch.where(mask, policy.mask_id, ids[0])
    start = (prompt_len // B) * B
    layout = PackedLayout(T, B, n_noisy=1, noisy_start=start)
    got_positions, got = packed_logprobs(policy, ids, torch.ones_like(ids, dtype=torch.bool), noisy_full[None, None, start:], layout)
    for position, value in zip(got_positions.tolist(), got[0].tolist()):
        if position < prompt_len:
            continue
        expected = per_block_logprob(policy, ids[0], noisy_full, position)
        assert value == pytest.approx(expected, abs=1e-5), f"position {position}"


def test_packed_batch_with_padding_and_several_streams(tiny_policy):
    """Rows of different lengths (right padding) and K=3 noisy streams sharing one clean stream."""
    policy, T, K = tiny_policy, 16, 3
    generator = torch_generator(5, 2)
    lengths = [16, 11, 6]
    ids = torch.randint(4, 90, (3, T), generator=generator)
    valid = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
    ids = torch.where(valid, ids, policy.pad_id)
    masks = (torch.rand(3, K, T, generator=generator) < 0.5) & (torch.arange(T) % B != 0) & (torch.arange(T) >= 4)
    noisy = torch.where(masks, policy.mask_id, ids[:, None])
    layout = PackedLayout(T, B, n_noisy=K, noisy_start=4)
    for stream in range(1, K + 1):
        positions, got = packed_logprobs(policy, ids, valid, noisy[:, :, 4:], layout, stream)
        for row, length in enumerate(lengths):
            for position, value in zip(positions.tolist(), got[row].tolist()):
                if position >= length:
                    continue
                expected = per_block_logprob(policy, ids[row, :length], noisy[row, stream - 1, :length], position)
                assert value == pytest.approx(expected, abs=1e-5), (row, stream, position)


def test_layout_rejects_unaligned_noisy_start():
    with pytest.raises(ValueError, match="block aligned"):
        PackedLayout(16, 4, noisy_start=3)


def test_sub_block_views_show_what_the_sampler_saw():
    """Blocks of 8, sub-blocks of 4: the view of sub-block s takes the mask inside sub-block s, leaves the earlier
    sub-blocks clean and masks every maskable position of the later ones; each position is scored in its own view."""
    T = 16
    maskable = (torch.arange(T) % 8 != 0)[None, None]
    masks = torch.zeros(1, 1, T, dtype=torch.bool)
    masks[0, 0, [1, 5, 6, 9, 14]] = True
    views = sub_block_views(masks, maskable, 8, 4)
    assert views.shape == (1, 2, T)
    assert views[0, 0].nonzero().flatten().tolist() == [1, 4, 5, 6, 7, 9, 12, 13, 14, 15]
    assert views[0, 1].nonzero().flatten().tolist() == [5, 6, 14]
    positions = torch.tensor([1, 5, 6, 9, 14])
    assert sub_block_stream(torch.zeros(5, dtype=torch.long), positions, 8, 4).tolist() == [0, 1, 1, 0, 1]
    assert sub_block_stream(torch.ones(5, dtype=torch.long), positions, 8, 4).tolist() == [2, 3, 3, 2, 3]
    assert torch.equal(sub_block_views(masks, maskable, 8, 8), masks)  # sub-block = block: the mask itself


def test_step_ranks_and_views():
    """Ranks of decoding steps inside each block (tokens of one step share a rank); view v masks ranks >= v."""
    steps = torch.tensor([[-1, 7, 5, 7, 9, 12, 11, 10]])
    maskable = torch.tensor([[False, True, True, True, False, True, True, True]])
    ranks = step_ranks(steps, maskable, 4)
    assert ranks.tolist() == [[-1, 1, 0, 1, -1, 2, 1, 0]]
    views = step_views(ranks, 3)
    assert [v.nonzero().flatten().tolist() for v in views[0]] == [[1, 2, 3, 5, 6, 7], [1, 3, 5, 6], [5]]
