"""The 1.5B / 7B path rehearsed at the real widths: ``arena run --profile fast-dllm-v2-* --model DIR`` on checkpoints
that have the real networks' widths and fewer layers, through the whole runner, with peak memory and seconds per
phase, against ``arena plan``'s memory model.

    python -m benchmarks.rehearsal --widths 1.5b,7b --depths 1,2,4 --out DIR     # real widths (a benchmark)
    python -m benchmarks.rehearsal --tiny --out DIR                              # tiny widths (its test)
    python -m benchmarks.rehearsal --table DIR [DIR ...]     # one table of earlier runs, the current plan's error

For each width and depth it writes a checkpoint in Fast-dLLM v2's on-disk format (``save_checkpoint``: sharded
bf16 safetensors, index, the Fast-dLLM config.json with bd_size 32 and small_block_size 8) with the profile's
hidden size, heads, KV heads, MLP width, vocabulary and tying (``arena.profiles.SHAPES``), keyed random weights
(``init_weights``), and a byte-level BPE tokenizer in Qwen2's format whose special tokens have the real ids
(<|endoftext|> 151643, <|im_start|> 151644, <|im_end|> 151645, |<MASK>| 151665) and the Qwen2 chat template; and
a GSM8K-format data file. Then, for every method of the main study (``studies/es_vs_blockgrpo.yaml``), one
``arena run`` at the profile with its settings (LoRA rank 128, β 0.04, the ELBO with 2 draws, ...) except the
sizes the CPU cannot afford, stated in ``REDUCED``: 32-token rollouts (1/8 of the profile's 256), one prompt a
step, a group of 2, 2 inner iterations, a population of 2, an evaluation of 2 prompts x 1 sample.

Each run is a child process (``--child``) that wraps the runner's phases (the rollout's ``generate``, the
estimator's forward, ``Tensor.backward``, the optimizer / ES update, the evaluation's ``generate``) with timers and
peak-RSS readings (Linux: VmHWM, reset per phase through /proc/self/clear_refs); its memory is the peak over the
RSS after imports (torch, transformers, MLflow), which the plan does not model. The plan is evaluated at the run's
own settings, in fp32 (the CPU's dtype), with the measured prompt length.

Modules by job: ``rehearsal_fixtures`` (checkpoint, tokenizer, data), ``rehearsal_child`` (the timed run),
``rehearsal_table`` (the tables), this one (the driver: widths x depths x methods, the plan's prediction).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.rehearsal_child import child
from benchmarks.rehearsal_fixtures import BPE_TOKENS, build_checkpoint, build_tokenizer, write_data
from benchmarks.rehearsal_table import HEADER, PHASES, error, format_row, markdown

# what the GPU check and the test use, beside the driver's own
__all__ = ["METHODS", "PHASES", "build_tokenizer", "error", "markdown", "rehearse", "write_data"]

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("block_grpo", "grpo", "diffu_grpo", "es")
PROFILES = {"1.5b": "fast-dllm-v2-1.5b", "7b": "fast-dllm-v2-7b"}
TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 512, "tie_word_embeddings": False}
REDUCED = {"grpo": {"max_new_tokens": 32, "group_size": 2, "micro_batch": 2, "inner_iterations": 2},
           "es": {"max_new_tokens": 32, "population": 2, "prompts_per_member": 1}}
STUDY = """\
# written by benchmarks/rehearsal.py: one {method} step at the {profile} profile, sizes reduced for a CPU
name: rehearsal_{method}
model: tiny
task: {{name: gsm8k, source: {data}}}
evaluation: {{prompts: 2, samples: 1, max_new_tokens: {new_tokens}, points: 2}}
budget: {{unit: samples, amount: {samples}}}
seeds: [0]
controls: []
at:
  {profile}:
    train: {{prompts_per_step: 1}}
    evaluation: {{prompts: 2, samples: 1, max_new_tokens: {new_tokens}, points: 2}}
reference: {method}
arms:
  {method}:
    method: {method}
    options: {options}
    at: {{{profile}: {at}}}
"""


# ---------------------------------------------------------------------------------------------
# the driver: widths x depths x methods, the table, the plan's error


def study_text(method: str, profile: str, data: Path, new_tokens: int = 32) -> str:
    """The main study's arm for ``method`` (its tiny-scale options, which the profile replaces), one step;
    rollouts and evaluation of ``new_tokens`` (``REDUCED``'s 32 unless given)."""
    from arena.study import load_study

    arm = load_study(ROOT / "studies/es_vs_blockgrpo.yaml").arms[method]
    options = {k: v for k, v in arm.options.items() if k in ("estimator", "draws")}
    at = {**REDUCED["es" if method == "es" else "grpo"], "max_new_tokens": new_tokens}
    samples = at["population"] * at["prompts_per_member"] if method == "es" else at["group_size"]
    return STUDY.format(method=method, profile=profile, data=data, samples=samples, options=json.dumps(options),
                        at=json.dumps(at), new_tokens=new_tokens)


def predicted(study: Path, profile: str, fields: dict, layers: int, prompt: int, weight_bytes: int) -> dict:
    """``arena.plan.memory`` and ``step_cost`` at the run's own settings and dtype, the measured prompt length."""
    from arena import plan
    from arena.study import load_study

    loaded = load_study(study, profile)
    run = loaded.runs()[0]
    shape = plan.Shape.of({**fields, "num_hidden_layers": layers})
    spec = loaded.evaluation
    memory = plan.memory(shape, run.method, run.config, run.train.prompts_per_step, spec.prompts * spec.samples,
                         spec.max_new_tokens, weight_bytes=weight_bytes, prompt=prompt, on_cpu=weight_bytes == 4)
    cost = plan.step_cost(shape, plan.GPUS["h200"], run.method, run.config, run.train.prompts_per_step,
                          weight_bytes=weight_bytes, prompt=prompt, tokens_per_step=1.0)  # random weights
    return {"memory": memory, "cost": cost, "parameters": shape.parameters()}


def rehearse(widths, depths, methods, out: Path, tiny: bool, max_gib: float, timeout: float,
             new_tokens: int = 32) -> list[dict]:
    import torch

    from arena.profiles import SHAPES
    from rewards import get_task

    cuda = torch.cuda.is_available()  # arena run then loads the checkpoint in bf16 on the GPU, else fp32
    out.mkdir(parents=True, exist_ok=True)
    data = write_data(out / "gsm8k.jsonl")
    texts = [line for line in data.read_text().splitlines()] * 4
    tokenizer = build_tokenizer(out / "bpe", texts, vocab=400 if tiny else BPE_TOKENS)
    task = get_task("gsm8k")
    prompt = max(len(tokenizer.encode(task.prompt(e, tokenizer), add_special_tokens=False))
                 for e in task.examples("train", source=str(data)) + task.examples("heldout", source=str(data)))
    rows = []
    for width in widths:
        profile = PROFILES[width]
        fields = TINY if tiny else {k: v for k, v in SHAPES[profile].items() if k != "num_hidden_layers"}
        for layers in depths:
            checkpoint = None
            for method in methods:
                study = out / f"{width}-{layers}-{method}.yaml"
                study.write_text(study_text(method, profile, data, new_tokens))
                plan = predicted(study, profile, fields, layers, prompt, 2 if cuda else 4)
                row = {"width": width, "layers": layers, "method": method, "parameters": plan["parameters"],
                       "prompt": prompt, "fields": fields, "study": str(study), "weight_bytes": 2 if cuda else 4,
                       "plan": plan["memory"], "cost": plan["cost"]}
                rows.append(row)
                available = torch.cuda.mem_get_info()[0] if cuda else _meminfo("MemAvailable")
                if plan["memory"]["peak"] > max_gib * 2**30 or plan["memory"]["peak"] + 2**31 > available:
                    row["skipped"] = (f"the plan's {plan['memory']['peak'] / 2**30:.1f} GiB is over the limit "
                                      f"({max_gib} GiB, {available / 2**30:.1f} GiB available)")
                    print(format_row(row), flush=True)
                    continue
                if checkpoint is None:
                    checkpoint = build_checkpoint(out / f"ckpt-{width}-{layers}", fields, layers, tokenizer)
                row.update(run_child(study, profile, checkpoint, out / f"work-{width}-{layers}-{method}", timeout))
                print(format_row(row), flush=True)
    (out / "rehearsal.json").write_text(json.dumps(rows, indent=1, default=str))
    (out / "rehearsal.md").write_text(markdown(rows))
    return rows


def _meminfo(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def run_child(study: Path, profile: str, checkpoint: Path, workdir: Path, timeout: float) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    result = workdir / "phases.json"
    command = [sys.executable, "-m", "benchmarks.rehearsal", "--child", str(study), profile, str(checkpoint),
               str(workdir), str(result)]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if done.returncode or not result.is_file():
        return {"error": " / ".join((done.stdout + done.stderr).strip().splitlines()[-3:])[-500:]}
    measured = json.loads(result.read_text())
    if measured["exit"]:
        return {"error": f"arena run exited {measured['exit']}: {done.stderr.strip().splitlines()[-1:]}"}
    return {"measured": measured}


def retable(folders: list[Path]) -> list[dict]:
    """The rows of earlier rehearsals (their rehearsal.json), the plan recomputed by the current ``arena.plan``."""
    from arena.profiles import SHAPES

    rows = []
    for folder in folders:
        for row in json.loads((folder / "rehearsal.json").read_text()):
            fields = row.get("fields") or {k: v for k, v in SHAPES[PROFILES[row["width"]]].items()
                                           if k != "num_hidden_layers"}
            study = Path(row.get("study") or folder / f"{row['width']}-{row['layers']}-{row['method']}.yaml")
            plan = predicted(study, PROFILES[row["width"]], fields, row["layers"], row["prompt"],
                             row.get("weight_bytes", 4))
            rows.append({**row, "plan": plan["memory"], "cost": plan["cost"]})
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:7])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--table":  # --table DIR...: one table of earlier rehearsals
        rows = retable([Path(folder) for folder in sys.argv[2:]])
        print(markdown(rows))
        errors = [abs(e) for e in map(error, rows) if e is not None]
        print(f"plan vs measured peak: largest error {max(errors):.0%} over {len(errors)} runs" if errors else "")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="1.5b,7b", help="1.5b, 7b or both (default: %(default)s)")
    parser.add_argument("--depths", default="1,2,4", help="layers, comma-separated (default: %(default)s)")
    parser.add_argument("--methods", default=",".join(METHODS), help="(default: the main study's)")
    parser.add_argument("--tiny", action="store_true", help="tiny widths (hidden 64): the test's mode")
    parser.add_argument("--max-gib", type=float, default=8.0, help="skip runs the plan puts above this (default 8)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run (default 1800)")
    parser.add_argument("--new-tokens", type=int, default=32, help="rollout and evaluation length (default 32)")
    parser.add_argument("--out", type=Path, default=None, help="folder for checkpoints, rehearsal.json / .md")
    args = parser.parse_args()
    print(f"benchmarks/rehearsal.py, {'tiny' if args.tiny else 'real'} widths; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n{HEADER}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rehearsal_") as scratch:
        rows = rehearse(args.widths.split(","), [int(d) for d in args.depths.split(",")], args.methods.split(","),
                        args.out or Path(scratch), args.tiny, args.max_gib, args.timeout, args.new_tokens)
    errors = [abs(e) for e in map(error, rows) if e is not None]
    if errors:
        print(f"plan vs measured peak: largest error {max(errors):.0%}, mean {sum(errors) / len(errors):.0%} "
              f"over {len(errors)} runs")
    if any("error" in row for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
