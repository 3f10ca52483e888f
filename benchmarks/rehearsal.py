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
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("block_grpo", "grpo", "diffu_grpo", "es")
PROFILES = {"1.5b": "fast-dllm-v2-1.5b", "7b": "fast-dllm-v2-7b"}
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
PHASES = ("rollout", "scoring forward", "backward", "optimizer", "evaluation")


# ---------------------------------------------------------------------------------------------
# the checkpoint, its tokenizer and the data


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


# ---------------------------------------------------------------------------------------------
# the child: one arena run with its phases timed and their peak RSS read


def _status(field: str) -> int:
    """A /proc/self/status field in bytes (VmHWM: peak RSS since the last reset; VmRSS: now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


class Phases:
    """Seconds and peak memory per phase; between phases, the peak goes to ``other`` (loading, checkpoints, MLflow).
    On the CPU the process's peak RSS; with a GPU, the device's peak allocation."""

    def __init__(self, cuda: bool):
        self.seconds, self.peak, self.calls, self.cuda = {}, {}, {}, cuda

    def watch(self) -> None:
        """Sample the RSS every 0.2 s and keep the stack of the main thread at the largest: where the peak is."""
        import threading
        import traceback

        main_id, self.where, self.highest = threading.main_thread().ident, "", 0

        def sample():
            while True:
                rss = _status("VmRSS")
                if rss > self.highest:
                    frames = traceback.extract_stack(sys._current_frames()[main_id])
                    ours = [f"{Path(f.filename).stem}.{f.name}" for f in frames
                            if "/arena/" in f.filename or "/methods/" in f.filename]
                    self.highest, self.where = rss, " > ".join(ours[-4:])
                time.sleep(0.2)

        threading.Thread(target=sample, daemon=True).start()

    def now(self) -> int:
        import torch

        return torch.cuda.memory_allocated() if self.cuda else _status("VmRSS")

    def _fold(self, name: str) -> None:
        import torch

        peak = torch.cuda.max_memory_allocated() if self.cuda else _status("VmHWM")
        self.peak[name] = max(self.peak.get(name, 0), peak)
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        else:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS

    def wrap(self, owner, attribute: str, name: str) -> None:
        inner = getattr(owner, attribute)

        def timed(*args, **kwargs):
            self._fold("other")
            began = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - began
                self.calls[name] = self.calls.get(name, 0) + 1
                self._fold(name)

        setattr(owner, attribute, timed)


def child(study: str, profile: str, model: str, workdir: str, out: str) -> None:
    import torch

    import arena.evaluate
    import methods.es
    import methods.grpo
    import mlflow  # noqa: F401  (imported before the baseline: the plan does not model it)
    from arena.cli import main
    from methods import likelihood

    phases = Phases(torch.cuda.is_available())
    baseline = phases.now()
    if not phases.cuda:
        phases.watch()
    for owner, attribute, name in ((methods.grpo, "generate", "rollout"), (methods.es, "generate", "rollout"),
                                   (likelihood.Scorer, "__call__", "scoring forward"),
                                   (torch.Tensor, "backward", "backward"), (torch.optim.AdamW, "step", "optimizer"),
                                   (methods.es.ES, "tell", "optimizer"),
                                   (arena.evaluate, "generate", "evaluation")):
        phases.wrap(owner, attribute, name)
    began = time.perf_counter()
    code = main(["run", study, "--profile", profile, "--model", model, "--workdir", workdir, "--jobs", "1",
                 "--tracking-uri", f"sqlite:///{workdir}/mlflow.db"])
    phases._fold("other")
    Path(out).write_text(json.dumps({"exit": code, "baseline": baseline, "seconds": phases.seconds,
                                     "peak": phases.peak, "calls": phases.calls,
                                     "peak_where": getattr(phases, "where", ""),
                                     "total_seconds": time.perf_counter() - began}))


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


def error(row: dict) -> float | None:
    """The plan's relative error on the peak above the process's RSS after imports."""
    if "measured" not in row:
        return None
    measured = max(row["measured"]["peak"].values()) - row["measured"]["baseline"]
    return row["plan"]["peak"] / measured - 1


def format_row(row: dict) -> str:
    head = f"{row['width']:>4} {row['layers']:>2} {row['method']:<10} {row['parameters']:>13,}"
    if "measured" not in row:
        return f"{head}  {row.get('skipped') or row.get('error')}"
    m, gib = row["measured"], 2**30
    peak = (max(m["peak"].values()) - m["baseline"]) / gib
    seconds = "".join(f"{m['seconds'].get(p, 0.0):>9.1f}" for p in PHASES)
    return (f"{head} {peak:>8.2f} {row['plan']['peak'] / gib:>8.2f} {error(row):>+7.0%}{seconds}"
            f"{m['total_seconds']:>9.1f}")


HEADER = (f"{'width':>4} {'L':>2} {'method':<10} {'parameters':>13} {'peak GiB':>8} {'plan GiB':>8} {'error':>7}"
          + "".join(f"{p[:9]:>9}" for p in PHASES) + f"{'total s':>9}")


def flop_rates(row: dict) -> tuple[float, float]:
    """GFLOP/s of the rollout and of scoring (forward and backward together) by ``arena.budget.token_flops``, from
    the plan's token counts of one step and the measured seconds (evaluation excluded)."""
    from arena.budget import token_flops

    cost, seconds = row["cost"], row["measured"]["seconds"]
    generated = token_flops(cost["generated_tokens"], 0, cost["traversed"], cost["trained"])
    scoring = token_flops(cost["scoring_tokens"], cost["backward_tokens"], cost["traversed"], cost["trained"])
    scoring_seconds = seconds.get("scoring forward", 0.0) + seconds.get("backward", 0.0)
    return generated / seconds["rollout"] / 1e9, scoring / scoring_seconds / 1e9 if scoring_seconds else math.nan


def markdown(rows: list[dict]) -> str:
    lines = ["| width | layers | method | parameters | peak GiB | plan GiB | plan error | "
             + " | ".join(f"{p} s" for p in PHASES) + " | run s | peak phase (plan's) | rollout GFLOP/s | "
             "scoring GFLOP/s |", "|" + "---|" * (11 + len(PHASES))]
    for row in rows:
        cells = [row["width"], row["layers"], row["method"], f"{row['parameters']:,}"]
        if "measured" not in row:
            why = row.get("skipped") or row.get("error") or "no result"
            lines.append("| " + " | ".join(map(str, cells)) + f" | {why} |")
            continue
        m = row["measured"]
        phase = max(m["peak"], key=m["peak"].get)
        cells += [f"{(m['peak'][phase] - m['baseline']) / 2**30:.2f}", f"{row['plan']['peak'] / 2**30:.2f}",
                  f"{error(row):+.0%}", *(f"{m['seconds'].get(p, 0.0):.1f}" for p in PHASES),
                  f"{m['total_seconds']:.0f}", f"{phase} ({max(row['plan']['phases'], key=row['plan']['phases'].get)})",
                  *("-" if math.isnan(rate) else f"{rate:.1f}" for rate in flop_rates(row))]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


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
