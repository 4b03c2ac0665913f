"""A sweep's PNG: batches/s and efficiency against the thread count, when matplotlib is installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .workloads import Workload

__all__ = ["plot"]


def plot(workload: Workload, rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Save batches/s and efficiency against threads as a PNG; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    threaded = [r for r in rows if r["threads"] not in ("serial", "auto")]
    n = [int(r["threads"]) for r in threaded]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(n, [r["batches_per_s"] for r in threaded], "o-", label="measured (fill included)")
    ax1.plot(n, [r["steady_batches_per_s"] for r in threaded], "s--", label="measured (steady)")
    ax1.plot(n, [r["ideal_batches_per_s"] for r in threaded], "k:", label="ideal min(N/T_load, 1/T_step)")
    ax1.set(xscale="log", xlabel="loader threads N", ylabel="batches/s", title=f"{workload.name}: throughput")
    ax1.set_xticks(n, [str(x) for x in n])
    ax1.legend(fontsize=8)
    ax2.plot(n, [r["efficiency"] for r in threaded], "o-", label="efficiency (fill included)")
    ax2.plot(n, [r["steady_efficiency"] for r in threaded], "s--", label="efficiency (steady)")
    ax2.plot(n, [r["wait_fraction"] for r in threaded], "^-", label="consumer wait fraction")
    ax2.set(xscale="log", xlabel="loader threads N", ylim=(0, 1.1), title="efficiency and wait")
    ax2.set_xticks(n, [str(x) for x in n])
    ax2.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
