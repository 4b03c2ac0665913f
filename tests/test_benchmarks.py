"""Smoke tests: each benchmark script's smallest configuration runs and reports well-formed results.

Speed is never asserted here; the figures of such short runs mean nothing.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from benchmarks import compare, feed_vs_queue, queue_overhead, sweep
from benchmarks._workloads import REPO

HAS_TORCH = importlib.util.find_spec("torch") is not None
VIDEO_ARGS = ["--batch-size", "2", "--clip-len", "4", "--size", "32", "32", "--classes", "2", "--per-class", "3"]


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sample video set: 2 classes x 3 videos."""
    from parallel_loader.sample_data import main as make_sample_data

    root = tmp_path_factory.mktemp("videos")
    assert make_sample_data([str(root), "--classes", "2", "--per-class", "3"]) == 0
    return root


def _finite(value: float) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_queue_overhead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = queue_overhead.main(["--items", "2000", "--rounds", "2", "--max-len", "4", "--out", str(tmp_path)])
    (result,) = report["results"]
    assert len(result["fifo"]) == len(result["queue"]) == len(result["ratios"]) == 2
    assert all(_finite(x) for x in result["fifo"] + result["queue"])
    assert "ratio FIFO/Queue" in capsys.readouterr().out
    assert json.loads((tmp_path / "queue_overhead.json").read_text())["results"][0]["max_len"] == 4


def test_sweep_latency(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--load", "0.004", "--step", "0.001", "--threads", "1,2", "--batches", "6", "--rounds", "1"]
    report = sweep.main([*argv, "--serial", "--out", str(tmp_path)])
    assert [row["threads"] for row in report["rows"]] == ["serial", "1", "2"]
    for row in report["rows"]:
        assert row["batches"] == 6
        assert 0 <= row["wait_fraction"] <= 1
        assert _finite(row["batches_per_s"]) and _finite(row["efficiency"]) and row["peak_rss_mb"] > 0
    assert len(report["targets"]) >= 2
    out = capsys.readouterr().out
    assert "| threads |" in out and "eff steady" in out
    assert (tmp_path / "sweep_latency.csv").read_text().startswith("threads,")
    assert (tmp_path / "sweep_latency.png").exists() or "no plot" in out


def test_sweep_decode(tmp_path: Path, videos: Path) -> None:
    argv = ["--workload", "decode", "--threads", "1,2", "--batches", "3", "--rounds", "1", "--calibrate", "1"]
    report = sweep.main([*argv, "--data", str(videos), *VIDEO_ARGS, "--no-plot", "--out", str(tmp_path)])
    assert [row["threads"] for row in report["rows"]] == ["1", "2"]
    assert all(row["batches"] == 3 and _finite(row["steady_efficiency_cores"]) for row in report["rows"])


@pytest.mark.skipif(
    not (REPO / "examples" / "video_model.py").is_file(), reason="examples/video_model.py (branch video) is not merged"
)
def test_sweep_train(tmp_path: Path, videos: Path) -> None:
    argv = ["--workload", "train", "--threads", "1", "--batches", "2", "--rounds", "1", "--calibrate", "1"]
    video_args = [*VIDEO_ARGS, "--clip-len", "8"]  # the model pools time twice by 2 after a difference
    report = sweep.main([*argv, "--data", str(videos), *video_args, "--no-plot", "--out", str(tmp_path)])
    assert [row["threads"] for row in report["rows"]] == ["serial", "1"]
    assert report["t_step"] > 0


def test_compare(tmp_path: Path, videos: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loaders = ["serial", "parallel_loader", "tf.data", "keras-threads"] + (["torch"] if HAS_TORCH else [])
    argv = ["--threads", "1", "--batches", "2", "--rounds", "1", "--loaders", *loaders]
    report = compare.main([*argv, "--data", str(videos), *VIDEO_ARGS, "--out", str(tmp_path)])
    assert {r["loader"] for r in report["results"].values()} == set(loaders)
    for result in report["results"].values():
        # 2 batches of 2 clips; the first batch is left out of the steady rate.
        assert len(result["clips_per_s"]) == 1 and _finite(result["clips_per_s"][0])
    assert report["results"]["parallel_loader/1"]["ratio_to_parallel_loader"] == 1.0
    assert "ratio to parallel_loader" in capsys.readouterr().out


def test_feed_vs_queue(tmp_path: Path) -> None:
    argv = ["--steps", "8", "--calibrate", "3", "--augment-rounds", "2", "--out", str(tmp_path)]
    report = feed_vs_queue.main(argv)
    assert set(report["results"]) == {"light", "heavy"}
    for result in report["results"].values():
        assert _finite(result["t_load"]) and _finite(result["t_step"]) and result["ideal"] >= 1
        assert len(result["feed_seconds"]) == len(result["queue_seconds"]) == 1


FAKE_NVIDIA_SMI = """#!/bin/sh
# The lines nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used --format=csv,noheader,nounits prints.
echo "0, NVIDIA H100 80GB HBM3, 40, 1000"
echo "1, NVIDIA A100-SXM4-40GB, 5, 10"
echo "0, NVIDIA H100 80GB HBM3, 60, 3000"
echo "0, NVIDIA H100 80GB HBM3, [N/A], 3000"
echo "0, NVIDIA H100 80GB HBM3, 80, 2000"
touch "$(dirname "$0")/printed"
exec sleep 60
"""


def test_gpu_sampler_reads_nvidia_smi_lines(tmp_path: Path) -> None:
    import time

    from benchmarks.gpu_sampler import GpuSampler

    fake = tmp_path / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI)
    fake.chmod(0o755)
    assert GpuSampler.available(str(fake)) and not GpuSampler.available(str(tmp_path / "missing"))
    with GpuSampler(interval=0.1, command=str(fake)) as sampler:
        deadline = time.monotonic() + 10
        while not (tmp_path / "printed").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    summary = sampler.summary()
    assert summary[0] == {
        "name": "NVIDIA H100 80GB HBM3",
        "samples": 3,
        "util_median": 60.0,
        "util_mean": 60.0,
        "util_max": 80.0,
        "memory_max_mib": 3000.0,
    }
    assert summary[1]["samples"] == 1 and summary[1]["util_max"] == 5.0
    assert sampler.errors == ["0, NVIDIA H100 80GB HBM3, [N/A], 3000"]  # kept, not counted
