"""The rehearsal's tables: a row per run, peak memory against the plan's and seconds per phase."""
from __future__ import annotations

import math

PHASES = ("rollout", "scoring forward", "backward", "optimizer", "evaluation")


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
