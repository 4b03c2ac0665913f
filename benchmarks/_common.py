"""Helpers shared by the benchmark scripts: statistics, resource sampling, tables, output files."""

from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

__all__ = [
    "DEFAULT_OUT",
    "ResourceSampler",
    "Spread",
    "format_table",
    "machine_info",
    "parse_ints",
    "spread",
    "write_csv",
    "write_json",
]

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Spread:
    """The median and range of repeated measurements."""

    median: float
    low: float
    high: float

    def fmt(self, digits: int = 1) -> str:
        """``median (min-max)`` with ``digits`` decimals."""
        return f"{self.median:,.{digits}f} ({self.low:,.{digits}f}-{self.high:,.{digits}f})"

    def __str__(self) -> str:
        return self.fmt(1)


def spread(values: Iterable[float]) -> Spread:
    """Median, min and max of ``values`` (at least one)."""
    values = list(values)
    return Spread(statistics.median(values), min(values), max(values))


def parse_ints(text: str) -> list[int]:
    """Parse ``"1,2,4"`` into ``[1, 2, 4]``."""
    return [int(part) for part in text.split(",") if part.strip()]


class ResourceSampler:
    """Samples this process's CPU % and resident memory in a background thread.

    Use as a context manager around the measured run. ``cpu_percent`` is the mean
    over the run (100 = one core busy), computed from the process's CPU times at
    both ends; ``cpu_samples`` holds the ``psutil`` samples taken every ``interval``
    seconds, and ``peak_rss`` the largest resident set size seen (bytes).
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.cpu_samples: list[float] = []
        self.peak_rss = 0
        self.cpu_percent = 0.0
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ResourceSampler", daemon=True)

    def __enter__(self) -> ResourceSampler:
        self._process.cpu_percent(None)  # the first call only sets the baseline
        self.peak_rss = self._process.memory_info().rss
        self._t0 = time.perf_counter()
        self._cpu0 = self._cpu_seconds()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        wall = time.perf_counter() - self._t0
        self.peak_rss = max(self.peak_rss, self._process.memory_info().rss)
        self.cpu_percent = 100.0 * (self._cpu_seconds() - self._cpu0) / wall if wall > 0 else 0.0

    def _cpu_seconds(self) -> float:
        times = self._process.cpu_times()
        return times.user + times.system

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.cpu_samples.append(self._process.cpu_percent(None))
            self.peak_rss = max(self.peak_rss, self._process.memory_info().rss)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, so that the README can copy what a script printed."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return str(value)


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Write dict rows to ``path`` (parents created) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as indented JSON to ``path`` (parents created) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def machine_info() -> dict[str, str]:
    """Cores, CPU model, memory and library versions, for the README."""
    info = {
        "python": platform.python_version(),
        "cores": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "memory": f"{psutil.virtual_memory().total / 2**30:.0f} GiB",
    }
    for name, dist in (
        ("numpy", "numpy"),
        ("opencv", "opencv-python-headless"),
        ("tensorflow", "tensorflow"),
        ("keras", "keras"),
        ("torch", "torch"),
    ):
        info[name] = _version(dist)
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str:
    """The installed version of a distribution, read from its metadata without importing it."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
