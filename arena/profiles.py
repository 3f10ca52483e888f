"""Scale profiles: the same study file on the embedded tiny model (no profile) or on Fast-dLLM v2.

A profile rewrites a study before it is validated: the model, the task, the evaluation's decoding
length and the per-method settings that depend on the scale. The profile's method settings replace
the arm's values of the same keys (a learning rate or a decoding length tuned on the tiny model means
nothing at 7B); the arm's other options (its estimator, its draws) stay; and an arm's
``at: {PROFILE: {...}}`` block goes on top of both, so a study that varies a scale-dependent option
states it per scale. The study's own top-level ``at: {PROFILE: {budget: ..., seeds: ...}}`` does the same
for its shared sections (``AT_SECTIONS``): a budget sized for a GPU-hour allowance at 7B is not the one a
CPU runs in minutes; seeds set there are every arm's at that scale (an arm's own ``seeds`` give way).
Nothing falls back: a profile names its model; a missing checkpoint is an error.

Method defaults follow the peers' published settings: d1 / diffu-GRPO (Zhao et al. 2025, arXiv 2504.12216)
at 7B-8B ran LoRA r=128, α=64, lr 3e-6, ε=0.5, β=0.04, max_grad_norm 0.2, weight decay 0.1, group 6,
256 tokens, temperature 0.9; ES at LLM scale (Qiu et al. 2025, arXiv 2509.24372, and its code, es-at-scale)
σ=1e-3, α=σ/2, population 30 (32 here: antithetic pairs), greedy members, z-score shaping.
"""
from __future__ import annotations

import copy

from arena.config import ConfigError, Problem, unknown_key

_GRPO_7B = {"trainable": "lora", "lora_rank": 128, "lora_alpha": 64.0, "lr": 3e-6, "clip_eps": 0.5, "beta": 0.04,
            "max_grad_norm": 0.2, "weight_decay": 0.1, "group_size": 6, "max_new_tokens": 256, "temperature": 0.9,
            "micro_batch": 6, "threshold": 0.9}
_ES_7B = {"sigma": 1e-3, "alpha": 5e-4, "population": 32, "shaping": "zscore", "temperature": 0.0,
          "max_new_tokens": 256, "trainable": "lora", "lora_rank": 128, "lora_alpha": 64.0, "prompts_per_member": 16}


def _profile(model: str) -> dict:
    return {
        "model": model,
        "task": {"name": "gsm8k", "levels": None},
        "train": {"prompts_per_step": 16},
        # 128 rows a generate call: about the rollout's 96; all 1,024 at once need 78 GiB at 7B (docs/scaling.md)
        "evaluation": {"prompts": 256, "samples": 4, "temperature": 0.9, "max_new_tokens": 256, "decode_batch": 128},
        "methods": {"grpo": _GRPO_7B, "diffu_grpo": _GRPO_7B, "block_grpo": _GRPO_7B, "es": _ES_7B},
    }


# The network each profile's checkpoint holds, as its config.json states it: what ``arena plan`` sizes memory and
# time from without downloading it, and the widths ``benchmarks/rehearsal.py`` builds. 7B: the checkpoint's
# config.json (Efficient-Large-Model/Fast_dLLM_v2_7B, HF revision 200e3eff). 1.5B: Qwen2.5-1.5B-Instruct's
# config.json, the model the 1.5B checkpoint was trained from (its model card); its vocabulary is 151,936 rows and
# the head is tied to the embedding, where the 7B has 152,064 rows and an untied head. Both tokenizers hold 151,666
# tokens: the 151,643 BPE tokens, 22 specials (<|endoftext|> 151643, <|im_start|> 151644, <|im_end|> 151645 ...)
# and the mask token |<MASK>| 151665.
SHAPES = {
    "fast-dllm-v2-7b": {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
                        "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
                        "tie_word_embeddings": False},
    "fast-dllm-v2-1.5b": {"hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12,
                          "num_key_value_heads": 2, "intermediate_size": 8960, "vocab_size": 151936,
                          "tie_word_embeddings": True},
}


PROFILES = {
    "fast-dllm-v2-7b": _profile("Efficient-Large-Model/Fast_dLLM_v2_7B"),
    "fast-dllm-v2-1.5b": _profile("Efficient-Large-Model/Fast_dLLM_v2_1.5B"),
}


AT_SECTIONS = ("budget", "seeds", "train", "evaluation")  # what a study's top-level ``at`` may set per profile


def apply_profile(raw: dict, name: str | None, family=lambda method: method) -> dict:
    """The raw study dict as it runs under profile ``name`` (None: unchanged, minus the ``at`` blocks).

    ``family(method)`` names the registered method whose scale settings an arm's method takes (a method
    given by import path that extends ``block_grpo`` takes block-GRPO's)."""
    raw = copy.deepcopy(raw)
    if name is not None and name not in PROFILES:
        raise ConfigError([Problem("--profile", f"unknown profile {name!r}; known profiles: {', '.join(PROFILES)}")])
    profile, problems = PROFILES.get(name, {}), []
    if profile:
        raw["model"] = profile["model"]
        for section in ("task", "train", "evaluation"):
            raw[section] = {**(raw.get(section) or {}), **profile[section]}
    study_at, profile_seeds = raw.pop("at", None) or {}, False
    if not isinstance(study_at, dict):
        raise ConfigError([Problem("at", f"expected profile -> {{{', '.join(AT_SECTIONS)}}}, got {study_at!r}")])
    for key, sections in study_at.items():
        if key not in PROFILES:
            problems.append(Problem(f"at.{key}", unknown_key(key, PROFILES).message.replace("option", "profile")))
            continue
        if not isinstance(sections, dict):
            problems.append(Problem(f"at.{key}", f"expected a mapping of {', '.join(AT_SECTIONS)}, got {sections!r}"))
            continue
        for section, value in sections.items():
            if section not in AT_SECTIONS:
                problems.append(Problem(f"at.{key}.{section}", f"a profile may set {', '.join(AT_SECTIONS)} of "
                                                                 f"the study, not {section!r}"))
            elif key == name:  # a mapping merges over the section; seeds (a list or a count) replace
                merge = isinstance(value, dict) and isinstance(raw.get(section), dict)
                raw[section] = {**raw[section], **value} if merge else value
                profile_seeds = profile_seeds or section == "seeds"
    arms = raw.get("arms")
    for arm_name, arm in (arms.items() if isinstance(arms, dict) else ()):
        if not isinstance(arm, dict):
            continue
        at = arm.pop("at", None) or {}
        if profile_seeds:  # the profile's seed count is the study's at that scale: an arm's own seeds give way
            arm.pop("seeds", None)
        problems += [Problem(f"arms.{arm_name}.at.{key}", unknown_key(key, PROFILES).message.replace("option", "profile"))
                     for key in at if key not in PROFILES]
        defaults = profile.get("methods", {}).get(family(arm.get("method")), {}) if profile else {}
        arm["options"] = {**(arm.get("options") or {}), **defaults, **(at.get(name) or {})}
    if problems:
        raise ConfigError(problems)
    return raw
