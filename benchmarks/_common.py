"""Helpers shared by the benchmark scripts: options, statistics, progress, tables, output files.

Every script builds its parser with ``make_parser`` and ``add_out_argument``,
prints its results with ``format_table`` and writes them with ``write_report``
(or ``write_json`` for a report of its own shape), so that a script holds only
what it measures. Measuring a run's resources is ``_resources``'s. The module
knows nothing of any one benchmark's workload.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from tqdm import tqdm

from parallel_loader.train._progress import BAR, LINE, progress_mode

__all__ = [
    "DEFAULT_OUT",
    "RunProgress",
    "add_noise_arguments",
    "add_out_argument",
    "add_output_arguments",
    "Spread",
    "format_table",
    "machine_info",
    "make_parser",
    "parse_ints",
    "spread",
    "write_csv",
    "write_json",
    "write_report",
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


def make_parser(doc: str | None, prog: str | None = None) -> argparse.ArgumentParser:
    """A script's parser, described by the first paragraph of its docstring ``doc``.

    ``prog`` names the command in the usage line; a script that is a package gives
    it, since its ``__main__.py`` would name it otherwise.
    """
    return argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])


def add_out_argument(parser: argparse.ArgumentParser, default: Path = DEFAULT_OUT, help: str | None = None) -> None:
    """``--out``: the folder the script writes its results to (``DEFAULT_OUT`` unless ``default``)."""
    parser.add_argument("--out", type=str, default=str(default), help=help)


def add_noise_arguments(parser: argparse.ArgumentParser) -> None:
    """``--quiet``: how long to wait before each run for the neighbours to calm down."""
    parser.add_argument(
        "--quiet",
        type=float,
        default=0.0,
        help="before each run wait up to this many seconds while other processes use >= 40%% CPU (0: don't wait)",
    )


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--progress/--no-progress`` and ``--verbose``, as the example scripts have them."""
    from ._workloads import load_example

    load_example("example_options").add_output_arguments(parser)


class RunProgress:
    """Progress over a script's runs, on stderr: a tqdm bar on a terminal, one line per run elsewhere.

    Args:
        total: the number of runs.
        progress: ``None`` (choose by the terminal), True (a bar) or False (nothing).
    """

    def __init__(self, total: int, progress: bool | None) -> None:
        mode = progress_mode(progress)
        self.total = total
        self._done = 0
        self._lines = mode == LINE
        self._bar = _Bar(total=total, desc="runs", unit="run", file=sys.stderr) if mode == BAR else None

    def done(self, label: str, result: str) -> None:
        """One more run ended: ``label`` says which, ``result`` what it measured."""
        self._done += 1
        if self._bar is not None:
            self._bar.set_postfix_str(f"{label}: {result}", refresh=False)
            self._bar.update()
        elif self._lines:
            print(f"run {self._done}/{self.total}, {label}: {result}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Bar(tqdm):
    monitor_interval = 0  # no tqdm monitor thread: it would outlive the run


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
        fields = list(dict.fromkeys(key for row in rows for key in row))  # rows may have columns of their own
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as indented JSON to ``path`` (parents created) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def write_report(
    args: argparse.Namespace, name: str, fields: dict[str, Any], machine: dict[str, str] | None = None, say: bool = True
) -> dict[str, Any]:
    """Write ``{"args", "machine", **fields}`` to ``<args.out>/<name>.json`` and return it.

    ``machine`` is ``machine_info()`` unless given; with ``say`` the script prints
    ``wrote PATH``, as most scripts do after their tables.
    """
    report = {"args": vars(args), "machine": machine_info() if machine is None else machine, **fields}
    path = write_json(Path(args.out) / f"{name}.json", report)
    if say:
        print(f"wrote {path}")
    return report


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


def run_job(module: str, job: dict[str, Any], what: str, timeout: float, env: dict[str, str] | None = None) -> Any:
    """Run ``python -m MODULE --job JSON`` in a fresh process and return the JSON its last line prints.

    ``what`` names the run in the error raised when it fails; ``env`` is added to this process's environment.
    """
    done = subprocess.run(
        [sys.executable, "-m", module, "--job", json.dumps(job)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ | (env or {}),
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])
