"""The rehearsal's child process: one ``arena run`` with its phases timed and their peak memory read."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path


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
