"""The embedded tiny model: Fast-dLLM v2's architecture at toy scale, trained here on CPU.

Same network (transformers' Qwen2: QKV bias, SwiGLU, RMSNorm, RoPE), same conventions (block
alignment, token shift, mask token ``|<MASK>|``, stop token ``<|im_end|>``), same on-disk format
(``arena.model.policy.save_checkpoint``), so every code path that serves the real checkpoint serves it.
Its tokenizer is character level: printable ASCII plus newline and the special tokens.

Pretraining follows the Fast-dLLM v2 objective (arXiv 2509.26328 §3): per-block masking rate
t ~ U(eps, 1), complementary masks (two noisy views that together cover every masked-able token
once), token shift, the packed [clean | noisy] layout. One deliberate difference, so that training
matches arena's sampler and scorer: the first token of every completion block is trained as an AR
token from the clean stream (the sampler decodes it from the completed previous block), not
masked in the noisy view. Completions are padded with the stop token to the block end, so the
model learns to fill a finished block with stop tokens.

The task is ``rewards.noisy_arithmetic``: addition (answer least-significant digit first) on 1-3
digit operands, learned from a teacher that is right with probability 0.8 / 0.5 / 0.3 per level, so
that the model holds the right answer at a rate RL can raise (the testbed; docs/testbed.md).

A second recipe, ``tiny-multiblock``, trains the same network at Fast-dLLM v2's in-block geometry
(blocks of 16, sub-blocks of 8) on ``rewards.multi_sum``: eleven one-digit sums per prompt whose
completion spans three blocks, from a teacher whose mode is the dropped carry (docs/testbed.md). A third,
``tiny-inblock``, trains it at blocks of 32 with sub-blocks of 8 on ``rewards.swap_sums``, whose teacher
writes each part right or with its two digits swapped: tokens inside a sub-block strongly dependent
(``tiny_inblock_checkpoint/``; docs/testbed.md).

One checkpoint per recipe for everyone: the pretrained models ship inside the package
(``tiny_checkpoint/``, ``tiny_multiblock_checkpoint/``, ``tiny_inblock_checkpoint/``, each with its config
digest and held-out accuracy in ``pretrain.json``), so every machine starts from the same bytes. ``arena pretrain``
rebuilds one single-threaded (keyed init and draws, one thread: as reproducible as the CPU allows)
and compares the rebuild with the shipped accuracy.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from arena.model.layout import PackedLayout
from arena.model.policy import MASK_TOKEN, CheckpointError, Policy, save_checkpoint
from arena.model.sampler import SamplerConfig, generate
from arena.progress import Progress
from arena.rng import PretrainKey, numpy_generator, torch_generator

SPECIALS = ["<|endoftext|>", "<|im_end|>", MASK_TOKEN, "<unk>"]
CHARS = [chr(i) for i in range(32, 127)] + ["\n"]
FORMAT_VERSION = 2  # bump when the training recipe changes (2: the noisy teacher)


@dataclass(frozen=True)
class TinyConfig:
    layers: int = 4
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 384
    block_size: int = 8
    sub_block: int = 4
    steps: int = 2000
    batch: int = 64
    lr: float = 3e-3
    warmup: int = 50
    seed: int = 0
    task: str = "noisy_arithmetic"
    level_weights: tuple[float, ...] = (2.0, 2.0, 1.0)  # per task level: the RL levels 1-2 weigh most

    def digest(self) -> str:
        payload = json.dumps({**asdict(self), "format": FORMAT_VERSION}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


# the embedded models by name: (recipe, the directory its checkpoint ships in)
MODELS = {
    "tiny": (TinyConfig(), Path(__file__).parent / "tiny_checkpoint"),
    # Fast-dLLM v2's in-block geometry; 48 examples a step keep a step's tokens near the first recipe's
    "tiny-multiblock": (TinyConfig(block_size=16, sub_block=8, batch=48, task="multi_sum", level_weights=(1.0,)),
                        Path(__file__).parent / "tiny_multiblock_checkpoint"),
    # blocks of 32, sub-blocks of 8 (Fast-dLLM v2's); every sequence fits two blocks (64 tokens), as above
    "tiny-inblock": (TinyConfig(block_size=32, sub_block=8, batch=48, task="swap_sums", level_weights=(1.0, 1.0, 1.0)),
                     Path(__file__).parent / "tiny_inblock_checkpoint"),
}


def embedded(name: str) -> tuple[TinyConfig, Path]:
    """The recipe and shipped directory of an embedded model; CheckpointError naming the known ones."""
    if name not in MODELS:
        raise CheckpointError(f"unknown embedded model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name]


def build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS + CHARS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<unk>",
        additional_special_tokens=[MASK_TOKEN],
    )


def init_weights(model, seed: int) -> None:
    """Keyed initialisation (no global RNG): normal(0, 0.02) matrices, zero biases, unit norms.

    The generator lives on the model's device (a 7B-shaped model is built on the GPU; on the CPU the
    stream is the one the shipped checkpoint was trained from)."""
    generator = torch_generator(seed, PretrainKey.INIT, device=next(model.parameters()).device)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("bias"):
                param.zero_()
            elif "norm" in name:
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02, generator=generator)


def build_policy(config: TinyConfig = TinyConfig(), vocab: int | None = None) -> Policy:
    """A randomly initialised tiny policy (tests use it directly; ``pretrain`` trains it)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    qwen = Qwen2Config(
        vocab_size=vocab or len(tokenizer), hidden_size=config.hidden, intermediate_size=config.intermediate,
        num_hidden_layers=config.layers, num_attention_heads=config.heads, num_key_value_heads=config.kv_heads,
        max_position_embeddings=4096, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.pad_token_id, pad_token_id=tokenizer.pad_token_id,
        attn_implementation="sdpa",
    )
    model = Qwen2ForCausalLM(qwen).eval()
    init_weights(model, config.seed)
    return Policy(
        model=model, tokenizer=tokenizer, mask_id=tokenizer.convert_tokens_to_ids(MASK_TOKEN),
        eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, block_size=config.block_size,
        sub_block=config.sub_block, source="tiny (random init)",
    )


def cache_root() -> Path:
    return Path(os.environ.get("ARENA_CACHE", Path.home() / ".cache" / "arena"))


def shipped_report(name: str = "tiny") -> dict:
    """An embedded model's pretraining record: config, digest, held-out accuracy per level."""
    shipped = embedded(name)[1]
    try:
        return json.loads((shipped / "pretrain.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"the shipped {name} checkpoint is missing from {shipped}; reinstall arena, or "
                              f"rebuild it with `arena pretrain --model {name} --out {shipped}`") from None


def shipped_checkpoint(name: str = "tiny") -> Path:
    """The directory of an embedded model's shipped checkpoint, checked against its current recipe."""
    config, shipped = embedded(name)
    digest = shipped_report(name).get("digest")
    if digest != config.digest():
        raise CheckpointError(f"the shipped {name} checkpoint in {shipped} was built from config {digest}, but "
                              f"its recipe is now {config.digest()}; rebuild it with "
                              f"`arena pretrain --model {name} --out {shipped}`")
    return shipped


# ---------------------------------------------------------------------------------------------
# pretraining


def training_batch(policy: Policy, examples: list[dict], task, rng=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded sequences prompt + answer + stop tokens to the block end; returns (ids, valid, target).

    The answer is the task's teacher's (``rewards.Task.teacher_answer``: the example's own unless the task's
    teacher is noisy).
    """
    B, rows = policy.block_size, []
    for example in examples:
        prompt = policy.encode(task.prompt(example))
        answer = policy.encode(task.teacher_answer(example, rng)) + [policy.eos_id]
        end = -(-(len(prompt) + len(answer)) // B) * B
        rows.append((prompt, answer + [policy.eos_id] * (end - len(prompt) - len(answer))))
    T = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), T), policy.pad_id, dtype=torch.long)
    valid = torch.zeros((len(rows), T), dtype=torch.bool)
    target = torch.zeros((len(rows), T), dtype=torch.bool)  # completion positions
    for i, (p, a) in enumerate(rows):
        ids[i, : len(p) + len(a)] = torch.tensor(p + a)
        valid[i, : len(p) + len(a)] = True
        target[i, len(p) : len(p) + len(a)] = True
    return ids, valid, target


def complementary_masks(target: torch.Tensor, block_size: int, generator, eps: float = 1e-3) -> torch.Tensor:
    """(batch, 2, T) masks: per block a rate t ~ U(eps, 1), positions masked w.p. t, and the complement.

    Only completion positions that are not block starts are maskable; the two views together mask
    each of them exactly once.
    """
    batch, T = target.shape
    maskable = target & (torch.arange(T) % block_size != 0)
    rate = (1 - eps) * torch.rand(batch, T // block_size, generator=generator) + eps
    mask = (torch.rand(batch, T, generator=generator) < rate.repeat_interleave(block_size, 1)) & maskable
    return torch.stack([mask, maskable & ~mask], 1)


def diffusion_loss(policy: Policy, ids, valid, target, generator, eps: float = 1e-3) -> torch.Tensor:
    """Fast-dLLM v2 objective with complementary masks, summed CE / number of completion tokens."""
    B = policy.block_size
    T = ids.shape[1]
    first_target = int(target.float().argmax(1).min())
    layout = PackedLayout(T, B, n_noisy=2, noisy_start=(first_target // B) * B)
    block_start = torch.arange(T) % B == 0
    masks = complementary_masks(target, B, generator, eps)
    views = torch.where(masks, policy.mask_id, ids[:, None])
    hidden = policy.packed_hidden(ids, valid, views[:, :, layout.noisy_start :], layout)
    losses = []
    ar_rows, ar_pos = (target & block_start).nonzero(as_tuple=True)
    ar_index = layout.predictor_index(ar_pos)
    losses.append(torch.nn.functional.cross_entropy(policy.logits(hidden[ar_rows, ar_index]), ids[ar_rows, ar_pos], reduction="sum"))
    for stream in (1, 2):
        rows, pos = masks[:, stream - 1].nonzero(as_tuple=True)
        index = layout.predictor_index(pos, stream)
        losses.append(torch.nn.functional.cross_entropy(policy.logits(hidden[rows, index]), ids[rows, pos], reduction="sum"))
    return sum(losses) / target.sum()


def level_examples(task, config: TinyConfig, step: int) -> list[dict]:
    """One training batch, difficulty levels drawn by the curriculum weights (keyed by step)."""
    weights = torch.tensor(config.level_weights)
    if len(weights) != len(task.levels):
        raise ValueError(f"level_weights {config.level_weights} must have one weight per level {task.levels}")
    picks = torch.multinomial(weights, config.batch, replacement=True, generator=torch_generator(config.seed, PretrainKey.LEVELS, step))
    pool = task.examples("train", n=4 * config.batch, seed=config.seed * 1_000_003 + step)
    by_level = {}
    for example in pool:
        by_level.setdefault(example["difficulty"], []).append(example)
    counters = {level: 0 for level in by_level}
    batch = []
    for level in (task.levels[i] for i in picks.tolist()):
        batch.append(by_level[level][counters[level] % len(by_level[level])])
        counters[level] += 1
    return batch


@contextlib.contextmanager
def one_thread():
    """Run single-threaded: kernels then reduce in one order, so a rebuild does not depend on the core count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def pretrain(config: TinyConfig, path: Path, progress: bool = True) -> dict:
    """Train the tiny model (single-threaded) and write it to ``path`` atomically; returns its report."""
    with one_thread():
        return _pretrain(config, Path(path), progress)


def _pretrain(config: TinyConfig, path: Path, progress: bool) -> dict:
    from rewards import get_task

    task = get_task(config.task)
    policy = build_policy(config)
    model = policy.model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / config.warmup) * max(0.05, 1 - s / config.steps)
    )
    start = time.time()
    bar = Progress(f"pretrain on {config.task}", config.steps, "steps", enabled=progress)
    every = max(1, config.steps // 10)  # outside a terminal: a line per tenth of the steps
    for step in range(config.steps):
        teacher_rng = numpy_generator(config.seed, PretrainKey.TEACHER, step)
        ids, valid, target = training_batch(policy, level_examples(task, config, step), task, teacher_rng)
        loss = diffusion_loss(policy, ids, valid, target, torch_generator(config.seed, PretrainKey.MASKS, step))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        bar.update(step + 1, loss=f"{loss.item():.3f}")
        if (step + 1) % every == 0:
            bar.line(f"step {step + 1}/{config.steps}, {bar.seconds:.0f} s, loss {loss.item():.3f}")
    bar.close("trained")
    model.eval()
    seconds = round(time.time() - start, 1)
    report = {"config": asdict(config), "digest": config.digest(), "seconds": seconds, **evaluate_levels(policy, task)}
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=path.name + ".tmp"))
    save_checkpoint(model, policy.tokenizer, staging, config.block_size, config.sub_block)
    (staging / "pretrain.json").write_text(json.dumps(report, indent=2))
    if path.exists():
        shutil.rmtree(path)
    staging.rename(path)
    return report


def evaluate_levels(policy: Policy, task, per_level: int = 128, seed: int = 0) -> dict:
    """Held-out mean reward per difficulty level (exact match on ``noisy_arithmetic``): greedy, and one
    sample at temperature 1 per prompt.

    The sampled rate is what RL starts from (the teacher's q, roughly); greedy is the model's mode.
    """
    examples = task.examples("heldout", n=per_level * len(task.levels), seed=seed)
    prompts = [policy.encode(task.prompt(e)) for e in examples]
    answer_tokens = max(8, 1 + max(len(e["answer"]) for e in examples))  # the answer and its stop token
    report = {}
    for name, temperature in (("greedy", 0.0), ("sampled", 1.0)):
        out = generate(policy, prompts, SamplerConfig(max_new_tokens=answer_tokens, temperature=temperature), seed=seed)
        scores: dict[int, list[float]] = {}
        for example, text in zip(examples, out.texts):
            scores.setdefault(example["difficulty"], []).append(task.reward(text, example))
        report[f"heldout_{name}"] = {str(level): sum(v) / len(v) for level, v in sorted(scores.items())}
    report["heldout_prompts_per_level"] = per_level
    return report


def matches_within_noise(rebuilt: dict, shipped: dict, z: float = 3.0) -> list[str]:
    """Levels whose accuracy differs between two reports by more than ``z`` binomial standard errors."""
    differing = []
    for kind in ("heldout_greedy", "heldout_sampled"):
        n = shipped["heldout_prompts_per_level"]
        for level, expected in shipped[kind].items():
            got = rebuilt[kind][level]
            pooled = (expected + got) / 2
            stderr = math.sqrt(max(2 * pooled * (1 - pooled) / n, 1 / n**2))
            if abs(got - expected) > z * stderr:
                differing.append(f"{kind} level {level}: {got:.3f} vs shipped {expected:.3f}")
    return differing
