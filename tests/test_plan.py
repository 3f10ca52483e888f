"""``arena plan``: the planner's arithmetic against hand derivations and against second implementations (the
model transformers builds, peft's adapters, the estimators' own packed forwards)."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from arena import plan
from arena.cli import main
from arena.profiles import SHAPES
from methods.block_grpo import BlockGRPOConfig
from methods.es import ES
from methods.grpo import GRPOConfig

# hidden 4, one layer, 2 heads of 2 (1 KV head: k and v are 2 wide), MLP 8, 10 tokens, untied head
TOY = plan.Shape(hidden=4, layers=1, heads=2, kv_heads=1, intermediate=8, vocab=10, tied=False)


def test_parameter_counts_match_the_checkpoints_and_transformers():
    # 7B, by hand: a layer has q 3584² + 3584, k and v 3584·512 + 512 each, o 3584², MLP 3·3584·18944, two norms
    # 2·3584: 233,057,792; 28 layers 6,525,618,176; embedding and head 152,064·3584 = 544,997,376 each; final norm
    # 3584: 7,615,616,512, the count docs/performance.md states of the real checkpoint.
    assert plan.Shape.of(SHAPES["fast-dllm-v2-7b"]).parameters() == 7_615_616_512
    # LoRA rank 128: in + out summed over q (7168), k, v (4096 each), o (7168), gate, up, down (22528 each) is
    # 90,112; x 128 x 28 layers = 322,961,408
    assert plan.Shape.of(SHAPES["fast-dllm-v2-7b"]).lora(128, plan_targets()) == 322_961_408
    from transformers import Qwen2Config, Qwen2ForCausalLM

    for tied in (False, True):  # a second implementation: the model transformers builds from the same fields
        fields = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "intermediate_size": 24, "vocab_size": 50, "tie_word_embeddings": tied}
        model = Qwen2ForCausalLM(Qwen2Config(**fields))
        assert plan.Shape.of(fields).parameters() == sum(p.numel() for p in model.parameters())


def plan_targets():
    from methods.base import Trainable

    return Trainable.lora_targets


def test_lora_count_matches_peft():
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    fields = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 24, "vocab_size": 50, "tie_word_embeddings": False}
    model = get_peft_model(Qwen2ForCausalLM(Qwen2Config(**fields)),
                           LoraConfig(r=4, lora_alpha=8, target_modules=list(plan_targets())))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert plan.Shape.of(fields).lora(4, plan_targets()) == trainable


def test_memory_of_a_hand_derived_grpo_step():
    """Full fine-tuning in bf16, β > 0, one prompt x a group of 2, micro-batch 1, 8-token prompts and answers,
    blocks of 8, the ar estimator; an evaluation of 4 rows of 8 tokens.

    Parameters: a layer q 4·4+4, k and v 4·2+2 each, o 16, MLP 3·4·8, norms 8: 160; embedding and head 40 each;
    final norm 4: 244.
    weights 244·2 = 488; gradients bf16 + fp32 244·6 = 1464; AdamW 244·8 = 1952; masters 244·4 = 976;
    reference 488.
    activations of one sequence: packed = scored window 16 tokens (8 prompt + 8 answer) x (8·4 + 4·8)·2 = 128
    bytes = 2048; 8 scored positions x (10 logits x 4 bytes x 4 copies + 4·2 hidden) = 1344; the 16² mask x 4
    bytes = 1024: 4416.
    rollout of 2 rows: KV 2 rows x 16 tokens x (1 layer x 2 x 2 wide x 2 bytes) = 256, plus the larger of the
    prefill (3 x 2 rows x 8 x 8 x 2 = 768) and the logits (3 x 2 x 8 x 10 x 4 = 1920): 2176.
    evaluation of 4 rows: 4 x 16 x 8 = 512 + max(1536, 3840) = 4352.
    phases: state 5368; train 9784, rollout 7544, evaluation 9720; a checkpoint clones the fp32 masters, 5368 +
    976 = 6344; peak 9784."""
    config = GRPOConfig(group_size=2, beta=0.04, micro_batch=1, max_new_tokens=8, trainable="full")
    parts = plan.memory(TOY, "grpo", config, train_prompts=1, evaluation_rows=4, evaluation_tokens=8, block=8,
                        sub_block=8, weight_bytes=2, prompt=8)
    assert {k: parts[k] for k in ("weights", "trainable", "gradients", "optimizer", "masters", "reference")} == {
        "weights": 488, "trainable": 0, "gradients": 1464, "optimizer": 1952, "masters": 976, "reference": 488}
    assert (parts["activations"], parts["rollout"], parts["evaluation"]) == (4416, 2176, 4352)
    # weight drift: the largest tensor (10 x 4 embedding or 8 x 4 MLP) in fp32 on the GPU: 160
    assert parts["phases"] == {"train": 9784, "rollout": 7544, "evaluation": 9720, "weight drift": 5528,
                               "checkpoint": 6344}
    assert parts["peak"] == 9784


def test_flops_of_a_hand_derived_grpo_step():
    """The same step at μ = 2: scoring forwards θ twice (with its graph), θ_old once, the reference twice: 5 passes
    of 2 rows x 16 tokens = 160 forward tokens, 2 x 32 = 64 of them backward. Generation at threshold 1: a prefill
    of 8, then 7 denoising forwards and a commit of the 8-token block, 2 rows x (8 + 8 x 8) = 144 tokens.
    P (the input embedding excluded) = 204, all trained: 2·204·(160 + 144) + (2·204 + 2·204)·64 = 176,256."""
    config = GRPOConfig(group_size=2, beta=0.04, micro_batch=1, max_new_tokens=8, trainable="full",
                        inner_iterations=2)
    step = plan.step_cost(TOY, plan.GPUS["h200"], "grpo", config, train_prompts=1, block=8, sub_block=8, prompt=8)
    assert (step["samples"], step["tokens"], step["forward_tokens"], step["flops"]) == (2, 16, 304, 176_256)


def test_memory_of_a_hand_derived_es_step_under_lora():
    """ES, LoRA rank 2 on q_proj only, fp32 (the CPU): adapters 2·(4 + 4) = 16 parameters. trainable 16·4 = 64;
    masters 64 and the previous update 64; the noise of the largest tensor (16 values) x 3 copies x 4 = 192."""
    config = ES.Config(trainable="lora", lora_rank=2, lora_targets=("q_proj",), population=2, max_new_tokens=8)
    parts = plan.memory(TOY, "es", config, train_prompts=1, evaluation_rows=1, evaluation_tokens=8, block=8,
                        sub_block=8, weight_bytes=4, prompt=8)
    assert (parts["weights"], parts["trainable"], parts["masters"], parts["optimizer"], parts["gradients"],
            parts["activations"]) == (244 * 4, 64, 64, 64, 0, 192)


@pytest.mark.parametrize("estimator,options", [("ar", {}), ("d1", {}), ("masked", {}), ("elbo", {"draws": 2}),
                                               ("elbo", {"draws": 3}), ("gauss_legendre", {"nodes": 2})])
def test_packed_lengths_match_the_estimators_own_forward(tiny_policy, estimator, options):
    """A second implementation: the estimator's own packed forward counts its tokens (``Estimate.forward_tokens``)."""
    from methods import likelihood

    prompt, answer = 6, 8  # block 4, sub-block 2 (the tiny policy's)
    batch = likelihood.ScoringBatch.build([[5] * prompt], [[7] * answer], tiny_policy.pad_id, tiny_policy.block_size)
    with torch.no_grad():
        est = likelihood.estimate(estimator, tiny_policy, batch, (0, 0, 0), **options)
    config = SimpleNamespace(threshold=1.0)
    size = plan.lengths(config, tiny_policy.block_size, tiny_policy.sub_block, answer, prompt, (estimator, options))
    assert size.packed == est.forward_tokens


def test_the_7b_elbo_layout_by_hand():
    """160 prompt + 256 answer tokens (416, whole blocks of 32); ELBO, 2 draws of sub-blocks of 8: 2·32/8 = 8
    noisy views of the 256 tokens after the prompt's last whole block (160): 416 + 8·256 = 2464 packed; scored:
    each draw masks l ~ U{1..8} of 8, on average 4.5/8, so 2·256·9/16 = 288, plus the 8 blocks' first tokens."""
    config = BlockGRPOConfig(estimator="elbo", draws=2, threshold=0.9)
    size = plan.lengths(config, 32, 8, 256, 160, ("elbo", {"draws": 2}))
    assert (size.packed, size.scored) == (2464, 296)
    # threshold 0.9: 2.6 tokens a step, so 31 denoised tokens take ceil(31/2.6) = 12 forwards and a commit, x 8
    # blocks, after one prefill
    assert size.decode_forwards == 1 + 8 * 13


def test_full_fine_tuning_at_7b_does_not_fit_one_h200_and_lora_does(capsys, tmp_path):
    """Full-parameter AdamW in bf16: 2 (weights) + 2 + 4 (gradients) + 8 (moments) + 4 (masters) = 20 bytes a
    parameter, 152 GB for 7.6e9, more than 90% of 141 GB before any activation; rank-128 LoRA fits."""
    study = tmp_path / "full.yaml"
    study.write_text(
        "name: full\nmodel: tiny\ntask: {name: noisy_arithmetic, levels: [1]}\nbudget: {unit: samples, amount: 96}\n"
        "seeds: [0]\nreference: full\narms:\n  full:\n    method: grpo\n    at: {fast-dllm-v2-7b: {trainable: full, "
        "beta: 0.0, micro_batch: 1}}\n")
    assert main([ "plan", str(study), "--profile", "fast-dllm-v2-7b", "--gpu", "h200", "--json"]) == 0
    arm = json.loads(capsys.readouterr().out)["arms"]["full"]
    state = sum(arm["memory"][k] for k in ("weights", "gradients", "optimizer", "masters"))
    assert state == 20 * 7_615_616_512 and not arm["fits"]
    assert arm["changes"][0] == "trainable: lora (rank 128)"


def test_the_main_study_plan_names_every_arm_and_its_gpu_hours(capsys):
    assert main(["plan", "studies/es_vs_blockgrpo.yaml", "--profile", "fast-dllm-v2-7b", "--gpus", "1", "--gpu",
                 "h200", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["arms"]) == {"block_grpo", "grpo", "diffu_grpo", "es"}
    assert all(isinstance(arm["fits"], bool) and arm["gpu_hours"] > 0 for arm in result["arms"].values())
    assert result["gpu_hours"] > sum(arm["gpu_hours"] for arm in result["arms"].values())  # + the shared start


def test_a_plan_without_a_network_is_one_error(capsys):
    assert main(["plan", "studies/es_vs_blockgrpo.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--profile" in err


def test_an_answer_runs_to_the_end_of_the_block_that_reaches_max_new_tokens():
    """A 117-token prompt and 32 new tokens: generation ends with the block holding token 149, at 160, so the answer
    has 43 tokens over 2 blocks. Forwards: the prompt's 3 whole blocks (96 tokens) once; block 4 holds the prompt's
    last 21 tokens and 11 new ones, all denoised (11 steps) and a commit; block 5 takes its first token from that
    commit, denoises 31 and commits: 1 + 12 + 32 = 45 forwards, 96 + 44 x 32 = 1504 tokens a row. (The runner
    logged exactly this count for the 182-token prompts of the rehearsal: 160 + 43 x 32 = 1536.)"""
    size = plan.lengths(SimpleNamespace(threshold=1.0), 32, 8, 32, 117)
    assert (size.completion, size.packed, size.decode_forwards, size.generated(32)) == (43, 160, 45, 1504)
    assert plan.lengths(SimpleNamespace(threshold=1.0), 32, 8, 32, 182).generated(32) == 1536


def test_on_the_cpu_the_runners_copy_of_the_starting_weights_counts():
    config = GRPOConfig(group_size=2, micro_batch=1, max_new_tokens=8, trainable="full")
    on_gpu, on_cpu = (plan.memory(TOY, "grpo", config, 1, 1, 8, block=8, sub_block=8, weight_bytes=4, prompt=8,
                                  on_cpu=cpu) for cpu in (False, True))
    assert on_cpu["start copy"] == 244 * 2 and on_gpu["start copy"] == 0  # bf16: a bf16 checkpoint's values
    assert on_cpu["phases"]["train"] - on_gpu["phases"]["train"] == 244 * 2
    # weight_drift on the host: the fp32 difference of the largest tensor (40 values), squared in place
    assert on_cpu["phases"]["weight drift"] - on_cpu["phases"]["rollout"] + on_cpu["rollout"] == 40 * 4


def test_host_memory_of_a_run_by_hand():
    """The bf16 start copy 244·2 = 488; weight_drift widens the largest tensor (10 x 4) to fp32 on the host and takes
    its difference: 2·160 = 320; a checkpoint's write copies the largest trained tensor: LoRA rank 2 on q_proj, 2 x
    4 wide, fp32: 32; full fine-tuning: the embedding, 160. Peak: copy + data + the larger transient."""
    lora = ES.Config(trainable="lora", lora_rank=2, lora_targets=("q_proj",))
    full = GRPOConfig(trainable="full")
    for config, written in ((lora, 32), (full, 160)):
        host = plan.host(TOY, config)
        assert (host["start copy"], host["weight drift"], host["checkpoint write"]) == (488, 320, written)
        assert host["peak"] == 488 + plan.DATASET_BYTES + 320


def test_the_evaluation_decodes_in_calls_of_decode_batch_rows(capsys, tmp_path):
    """At the 7B profile (128 rows a call) an evaluation call's memory is 1/8 of all 1,024 rows at once (a row's
    KV cache and logits do not depend on the others); 1,024 at once do not fit an H100, and the plan names the
    most rows that do (halving from 1,024: 512)."""
    plans = {}
    for batch in (None, 1024):
        study = tmp_path / f"main-{batch}.yaml"
        text = Path("studies/es_vs_blockgrpo.yaml").read_text()
        if batch:
            text = text.replace("  fast-dllm-v2-7b: {budget: {amount: 6144}}",
                                f"  fast-dllm-v2-7b: {{budget: {{amount: 6144}}, evaluation: {{decode_batch: {batch}}}}}")
        study.write_text(text)
        assert main(["plan", str(study), "--profile", "fast-dllm-v2-7b", "--gpu", "h100-80gb", "--json"]) == 0
        plans[batch] = json.loads(capsys.readouterr().out)["arms"]["grpo"]
    assert plans[None]["memory"]["evaluation"] * 8 == plans[1024]["memory"]["evaluation"]
    assert plans[None]["fits"] and not plans[1024]["fits"]
    assert plans[1024]["changes"] == ["evaluation.decode_batch: 512 (the evaluation's 1024 rows a call do not fit)"]
