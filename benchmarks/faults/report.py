"""The campaign's summary: counts per fault, each failure's record, and the table printed.

It reads outcomes and knows nothing of how they were produced.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from .._common import format_table
from .config import Outcome

__all__ = ["failure_record", "summarize", "summary_table"]


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    """Counts per fault and in total: runs, runs ended by an error, epochs completed, and the runs that failed."""
    by_fault: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = by_fault.setdefault(
            o.config.fault, {"runs": 0, "ended_with_error": 0, "epochs": 0, "wrong": 0, "leaked": 0, "lost": 0}
        )
        row["runs"] += 1
        row["ended_with_error"] += o.exception is not None
        row["epochs"] += o.completed_epochs
        row["wrong"] += o.wrong_exception is not None
        row["leaked"] += bool(o.leaked)
        row["lost"] += bool(o.lost)
    total = {key: sum(row[key] for row in by_fault.values()) for key in next(iter(by_fault.values()), {})}
    return {"runs": len(outcomes), "hangs": 0, "by_fault": by_fault, "total": total}


def failure_record(o: Outcome) -> dict[str, Any]:
    """What the report keeps of a failed run: its configuration (to replay it) and what went wrong."""
    return {
        "config": asdict(o.config),
        "exception": o.exception,
        "wrong_exception": o.wrong_exception,
        "leaked": o.leaked,
        "lost": o.lost,
        "where": o.where,
    }


def summary_table(summary: dict[str, Any]) -> str:
    """``summarize``'s counts as the Markdown table the campaign prints: a row per fault, then "all"."""
    rows = [
        [fault, r["runs"], r["ended_with_error"], r["epochs"], 0, r["leaked"], r["wrong"], r["lost"]]
        for fault, r in sorted(summary["by_fault"].items())
    ]
    t = summary["total"]
    rows.append(["all", t["runs"], t["ended_with_error"], t["epochs"], 0, t["leaked"], t["wrong"], t["lost"]])
    headers = ["fault", "runs", "ended by an error", "epochs completed", "hangs", "leaked threads",
               "wrong exceptions", "lost or duplicated"]  # fmt: skip
    return format_table(headers, rows)
