"""The block-diffusion policy: Fast-dLLM v2 weights in transformers' own Qwen2 classes.

Fast-dLLM v2 (arXiv 2509.26328) is stock Qwen2.5 trained with a block-diffusion objective; its
checkpoint tensors carry plain Qwen2 names, so ``Qwen2ForCausalLM`` loads them without
``trust_remote_code``. Everything that makes it a block-diffusion model (masks, positions, token
shift) is in ``arena.model.layout``; this module only loads, saves and runs the network.

Token ids come from the checkpoint: the mask id is the tokenizer's ``|<MASK>|`` token, the stop id
is ``config.eos_token_id``, the block size is ``config.bd_size``.
"""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from arena.model.layout import PackedLayout

MASK_TOKEN = "|<MASK>|"
FAST_DLLM_KEYS = {  # what the real checkpoint's config.json adds on top of Qwen2's
    "architectures": ["Fast_dLLM_QwenForCausalLM"],
    "model_type": "Fast_dLLM_Qwen",
    "auto_map": {
        "AutoConfig": "configuration.Fast_dLLM_QwenConfig",
        "AutoModel": "modeling.Fast_dLLM_QwenModel",
        "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM",
    },
}
DEFAULT_SUB_BLOCK = 8  # Fast-dLLM v2's small_block_size; the real config does not store it


class CheckpointError(ValueError):
    """A checkpoint that cannot be found, read or trusted; the message names what was tried or what is wrong
    (``problems``: each wrong tensor or config field, when there are several)."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]


@dataclass
class Policy:
    model: Any  # Qwen2ForCausalLM, possibly wrapped by peft
    tokenizer: Any
    mask_id: int
    eos_id: int
    pad_id: int
    block_size: int
    sub_block: int
    source: str = ""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def hidden(self, input_ids, position_ids, attention_mask, cache=None) -> torch.Tensor:
        """Last hidden states (after the final norm) for an explicit 4D boolean mask."""
        decoder = self.model.get_decoder()
        kwargs = {_cache_argument(decoder): cache, "use_cache": cache is not None}
        out = decoder(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask, **kwargs)
        return out.last_hidden_state

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.get_output_embeddings()(hidden).float()

    def packed_hidden(self, clean: torch.Tensor, valid: torch.Tensor, noisy: torch.Tensor, layout: PackedLayout):
        """One forward over [clean | noisy_1..K]: clean (b, T), valid (b, T), noisy (b, K, T - noisy_start)."""
        mask = layout.attention_mask(valid)
        return self.hidden(layout.pack(clean, noisy), layout.position_ids(clean.shape[0], clean.device), mask)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)


def _cache_argument(decoder) -> str:
    # transformers 5.x renamed ``past_key_values`` to ``cache`` on the decoder forward.
    return "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"


def qwen2_config(fields: dict):
    """Qwen2Config from a Fast-dLLM v2 config.json (drops its remote-code keys)."""
    from transformers import Qwen2Config

    kept = {k: v for k, v in fields.items() if k not in FAST_DLLM_KEYS and k not in ("transformers_version",)}
    return Qwen2Config(**kept)


def resolve_checkpoint(source: str) -> Path:
    """A local directory, or a hub id fetched (or found in the local hub cache) by huggingface_hub."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    tried = [f"local directory {str(path)!r}: not found"]
    if source.count("/") == 1 and not source.startswith((".", "/", "~")):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(source))
        except Exception as error:  # offline, unknown repo, gated, ...
            tried.append(f"hub id {source!r}: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
    raise CheckpointError(
        f"could not load a Fast-dLLM v2 checkpoint from {source!r}; tried " + "; ".join(tried)
        + ". To provide it: on a machine with network, `hf download HUB_ID --local-dir DIR`, then pass "
        "--model DIR (or point HF_HOME at a hub cache that holds it); --model tiny (or tiny-multiblock) is an embedded "
        "tiny model."
    )


def load_checkpoint(source: str, device: str | None = None, dtype: torch.dtype | None = None) -> Policy:
    """Load a Fast-dLLM v2 checkpoint from a local directory or a hub id (``arena.model.load_policy``
    also knows the embedded models' names)."""
    path = resolve_checkpoint(source)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
    try:
        from transformers import Qwen2ForCausalLM
        from transformers.utils import logging as hf_logging

        fields, tokenizer, (mask_id, eos_id, block_size, sub_block) = read_header(path)
        config = qwen2_config(fields)
        # The real config sets pad = <|im_end|>, which would freeze the stop token's embedding row
        # (nn.Embedding padding_idx gets no gradient); use the tokenizer's own pad token instead.
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
        config.pad_token_id = pad_id if pad_id != eos_id else None
        verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()  # it warns that model_type Fast_dLLM_Qwen is not qwen2: expected
        hf_logging.disable_progress_bar()  # a bar per load would cut through the runs' progress bars
        try:
            # mismatched sizes are reported (below), not raised without their names
            model, loading = Qwen2ForCausalLM.from_pretrained(path, config=config, dtype=dtype,
                                                              attn_implementation="sdpa", output_loading_info=True,
                                                              ignore_mismatched_sizes=True)
        finally:
            hf_logging.set_verbosity(verbosity)
            if bars:
                hf_logging.enable_progress_bar()
        check_tensors(loading, path)
    except CheckpointError:
        raise
    except Exception as error:
        raise unreadable(path, error) from error
    model.to(device).eval()
    return Policy(model=model, tokenizer=tokenizer, mask_id=mask_id, eos_id=eos_id, pad_id=int(pad_id),
                  block_size=block_size, sub_block=sub_block, source=str(path))


def read_header(path: Path):
    """config.json's fields, the tokenizer, and (mask id, stop id, block size, sub-block) checked against each other
    (``checked_fields``), of the checkpoint in ``path``: all of it but the weights."""
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path} holds no config.json: not a Fast-dLLM v2 checkpoint directory (--model tiny "
                              "is the embedded tiny model)")
    fields = json.loads((path / "config.json").read_text())
    if "bd_size" not in fields:
        raise CheckpointError(f"{path / 'config.json'} has no 'bd_size': not a Fast-dLLM v2 checkpoint")
    tokenizer = load_tokenizer(path)
    return fields, tokenizer, checked_fields(fields, tokenizer, path / "config.json")


def check_checkpoint(source: str) -> None:
    """``CheckpointError`` unless ``source`` is a Fast-dLLM v2 checkpoint as far as its config and tokenizer say,
    without reading its weights (``load_checkpoint`` reads and checks them): cheap enough before any run starts."""
    path = resolve_checkpoint(source)
    try:
        read_header(path)
    except CheckpointError:
        raise
    except Exception as error:
        raise unreadable(path, error) from error


def unreadable(path: Path, error: Exception) -> CheckpointError:
    return CheckpointError(f"could not read the checkpoint in {path}: {type(error).__name__}: {error}. "
                           "Use --model tiny for the embedded tiny model.")


def _count(value) -> int | None:
    """``value`` as a positive integer, or None (booleans and fractions are no counts)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def checked_fields(fields: dict, tokenizer, where: Path) -> tuple[int, int, int, int]:
    """(mask id, stop id, block size, sub-block) from config.json's ``fields`` and the tokenizer; a
    ``CheckpointError`` listing every field that is missing or contradicts another."""
    problems = []
    vocab = _count(fields.get("vocab_size"))
    if vocab is None:
        problems.append(f"vocab_size is {fields.get('vocab_size')!r}: expected a positive integer (the embedding rows)")
    mask_id = tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    if mask_id is None or mask_id == tokenizer.unk_token_id:
        problems.append(f"the tokenizer has no {MASK_TOKEN} token (the mask token)")
        mask_id = None
    elif "mask_token_id" in fields and fields["mask_token_id"] != mask_id:
        problems.append(f"mask_token_id is {fields['mask_token_id']!r}, but the tokenizer's {MASK_TOKEN} is {mask_id}")
    eos_id = fields.get("eos_token_id")
    if isinstance(eos_id, list) and eos_id:  # generation configs may list several stop tokens; the first stops
        eos_id = eos_id[0]
    if not isinstance(eos_id, int) or isinstance(eos_id, bool) or eos_id < 0:
        problems.append(f"eos_token_id is {fields.get('eos_token_id')!r}: expected the stop token's id")
        eos_id = None
    if vocab is not None:
        if len(tokenizer) > vocab:
            problems.append(f"the tokenizer has {len(tokenizer)} tokens but vocab_size is {vocab}: token ids from "
                            f"{vocab} on have no embedding row")
        for name, token in ((MASK_TOKEN, mask_id), ("eos_token_id", eos_id)):
            if token is not None and token >= vocab:
                problems.append(f"{name} is id {token}, beyond vocab_size {vocab}")
    block_size = _count(fields.get("bd_size"))
    sub_block = _count(fields.get("small_block_size", DEFAULT_SUB_BLOCK))
    if block_size is None:
        problems.append(f"bd_size is {fields.get('bd_size')!r}: expected the block size, a positive integer")
    if sub_block is None:
        problems.append(f"small_block_size is {fields.get('small_block_size')!r}: expected a positive integer")
    elif block_size is not None and block_size % sub_block:
        problems.append(f"small_block_size {sub_block} does not divide bd_size {block_size} "
                        f"(small_block_size defaults to {DEFAULT_SUB_BLOCK})")
    if problems:
        problems = [f"{where}: {problem}" for problem in problems]
        raise CheckpointError("; ".join(problems), problems)
    return int(mask_id), int(eos_id), block_size, sub_block


def check_tensors(loading: dict, path: Path) -> None:
    """A ``CheckpointError`` naming every tensor that the checkpoint in ``path`` lacks, has in excess, or has in
    another shape than its config.json implies (``from_pretrained``'s loading info): any of them would leave
    weights at their random initialization or silently unused."""
    problems = [f"{path}: tensor {name} is missing (the model would keep it randomly initialized)"
                for name in sorted(loading["missing_keys"])]
    problems += [f"{path}: tensor {name} is unexpected (no parameter of the model has that name)"
                 for name in sorted(loading["unexpected_keys"])]
    for name, stored, expected in sorted(loading["mismatched_keys"]):
        hint = " (vocab_size in config.json)" if "embed_tokens" in name or "lm_head" in name else ""
        problems.append(f"{path}: tensor {name} has shape {list(stored)}, but config.json implies "
                        f"{list(expected)}{hint}")
    problems += [f"{path}: {message}" for message in loading.get("error_msgs", [])]
    if problems:
        raise CheckpointError(f"{len(problems)} problems with the checkpoint in {path}: " + "; ".join(problems),
                              problems)


def load_tokenizer(path: Path):
    """The tokenizer class named in tokenizer_config.json, loaded without AutoConfig.

    AutoTokenizer would read config.json's ``auto_map`` and ask for ``trust_remote_code``.
    """
    import transformers

    name = json.loads((path / "tokenizer_config.json").read_text()).get("tokenizer_class") or "PreTrainedTokenizerFast"
    cls = getattr(transformers, name, None) or transformers.PreTrainedTokenizerFast
    return cls.from_pretrained(path)


def save_checkpoint(model, tokenizer, directory: Path, block_size: int, sub_block: int | None = None,
                    max_shard_size: str = "5GB") -> Path:
    """Write ``model`` and ``tokenizer`` in Fast-dLLM v2's on-disk format (sharded safetensors + index)."""
    directory = Path(directory)
    model.save_pretrained(directory, max_shard_size=max_shard_size)
    tokenizer.save_pretrained(directory)
    fields = json.loads((directory / "config.json").read_text())
    fields.update(FAST_DLLM_KEYS, bd_size=block_size)
    if sub_block is not None:
        fields["small_block_size"] = sub_block
    (directory / "config.json").write_text(json.dumps(fields, indent=2, sort_keys=True))
    return directory
