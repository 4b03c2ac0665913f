"""A sweep's verdicts: the latency workload's targets, and how the auto row compares with the fixed counts.

A target the run is too short to reach even without overhead is "not judged",
with the batches it would need, rather than missed. The module judges rows and
returns lines; it prints nothing and measures nothing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from .measure import reached
from .workloads import Workload, ideal

__all__ = ["autotune_lines", "check_targets"]


def check_targets(workload: Workload, rows: list[dict[str, Any]], batches: int) -> list[str]:
    """The latency workload's targets, met, missed, or not judged; nothing for the other workloads.

    A fill-included target that even a run without any overhead could not reach
    in ``batches`` batches at some N (the first batch cannot come before one
    ``T_load``) is not judged there: the line says so, and how many batches it
    needs, instead of "MISSED".
    """
    if workload.name != "latency":
        return []
    lines = []
    threaded = [r for r in rows if r["threads"] not in ("serial", "auto")]

    def too_short_for_efficiency(n: int, row: dict[str, Any]) -> bool:
        return _best_efficiency(workload, int(row["threads"]), n) < 0.95

    def too_short_for_wait(n: int, row: dict[str, Any]) -> bool:
        # The consumer waits at least T_load for the first batch, whatever the loader does.
        return workload.t_load * ideal(workload, int(row["threads"])) / n >= 0.05

    for key, label in (("efficiency", "fill included"), ("steady_efficiency", "steady state")):
        short = too_short_for_efficiency if key == "efficiency" else None
        judged, unjudged = _split(threaded, short, batches)
        line = f"target efficiency >= 0.95 ({label}): "
        if judged:
            worst = min(judged, key=lambda r: r[key])
            verdict = "met" if worst[key] >= 0.95 else "MISSED"
            line += f"{verdict}; lowest {worst[key]:.3f} at N={worst['threads']}"
        lines.append(line + _not_judged(workload, unjudged, short, batches, bool(judged)))
    fed = [r for r in threaded if int(r["threads"]) / workload.t_load >= 1 / workload.t_step - 1e-9]
    if fed:
        for key, label in (("wait_fraction", "fill included"), ("steady_wait_fraction", "steady state")):
            short = too_short_for_wait if key == "wait_fraction" else None
            judged, unjudged = _split(fed, short, batches)
            line = f"target wait < 5% where N/T_load >= 1/T_step ({label}): "
            if judged:
                worst = max(judged, key=lambda r: r[key])
                verdict = "met" if worst[key] < 0.05 else "MISSED"
                line += f"{verdict}; highest {100 * worst[key]:.1f}% at N={worst['threads']}"
            lines.append(line + _not_judged(workload, unjudged, short, batches, bool(judged)))
    return lines


def autotune_lines(rows: list[dict[str, Any]], auto_runs: list[dict[str, Any]], batches: int) -> list[str]:
    """How the auto row compares with the best fixed count of the same run (nothing without one).

    ``auto_runs`` are the auto rounds, with their batches' start times: the run reached the
    best fixed count's rate at the first batch from which it ran at 95% of it (``reached``).
    """
    auto = next((r for r in rows if r["threads"] == "auto"), None)
    fixed = [r for r in rows if r["threads"] not in ("serial", "auto")]
    if auto is None or not fixed:
        return []
    best = max(fixed, key=lambda r: r["batches_per_s"])
    near_best = [r for r in fixed if r["batches_per_s"] >= 0.95 * best["batches_per_s"]]
    near = min(near_best, key=lambda r: int(r["threads"]))
    ratio = auto["batches_per_s"] / best["batches_per_s"]
    limit = batches // 10
    reaches = [reached(run["batch_starts"], 0.95 * best["batches_per_s"]) for run in auto_runs]
    reach = statistics.median(reaches)  # NaN (never) sorts unreliably: count them apart
    never = sum(math.isnan(x) for x in reaches)
    reach_text = f"batch {reach:.0f}" if not never else f"no batch in {never} of {len(reaches)} rounds"
    if not never:
        reach_text += f" (rounds: {', '.join(f'{x:.0f}' for x in reaches)})"
    own = auto["reached_95_at"]
    settled, smallest = auto["settled_threads"], int(near["threads"])
    lines = [
        f"auto: {auto['batches_per_s']:.2f} batches/s = {ratio:.3f} of the best fixed N={best['threads']} "
        f"({best['batches_per_s']:.2f}); target >= 0.95: {'met' if ratio >= 0.95 else 'MISSED'}",
        f"auto: ran at 95% of the best fixed count's rate from {reach_text}; target within the first {limit}: "
        f"{'met' if not never and reach <= limit else 'MISSED'}",
        f"auto: reached 95% of its own final rate ({auto['final_batches_per_s']:.1f}/s) at batch {own:.0f} "
        "(median of rounds)",
        f"auto: settled on {settled:.0f} threads (at most {auto['max_threads_seen']:.0f}); smallest fixed N "
        f"within 5% of the best: {smallest}; no more threads than needed: {'met' if settled <= smallest else 'MISSED'}",
    ]
    if not math.isnan(auto["reached_95_after_middle"]):
        lines.append(f"auto: after the middle of the run, reached 95% of the final rate "
                     f"{auto['reached_95_after_middle']:.0f} batches later")  # fmt: skip
    return lines


def _best_efficiency(workload: Workload, threads: int, batches: int) -> float:
    """The fill-included efficiency of a run with no overhead at all: the most a run of ``batches`` can reach."""
    ideal_rate = ideal(workload, threads)
    fastest = max(
        batches / ideal_rate,  # never faster than the ideal rate
        workload.t_load + batches * workload.t_step,  # every step comes after the first batch
        math.ceil(batches / threads) * workload.t_load + workload.t_step,  # waves of N loads
    )
    return batches / ideal_rate / fastest


def _split(
    rows: list[dict[str, Any]], too_short: Callable[[int, dict[str, Any]], bool] | None, batches: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows a target can be judged on in a run of ``batches``, and those it cannot."""
    if too_short is None:
        return rows, []
    return [r for r in rows if not too_short(batches, r)], [r for r in rows if too_short(batches, r)]


def _not_judged(
    workload: Workload,
    rows: list[dict[str, Any]],
    too_short: Callable[[int, dict[str, Any]], bool] | None,
    batches: int,
    after: bool,
) -> str:
    if not rows:
        return ""
    needed = batches
    while needed < 10**6 and any(too_short(needed, r) for r in rows):
        needed *= 2
    where = ",".join(r["threads"] for r in rows)
    return (
        f"{'; ' if after else ''}not judged at N={where}: with a fill of T_load = {workload.t_load * 1e3:g} ms, "
        f"a run of {batches} batches is too short to reach the target even without overhead "
        f"(use --batches {needed} or more)"
    )
