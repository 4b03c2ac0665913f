"""Two real workers (MultiWorkerMirroredStrategy on 127.0.0.1) for a few steps, and the launcher's reaping."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import load_example

# Two TensorFlow processes start, agree on a cluster and train: 17 s of CPU, which took 181 s at a load of
# 14-17 on 2 cores. The launcher's bound stays below pytest's, so the launcher reaps the workers itself.
LAUNCH_TIMEOUT = 300  # seconds


launcher = load_example("launch_multiworker")


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 classes x 5 videos: 8 for training, 2 for validation."""
    from parallel_loader.sample_data import main as make_sample_data

    root = tmp_path_factory.mktemp("videos")
    assert make_sample_data([str(root), "--classes", "2", "--per-class", "5"]) == 0
    return root


@pytest.mark.timeout(LAUNCH_TIMEOUT + 60)
def test_two_workers_read_disjoint_shards_that_cover_each_epoch_and_end_with_the_same_weights(videos, tmp_path):
    lines: list[str] = []
    args = ["--data", str(videos), "--epochs", "2", "--batch-size", "4", "--clip-len", "4", "--stride", "1"]
    args += ["--size", "16", "16", "--threads", "1", "--intra-op", "1"]
    try:
        reports = launcher.run_workers(args, 2, tmp_path, LAUNCH_TIMEOUT, lines.append)
    except launcher.WorkerFailed as exc:
        pytest.fail(f"{exc}\n" + "\n".join(lines[-30:]))
    assert [r["worker"] for r in reports] == [0, 1]
    total = reports[0]["batches_per_epoch"]
    assert total == 4  # 8 training videos in batches of 2 (4 global, 2 replicas)
    for epoch in ("0", "1"):
        shards = [r["read"][epoch] for r in reports]
        assert [len(s) for s in shards] == [2, 2]
        assert sorted(shards[0] + shards[1]) == list(range(total))  # disjoint and covering
    assert reports[0]["read"] != reports[1]["read"]
    assert reports[0]["clips"] == reports[1]["clips"] == 2 * 2 * 2
    weights = [np.load(r["weights"]) for r in reports]
    assert weights[0].files and weights[0].files == weights[1].files
    for name in weights[0].files:
        np.testing.assert_array_equal(weights[0][name], weights[1][name])
    ok, summary = launcher.check(reports)
    assert ok, summary
    assert summary[-1].startswith("weights: identical on all 2 workers")
    assert any(line.startswith("[worker 1] ") for line in lines)


FAKE_WORKER = """
import json, os, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
report = sys.argv[sys.argv.index("--report") + 1]
print("started", flush=True)
open(report + ".pid", "w").write(str(os.getpid()))
if index == {failing}:
    # Fail only once the other worker is running, so that the launcher has both to stop.
    other = report.replace(f"worker{{index}}.json", "worker0.json")
    deadline = time.monotonic() + 20
    while not os.path.exists(other + ".pid") and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(3)
time.sleep(60)
"""


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize(("failing", "timeout", "message"), [(1, 30, "worker 1 exited with status 3"),
                                                             (-1, 1, "did not finish within 1 s")])  # fmt: skip
def test_a_failed_or_late_worker_stops_them_all(tmp_path, failing, timeout, message):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(FAKE_WORKER.format(failing=failing)))
    lines: list[str] = []
    started = time.monotonic()
    with pytest.raises(launcher.WorkerFailed, match=message):
        launcher.run_workers([], 2, tmp_path, timeout, lines.append, script=script)
    assert time.monotonic() - started < 20  # not the 60 s the other worker would sleep
    pids = [int((tmp_path / f"worker{i}.json.pid").read_text()) for i in range(2)]
    assert all(gone(pid) for pid in pids), "a worker process is still there"
    assert sorted(lines) == ["[worker 0] started", "[worker 1] started"]


def test_free_ports_are_distinct_and_tf_config_names_them():
    ports = launcher.free_ports(3)
    assert len(set(ports)) == 3
    config = launcher.tf_config(ports, 2)
    assert f'"127.0.0.1:{ports[0]}"' in config and '"index": 2' in config
