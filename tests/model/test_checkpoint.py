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


def small_checkpoint(root, seed: int):
    """A 2-layer Qwen2 with a BPE tokenizer, saved by save_checkpoint in the real format (sharded safetensors):
    (its directory, the model, the tokenizer)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = qwen2_tokenizer(root / "bpe")
    config = Qwen2Config(vocab_size=len(tokenizer) + 10, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, eos_token_id=tokenizer.eos_token_id,
                         tie_word_embeddings=False)
    model = Qwen2ForCausalLM(config)
    init_weights(model, seed=seed)
    return save_checkpoint(model, tokenizer, root / "ckpt", block_size=32, max_shard_size="60KB"), model, tokenizer


def test_fast_dllm_layout_round_trips(tmp_path):
    directory, model, tokenizer = small_checkpoint(tmp_path, seed=3)

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


# ---------------------------------------------------------------------------------------------
# a wrong checkpoint never loads silently: every wrong tensor and config field is named


@pytest.fixture(scope="module")
def sound(tmp_path_factory):
    """A small checkpoint in the real on-disk format (sharded safetensors with an index), loadable as is."""
    return small_checkpoint(tmp_path_factory.mktemp("sound"), seed=5)[0]


def edited(sound, tmp_path, edit) -> str:
    """A copy of ``sound`` whose shard holding q_proj.bias of layer 0 went through ``edit(tensors)``, its index
    rewritten to match (a self-consistent checkpoint, as a broken conversion script writes it)."""
    import shutil

    from safetensors.torch import load_file, save_file

    directory = tmp_path / "edited"
    shutil.copytree(sound, directory)
    index_path = directory / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard = index["weight_map"]["model.layers.0.self_attn.q_proj.bias"]
    tensors = load_file(directory / shard)
    edit(tensors)
    save_file(tensors, directory / shard, metadata={"format": "pt"})
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != shard} | dict.fromkeys(tensors, shard)
    index_path.write_text(json.dumps(index))
    return str(directory)


BIAS = "model.layers.0.self_attn.q_proj.bias"


def test_a_sound_checkpoint_loads_strictly(sound):
    assert load_policy(str(sound), device="cpu").block_size == 32


def test_a_removed_tensor_stops_the_load_and_is_named(sound, tmp_path):
    with pytest.raises(CheckpointError) as error:
        load_policy(edited(sound, tmp_path, lambda tensors: tensors.pop(BIAS)), device="cpu")
    assert error.value.problems == [f"{tmp_path / 'edited'}: tensor {BIAS} is missing (the model would keep it "
                                    "randomly initialized)"]


def test_a_renamed_tensor_is_named_twice_missing_and_unexpected(sound, tmp_path):
    renamed = "model.layers.0.self_attn.q_proj.b"
    with pytest.raises(CheckpointError) as error:
        load_policy(edited(sound, tmp_path, lambda tensors: tensors.update({renamed: tensors.pop(BIAS)})),
                    device="cpu")
    assert len(error.value.problems) == 2
    assert f"tensor {BIAS} is missing" in error.value.problems[0]
    assert f"tensor {renamed} is unexpected" in error.value.problems[1]


def test_a_tensor_of_the_wrong_shape_is_named_with_both_shapes(sound, tmp_path):
    with pytest.raises(CheckpointError) as error:
        load_policy(edited(sound, tmp_path, lambda tensors: tensors.update({BIAS: torch.zeros(31)})), device="cpu")
    assert error.value.problems == [f"{tmp_path / 'edited'}: tensor {BIAS} has shape [31], but config.json implies "
                                    "[32]"]


def rewritten(sound, tmp_path, change) -> str:
    import shutil

    directory = tmp_path / "rewritten"
    shutil.copytree(sound, directory)
    fields = json.loads((directory / "config.json").read_text())
    change(fields)
    (directory / "config.json").write_text(json.dumps(fields))
    return str(directory)


@pytest.mark.parametrize("change, named", [
    (lambda f: f.update(vocab_size=200), ["tokens but vocab_size is 200", "|<MASK>| is id", "beyond vocab_size 200"]),
    (lambda f: f.pop("vocab_size"), ["vocab_size is None"]),
    (lambda f: f.update(mask_token_id=3), ["mask_token_id is 3, but the tokenizer's |<MASK>| is"]),
    (lambda f: f.pop("eos_token_id"), ["eos_token_id is None"]),
    (lambda f: f.update(bd_size=0), ["bd_size is 0"]),
    (lambda f: f.update(small_block_size=5), ["small_block_size 5 does not divide bd_size 32"]),
])
def test_a_missing_or_contradictory_config_field_stops_the_load(sound, tmp_path, change, named):
    with pytest.raises(CheckpointError) as error:
        load_policy(rewritten(sound, tmp_path, change), device="cpu")
    message = str(error.value)
    assert all(part in message for part in named), message
    assert "config.json" in message


def test_embedding_rows_that_contradict_vocab_size_are_named(sound, tmp_path):
    vocab = json.loads((sound / "config.json").read_text())["vocab_size"]
    with pytest.raises(CheckpointError) as error:
        load_policy(rewritten(sound, tmp_path, lambda f: f.update(vocab_size=vocab + 4)), device="cpu")
    named = sorted(p.split(": tensor ")[1].split(" ")[0] for p in error.value.problems)
    assert named == ["lm_head.weight", "model.embed_tokens.weight"]
    assert all(f"config.json implies [{vocab + 4}, 32] (vocab_size in config.json)" in p for p in error.value.problems)
