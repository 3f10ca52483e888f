"""Progress of a long loop (a run toward its budget, pretraining toward its steps), readable wherever it goes.

In a terminal (stdout and stderr both TTYs) it is a tqdm bar, redrawn in place on stderr. Anywhere else (a
log file, a pipe, CI, SLURM, nohup) redrawn bars turn into carriage returns and cursor escape codes, and two
parallel runs interleave them; there it prints plain lines on stdout instead: one when the loop starts, one
per ``line`` call (a run's evaluation points), one when it ends, each prefixed with the loop's label.
"""
from __future__ import annotations

import sys
import time

from tqdm import tqdm


def in_terminal() -> bool:
    return sys.stdout.isatty() and sys.stderr.isatty()


def announce(label: str, text: str, enabled: bool = True) -> None:
    """One line of work that has no bar of its own yet (a shared starting evaluation, a control), above any bars
    in a terminal, a plain line elsewhere; nothing unless ``enabled``."""
    if not enabled:
        return
    if in_terminal():
        tqdm.write(f"{label}: {text}")
    else:
        print(f"{label}: {text}", flush=True)


class Progress:
    """``label``'s progress toward ``total`` ``unit``; nothing at all unless ``enabled``."""

    def __init__(self, label: str, total: float, unit: str, initial: float = 0.0, position: int = 0,
                 enabled: bool = True, **bar_options):
        self.label, self.total, self.unit, self.done = label, total, unit, min(initial, total)
        # counts (samples, tokens, FLOPs) show as 256/256, never 256.0/256; seconds keep their fractions
        self.whole = unit != "seconds" and float(total).is_integer()
        self.began = time.monotonic()
        self.bar = None
        self.plain = enabled and not in_terminal()
        if enabled and not self.plain:
            self.bar = tqdm(total=int(total) if self.whole else total, initial=self._count(self.done), desc=label,
                            unit=unit, position=position, leave=True, dynamic_ncols=True, **bar_options)
        self._say(f"{'start' if not self.done else 'resume'} at {self.done:g}/{total:g} {unit}")

    @property
    def seconds(self) -> float:
        """Wall seconds since this loop started (in this process)."""
        return time.monotonic() - self.began

    def update(self, done: float, **shown) -> None:
        """Progress is now ``done`` (capped at the total); ``shown`` goes to the bar's postfix."""
        done = min(done, self.total)
        if self.bar is not None:
            self.bar.update(self._count(done) - self._count(self.done))
            if shown:
                self.bar.set_postfix(shown, refresh=False)
        self.done = done

    def line(self, text: str) -> None:
        """A line of its own outside a terminal (the bar's postfix carries the same in one)."""
        self._say(text)

    def close(self, outcome: str) -> None:
        if self.bar is not None:
            self.bar.close()
        self._say(f"{outcome} at {self.done:g}/{self.total:g} {self.unit} after {self.seconds:.0f} s")

    def _count(self, value: float) -> float:
        return int(round(value)) if self.whole else value

    def _say(self, text: str) -> None:
        if self.plain:
            print(f"{self.label}: {text}", flush=True)
