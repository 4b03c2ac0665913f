"""Smoke tests of the process-mode benchmark scripts: their smallest configurations run and report.

Speed is never asserted here; the figures of such short runs mean nothing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import process_faults, processes

pytestmark = pytest.mark.timeout(120)


def _finite(values: list[float]) -> bool:
    return bool(values) and all(math.isfinite(v) and v > 0 for v in values)


def test_processes_gil_and_transfer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "processes.json"
    argv = ["--workload", "gil", "--rounds", "1", "--batches", "6", "--call-ms", "1", "--out", str(out)]
    report = processes.main(argv)
    assert {"serial loop", "DataLoader, 2 threads", "DataLoader, processes=2, num_threads=1"} <= set(report["gil"])
    assert all(_finite(r["steady"]) for r in report["gil"].values())
    argv = ["--workload", "transfer", "--rounds", "1", "--mb", "0.1", "--transfers", "3", "--out", str(out)]
    report = processes.main(argv)
    assert set(report["transfer"]["0.1"]) == {"pickle through a pipe", "shared memory", "DataLoader, processes=1"}
    assert all(_finite(r["steady"]) for r in report["transfer"]["0.1"].values())
    printed = capsys.readouterr().out
    assert "vs serial loop" in printed and "vs pickle through a pipe" in printed
    assert "transfer" in json.loads(out.read_text())


def test_process_faults_campaign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = process_faults.main(["--runs", "4", "--seed", "3", "--out", str(tmp_path / "faults.json")])
    assert len(report["runs"]) == 4
    assert all(run["problems"] == [] for run in report["runs"]), report["runs"]
    assert "0 hangs" in capsys.readouterr().out
