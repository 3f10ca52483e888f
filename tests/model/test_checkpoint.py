"""The real-format loader: a tiny checkpoint written in Fast-dLLM v2's on-disk layout round-trips."""
import json

import pytest
import torch

from arena.model import load_policy
from arena.model.policy import CheckpointError, save_checkpoint
from arena.model.tiny import init_weights

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def qwen2_tokenizer(tmp_path):
    """A byte-level BPE tokenizer in Qwen2's format, with Qwen's special tokens and the mask token."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import Qwen2Tokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["hello world 12+7=19", "the quick brown fox"] * 10, vocab_size=300,
                            min_frequency=1, special_tokens=["<|endoftext|>"])
    tmp_path.mkdir(parents=True, exist_ok=True)
    bpe.save_model(str(tmp_path))
    tokenizer = Qwen2Tokenizer(vocab=str(tmp_path / "vocab.json"), merges=str(tmp_path / "merges.txt"),
                               eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "|<MASK>|"]})
    tokenizer.chat_template = CHATML
    return tokenizer


def test_fast_dllm_layout_round_trips(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = qwen2_tokenizer(tmp_path / "bpe")
    config = Qwen2Config(vocab_size=len(tokenizer) + 10, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, eos_token_id=tokenizer.eos_token_id,
                         tie_word_embeddings=False)
    model = Qwen2ForCausalLM(config)
    init_weights(model, seed=3)
    directory = save_checkpoint(model, tokenizer, tmp_path / "ckpt", block_size=32, max_shard_size="60KB")

    fields = json.loads((directory / "config.json").read_text())
    assert fields["model_type"] == "Fast_dLLM_Qwen" and fields["bd_size"] == 32
    assert fields["auto_map"]["AutoModelForCausalLM"] == "modeling.Fast_dLLM_QwenForCausalLM"
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 2  # sharded
    assert "model.layers.0.self_attn.q_proj.bias" in index["weight_map"]  # plain Qwen2 names

    policy = load_policy(str(directory), device="cpu")
    assert policy.mask_id == tokenizer.convert_tokens_to_ids("|<MASK>|")
    assert policy.eos_id == tokenizer.eos_token_id
    assert (policy.block_size, policy.sub_block) == (32, 8)
    ids = torch.tensor([tokenizer.encode("hello world", add_special_tokens=False)])
    with torch.no_grad():
        assert torch.equal(policy.model(input_ids=ids).logits, model(input_ids=ids).logits)
    assert "<|im_start|>assistant" in policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)


def test_missing_checkpoint_names_what_was_tried(tmp_path):
    with pytest.raises(CheckpointError, match="tiny") as error:
        load_policy(str(tmp_path / "nowhere"))
    assert "nowhere" in str(error.value)


def test_non_fast_dllm_directory_is_rejected(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    with pytest.raises(CheckpointError, match="bd_size"):
        load_policy(str(tmp_path))
