"""Smoke tests of the process-mode benchmark scripts: their smallest configurations run and report.

Speed is never asserted here; the figures of such short runs mean nothing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import host_scale, process_faults, processes

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
    report = process_faults.main(["--runs", "6", "--seed", "3", "--splits", "--out", str(tmp_path / "faults.json")])
    assert len(report["runs"]) == 6
    assert all(run["problems"] == [] for run in report["runs"]), report["runs"]
    # The seed draws runs with processes="auto" and forced splits. Whether a split comes before a short run's last
    # batch depends on timing: tests/test_gil_split.py checks splits themselves, the campaign's 100 runs their faults.
    assert any(run["split"] for run in report["runs"])
    assert "0 hangs" in capsys.readouterr().out


def test_host_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--parts", "tax", "sweep", "start", "--rounds", "1", "--videos", "3", "--max-seconds", "1"]
    argv += ["--clip-len", "2", "--size", "16", "16"]
    argv += ["--batch-size", "1", "--batches", "3", "--sweep-batches", "2", "--skip", "1", "--keras-epochs", "1"]
    argv += ["--threads", "1", "--processes", "1", "--sweep-cores", "1", "--first-import", "json"]
    argv += ["--data", str(tmp_path / "data"), "--out", str(tmp_path)]
    report = host_scale.main(argv)
    tax = report["tax"]["results"]
    assert {"batches in memory", "1 thread(s) in the trainer", "1 process(es) x 1 thread(s)"} < set(tax)
    assert all(_finite([r["clips_s"], r["step_ms"]]) for runs in tax.values() for r in runs)
    # The process's CPU time comes in 10 ms ticks: 3 short steps from memory may read none.
    assert all(r["cpu_ms_per_clip"] >= 0 for runs in tax.values() for r in runs)
    assert all(_finite([runs[0]["steps_s"]]) for runs in report["keras"]["results"].values())
    assert {"0 x 1", "1 x 1"} < set(report["sweep"]["results"])
    start = report["start"]["results"]
    assert set(start) == {"this tree, trivial", "this tree, video"}
    assert all(runs[0]["tensorflow"] == 0 and _finite([runs[0]["max_rss_mb"]]) for runs in start.values())
    assert start["this tree, trivial"][0]["workers"] == 2
    printed = capsys.readouterr().out
    assert "## The trainer's tax" in printed and "## Sweep on" in printed and "## Worker start" in printed
    assert "target no worker imports TensorFlow: met" in printed  # the script imports json first here
    assert json.loads((tmp_path / "host_scale.json").read_text())["start"]["targets"]
