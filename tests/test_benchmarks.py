"""Smoke tests: each benchmark script's smallest configuration runs and reports well-formed results.

Speed is never asserted here; the figures of such short runs mean nothing.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import (
    compare,
    epoch_boundary,
    epoch_draws,
    feed_vs_queue,
    queue_overhead,
    startup,
    store_scale,
    sweep,
    table_scale,
    video_cold,
    video_decode,
    video_families,
    video_memory,
    video_resize,
)
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
    argv = ["--items", "2000", "--rounds", "2", "--max-len", "4", "--loader-items", "300", "--loader-rounds", "2"]
    report = queue_overhead.main([*argv, "--out", str(tmp_path)])
    assert len(report["telemetry"]["on"]) == len(report["telemetry"]["off"]) == 2
    out = capsys.readouterr().out
    assert "telemetry cost:" in out and "ratio FIFO/Queue" in out
    (result,) = report["results"]
    assert len(result["fifo"]) == len(result["queue"]) == len(result["ratios"]) == 2
    assert all(_finite(x) for x in result["fifo"] + result["queue"])
    assert json.loads((tmp_path / "queue_overhead.json").read_text())["results"][0]["max_len"] == 4


def test_store_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--records", "2000", "--batch", "300", "--puts", "50", "--lookups", "200", "--out", str(tmp_path)]
    report = store_scale.main(argv)
    assert report["wrong"] == 0 and report["bytes"] > 0
    assert all(_finite(report[k]) for k in ("write_s", "put_us", "first_ms", "lookups_s", "threads_s"))
    out = capsys.readouterr().out
    assert "2,000 synthetic records written by 4 processes" in out and "first lookup, ms" in out
    assert (tmp_path / "store_scale.json").exists()


def test_epoch_boundary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--load", "0.004", "--step", "0.001", "--epoch-batches", "4", "--val-batches", "2", "--epochs", "3"]
    report = epoch_boundary.main([*argv, "--rounds", "1", "--out", str(tmp_path)])
    assert set(report["runs"]) == {f"{mode}-{on}" for mode in ("loader", "train", "fit") for on in (False, True)}
    for setting, runs in report["runs"].items():
        if setting.startswith("fit"):  # the loader's wait may be 0 and a first step faster than the median
            assert all(isinstance(x, float) and math.isfinite(x) for run in runs for x in run.values())
            assert all(run["boundary_wait_ms"] >= 0 and run["epochs_per_s"] > 0 for run in runs)
        else:
            assert all(_finite(x) for run in runs for x in run.values())
    assert all("first_step_extra_ms" in run for on in (False, True) for run in report["runs"][f"fit-{on}"])
    assert len(report["fit_bare_first_step_extra_ms"]) == 1
    out = capsys.readouterr().out
    assert "wait at epoch start, ms" in out
    assert all(f"{mode}: boundary wait" in out for mode in ("loader", "train", "fit"))
    assert "fit, wall time: an epoch's first step took" in out
    assert (tmp_path / "epoch_boundary.json").exists()


def test_sweep_latency(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--load", "0.004", "--step", "0.001", "--threads", "1,2", "--batches", "6", "--rounds", "1"]
    report = sweep.main([*argv, "--serial", "--out", str(tmp_path)])
    assert [row["threads"] for row in report["rows"]] == ["serial", "1", "2"]
    for row in report["rows"]:
        assert row["batches"] == 6
        assert 0 <= row["wait_fraction"] <= 1
        assert _finite(row["batches_per_s"]) and _finite(row["efficiency"]) and row["peak_rss_mb"] > 0
    assert len(report["targets"]) >= 2
    captured = capsys.readouterr()
    out = captured.out
    assert "| threads |" in out and "eff steady" in out
    # one progress line per run on stderr (not a terminal here)
    assert [line.split(":")[0] for line in captured.err.splitlines()] == [
        "serial, round 1/1", "1 thread, round 1/1", "2 threads, round 1/1",
    ]  # fmt: skip
    # 6 batches with a 4 ms fill: too short for the fill-included target at N=2, said so rather than MISSED
    fill_target = report["targets"][0]
    assert "not judged at N=2" in fill_target and "use --batches" in fill_target
    assert (tmp_path / "sweep_latency.csv").read_text().startswith("threads,")
    assert (tmp_path / "sweep_latency.png").exists() or "no plot" in out


def test_sweep_auto_is_compared_with_the_fixed_counts(tmp_path: Path) -> None:
    argv = ["--workload", "shift", "--load", "0.002", "--load-after", "0.004", "--step", "0.001", "--batches", "60"]
    report = sweep.main([*argv, "--threads", "1,2,auto", "--rounds", "1", "--no-plot", "--out", str(tmp_path)])
    assert [row["threads"] for row in report["rows"]] == ["1", "2", "auto"]
    auto = report["rows"][-1]
    assert auto["batches"] == 60 and auto["settled_threads"] >= 1
    lines = [line for line in report["targets"] if line.startswith("auto:")]
    assert "of the best fixed N=" in lines[0] and "of the best fixed count's rate from" in lines[1]
    assert "settled on" in lines[3] and "no more threads than needed:" in lines[3]
    assert len(report["runs"]["auto"][0]["batch_starts"]) == 60  # what the rate against the best is judged from


def _latency_row(threads: int, efficiency: float, seconds: float) -> dict:
    return {"threads": str(threads), "efficiency": efficiency, "steady_efficiency": 0.99, "wait_fraction": 0.2,
            "steady_wait_fraction": 0.01, "seconds": seconds}  # fmt: skip


def test_sweep_targets_missed_or_not_judged():
    workload = sweep.Workload("latency", sweep.Sleeper(1, 0.1), lambda b: None, t_load=0.1, t_step=0.02)
    rows = [_latency_row(1, 0.90, 30.0), _latency_row(10, 0.90, 6.0)]
    long_run = sweep.check_targets(workload, rows, batches=300)
    assert long_run[0].startswith("target efficiency >= 0.95 (fill included): MISSED; lowest 0.900")
    assert "not judged" not in " ".join(long_run)
    short_run = sweep.check_targets(workload, rows, batches=10)
    assert short_run[0] == (
        "target efficiency >= 0.95 (fill included): MISSED; lowest 0.900 at N=1; not judged at N=10: with a fill "
        "of T_load = 100 ms, a run of 10 batches is too short to reach the target even without overhead "
        "(use --batches 160 or more)"
    )
    assert short_run[2].startswith("target wait < 5% where N/T_load >= 1/T_step (fill included): not judged at N=10")
    assert short_run[3].startswith("target wait < 5% where N/T_load >= 1/T_step (steady state): met")


def test_benchmarks_run_from_another_folder_with_pythonpath(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = ["--items", "200", "--rounds", "1", "--max-len", "2", "--loader-items", "0", "--out", str(tmp_path / "out")]
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.queue_overhead", *argv],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "run 1/1, max_len 2, round 1/1: FIFOQueue/queue.Queue" in result.stderr
    assert (tmp_path / "out" / "queue_overhead.json").is_file()


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


def test_video_decode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--ucf-videos", "2", "--kinetics-videos", "1", "--ucf-clips", "3", "--kinetics-clips", "2", "--rounds", "1"]
    argv += ["--max-seconds", "1.5", "--clip-len", "4", "--size", "64", "64", "--threads", "1,2"]
    report = video_decode.main([*argv, "--data", str(tmp_path / "data"), "--out", str(tmp_path)])
    assert set(report["sets"]) == {"ucf", "kinetics"}
    for result in report["sets"].values():
        assert result["seekable"] == result["videos"]
        readers = result["results"]
        assert {"parallel_loader", "opencv-seek", "grab-from-start", "pyav"} <= set(readers)
        for reader in readers.values():
            assert all(_finite(x) for rates in reader["clips_per_s"].values() for x in rates)
            assert reader["exact"] is not None and 0 <= reader["exact"] <= result["clips"]
        assert readers["parallel_loader"]["exact"] == readers["grab-from-start"]["exact"] == result["clips"]
    out = capsys.readouterr().out
    assert "| parallel_loader |" in out and "target every clip exact: met" in out
    assert ("decord2 is not installed" in out) == (importlib.util.find_spec("decord") is None)
    assert json.loads((tmp_path / "video_decode.json").read_text())["sets"]["ucf"]["videos"] == 2


def test_video_cold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--ucf-videos", "2", "--kinetics-videos", "1", "--rounds", "1", "--max-seconds", "1.5", "--clip-len", "4"]
    argv += ["--size", "32", "32", "--threads", "1", "--readers", "parallel_loader", "grab-from-start", "limit"]
    report = video_cold.main([*argv, "--data", str(tmp_path / "data"), "--out", str(tmp_path)])
    assert set(report["sets"]) == {"ucf", "kinetics"}
    for result in report["sets"].values():
        readers = result["results"]
        assert set(readers) == {"parallel_loader", "grab-from-start", "limit"}
        for reader in readers.values():
            assert _finite(reader["first"]["1"]) and _finite(reader["second"]["1"])
            assert reader["exact"] == f"{result['videos']}/{result['videos']}"
    out = capsys.readouterr().out
    assert "| parallel_loader |" in out and "|           limit |" in out
    assert "CPU per clip <= 1.3x the limit at 1 thread(s)" in out
    assert "the limit in the same process" in out
    runs = report["sets"]["ucf"]["results"]["parallel_loader"]["runs"]["1"]
    assert _finite(runs[0]["paired_limit_first_cpu_ms"]) and _finite(runs[0]["paired_limit_second_cpu_ms"])
    assert json.loads((tmp_path / "video_cold.json").read_text())["sets"]["ucf"]["videos"] == 2


def test_video_cold_gil(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--gil``: each reader's GIL per clip, sampled by py-spy; a clear error where py-spy is missing."""
    argv = ["--sets", "ucf", "--ucf-videos", "2", "--rounds", "1", "--max-seconds", "1.5", "--clip-len", "4"]
    argv += ["--size", "32", "32", "--threads", "1", "--readers", "parallel_loader", "--no-exact", "--gil"]
    argv += ["--data", str(tmp_path / "data"), "--out", str(tmp_path)]
    if not (shutil.which("py-spy") or Path(sys.executable).with_name("py-spy").exists()):
        with pytest.raises(RuntimeError, match="py-spy is not installed"):
            video_cold.main(argv)
        return
    run = video_cold.main(argv)["sets"]["ucf"]["results"]["parallel_loader"]["runs"]["1"][0]
    assert run["first_gil_ms"] > 0 and run["second_gil_ms"] >= 0
    assert "GIL held by the reader threads, ms per clip" in capsys.readouterr().out


def test_video_families(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--families", "h264-ts", "mpeg2-ps", "--seconds", "2", "--clips", "2", "--rounds", "1", "--clip-len", "4"]
    report = video_families.main([*argv, "--data", str(tmp_path / "data"), "--out", str(tmp_path)])
    assert set(report["families"]) == {"h264-ts", "mpeg2-ps"}
    for result in report["families"].values():
        assert result["seekable"] and result["frames"] == 50
        ours = result["results"]["parallel_loader"]
        assert ours["right"] == result["exact"] == result["clips"] == 3 and ours["error"] is None
        assert _finite(ours["ms_per_clip"]) and _finite(result["late_ratio"])
    out = capsys.readouterr().out
    assert " h264-ts |" in out and " mpeg2-ps |" in out
    assert "target mpeg2-ps late clip <= 0.3x from frame 0:" in out
    assert ("decord2 is not installed" in out) == (importlib.util.find_spec("decord") is None)


def test_video_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--videos", "2", "--seconds", "1", "--clips", "1", "--rounds", "1", "--clip-len", "4", "--size", "32", "32"]
    report = video_memory.main([*argv, "--data", str(tmp_path / "data"), "--out", str(tmp_path)])
    for codec in ("h264-mp4", "xvid-avi"):
        result = report["codecs"][codec]
        assert result["exact"] == dict.fromkeys(("loose", "bytes", "BytesIO", "shard"), "4/4")
        assert all(_finite(ms) for phase in ("warm", "first touch") for ms in result[phase].values())
    out = capsys.readouterr().out
    assert "| h264-mp4 |" in out and "shard" in out and "same clips" in out
    assert json.loads((tmp_path / "video_memory.json").read_text())["codecs"]["xvid-avi"]["exact"]["shard"] == "4/4"


def test_video_resize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--files", "2", "--seconds", "0.4", "--rounds", "1", "--clip-len", "4", "--size", "32", "32"]
    report = video_resize.main([*argv, "--data", str(tmp_path / "data"), "--out", str(tmp_path)])
    assert set(report["medians"]) == {f"{v} {p}" for v in video_resize.VARIANTS for p in video_resize.PASSES}
    assert all(_finite(value) for value in report["medians"].values())
    out = capsys.readouterr().out
    assert "| short_side |" in out and "|      scale |" in out


def test_startup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = startup.main(["--rows", "500", "--rounds", "1", "--out", str(tmp_path)])
    run = results["500"]
    assert run["opened"][0] == 0 and run["opened"][1] > 0  # nothing opened constructing; the first batch reads
    assert all(_finite(float(run["medians"][key])) for key in ("construct_s", "pickle_mb", "first_batch_s"))
    assert " 500 |" in capsys.readouterr().out
    assert json.loads((tmp_path / "startup.json").read_text())["results"]["500"]["opened"][0] == 0


def test_epoch_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = epoch_draws.main(["--rows", "2000", "--rounds", "1", "--out", str(tmp_path)])
    runs = results["2000"]
    assert set(runs) == set(epoch_draws.MODES) and runs["2x epoch"]["positions"] == 4000
    assert runs["balanced"]["rarest_share"] > runs["shuffle"]["rarest_share"]  # 1 row of 2,000 against 1 class of 400
    assert all(_finite(run["draw_ms"]) and _finite(run["pickle_mb"]) for run in runs.values())
    assert "| 2,000 | balanced |" in capsys.readouterr().out
    assert set(json.loads((tmp_path / "epoch_draws.json").read_text())["results"]["2000"]) == set(epoch_draws.MODES)


def test_table_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = table_scale.main(["--rows", "2000", "--kinds", "parquet", "--out", str(tmp_path)])
    run = results["parquet 2000"]
    assert run["opened"] == 0 and run["samples"] == 2000  # the table's rows, and no video opened
    assert len(run["big_workers"]["after"]["rss"]) == 2 and all(_finite(v) for v in run["big_workers"]["after"]["rss"])
    assert "| parquet |" in capsys.readouterr().out
    assert (tmp_path / "table_scale.json").exists()


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


def test_autotune_lines_judge_auto_against_the_best_fixed_count() -> None:
    fixed = [{"threads": "8", "batches_per_s": 100.0}, {"threads": "16", "batches_per_s": 98.0}]
    auto = {"threads": "auto", "batches_per_s": 90.0, "final_batches_per_s": 95.0, "reached_95_at": 5.0,
            "settled_threads": 12.0, "max_threads_seen": 20.0, "reached_95_after_middle": float("nan")}  # fmt: skip
    slow_then_fast = [i / 50 for i in range(20)] + [0.4 + i / 100 for i in range(280)]  # 50/s, then 100/s
    never = [i / 50 for i in range(300)]  # 50/s throughout
    lines = sweep.autotune_lines([*fixed, auto], [{"batch_starts": slow_then_fast}], 300)
    assert "= 0.900 of the best fixed N=8" in lines[0] and lines[0].endswith("MISSED")
    assert "from batch 19 " in lines[1] and lines[1].endswith("met")  # 20 batches from 19 on at 95/s; 10% is 30
    assert "smallest fixed N within 5% of the best: 8" in lines[3] and lines[3].endswith("MISSED")  # 12 > 8
    lines = sweep.autotune_lines([*fixed, auto], [{"batch_starts": never}], 300)
    assert "no batch in 1 of 1 rounds" in lines[1] and lines[1].endswith("MISSED")
