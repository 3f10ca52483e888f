"""The rehearsal's inputs: a Fast-dLLM v2-format checkpoint at a real width and reduced depth, a byte-level BPE
in Qwen2's format with the real special-token ids and chat template, and a GSM8K-format data file."""
from __future__ import annotations

import json
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
            "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
            "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]  # 151643..151664
BPE_TOKENS = 151_643  # ordinary tokens before the specials, as in Qwen2's tokenizer
# Qwen2.5's chat template without its tool branch: a default system turn, then ChatML turns
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if not (message['role'] == 'system' and "
    "loop.first) %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def write_data(path: Path, n: int = 32) -> Path:
    """GSM8K's format (question; answer ending '#### N'), ``n`` items."""
    rows = [{"question": f"Natalia sold clips to {a} of her friends in April, and then she sold {b} times as many "
                         f"clips in May. How many clips did Natalia sell altogether in April and May?",
             "answer": f"In May she sold {a} * {b} = {a * b} clips.\nAltogether {a} + {a * b} = {a + a * b}.\n"
                       f"#### {a + a * b}"} for a, b in ((i % 9 + 2, i % 4 + 2) for i in range(n))]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def build_tokenizer(directory: Path, texts: list[str], vocab: int = BPE_TOKENS):
    """A byte-level BPE in Qwen2's format: merges learnt on ``texts``, the vocabulary filled to ``vocab`` ordinary
    tokens with tokens no merge produces, then Qwen2's 22 special tokens and the mask token at their real ids."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import Qwen2Tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=min(vocab, 1000), min_frequency=2, show_progress=False)
    bpe.save_model(str(directory))
    ranks = json.loads((directory / "vocab.json").read_text())
    ranks.update({f"Ġunused{i}": i for i in range(len(ranks), vocab)})
    (directory / "vocab.json").write_text(json.dumps(ranks))
    tokenizer = Qwen2Tokenizer(vocab=str(directory / "vocab.json"), merges=str(directory / "merges.txt"),
                               unk_token=None, bos_token=None, eos_token=None, pad_token=None)
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIALS + ["|<MASK>|"]})  # in id order
    tokenizer.eos_token, tokenizer.pad_token = "<|im_end|>", "<|endoftext|>"  # named after: no new ids
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_checkpoint(directory: Path, fields: dict, layers: int, tokenizer, seed: int = 0) -> Path:
    """A random Qwen2 with ``fields``' widths and ``layers`` layers, saved as Fast-dLLM v2 saves it (bf16)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from arena.model.policy import save_checkpoint
    from arena.model.tiny import init_weights

    config = Qwen2Config(**fields, num_hidden_layers=layers, max_position_embeddings=32768, rope_theta=1e6,
                         rms_norm_eps=1e-6, bos_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id,
                         torch_dtype="bfloat16")
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    model = model.to(torch.bfloat16).to_empty(device="cuda" if torch.cuda.is_available() else "cpu")
    if model.config.tie_word_embeddings:
        model.tie_weights()
    init_weights(model, seed)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per shard would cut through the table
    save_checkpoint(model, tokenizer, directory, block_size=32, sub_block=8)
    return directory
