"""``fit`` with ``parallel_loader.keras.BackupAndRestore``, killed at a random step and run again unchanged.

Each run is a subprocess (``tests/backup_fit.py``), so that it can be killed. Over both runs, the model trained
on exactly the batches of an uninterrupted run, in its order: the batches trained after the last backup are
lost with the kill and trained again. The step count and the final weights equal the uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES, BATCH, EPOCHS = 40, 4, 3
STEPS = SAMPLES // BATCH * EPOCHS
BAD = 1  # in the second batch of epoch 0: a fraction budget counts its draws as their batches are delivered


def start(directory: Path, *args: str, kill: str | None = None) -> subprocess.Popen[str]:
    """Start ``tests/backup_fit.py`` in ``directory`` with ``args``; ``kill`` is ``"N:SIGNAL"``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["BACKUP_FIT_RUN"] = directory.name  # inherited by worker processes: finds any left behind
    env.pop("BACKUP_FIT_KILL", None)
    if kill is not None:
        env["BACKUP_FIT_KILL"] = kill
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tests.backup_fit", str(directory), *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Wait for ``process``; its exit status and standard error."""
    try:
        _, stderr = process.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    return process.returncode, stderr


def fit(directory: Path, *args: str, kill: str | None = None) -> tuple[int, str]:
    """Run ``tests/backup_fit.py`` to its end: its exit status and standard error."""
    return finish(start(directory, *args, kill=kill))


def trained(directory: Path) -> list[dict]:
    """The batches trained, one record a step: its epoch and sample indices."""
    lines = (directory / "trained.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]  # a kill may cut the last line


def left_behind(run: str) -> list[int]:
    """Processes still running whose environment marks them as started by ``run``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if f"BACKUP_FIT_RUN={run}".encode() in environ.split(b"\0"):
                pids.append(int(entry.name))
    return pids


def no_process_left(run: str) -> None:
    deadline = time.monotonic() + 15
    while left_behind(run) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left_behind(run), "worker processes outlived their loader"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Iterator[Callable[[bool], tuple[list[dict], dict]]]:
    """Uninterrupted runs, without and with the bad sample: the batches trained and the final weights.

    Both start at once, side by side. How often the backups are saved changes neither.
    """
    started = {bad: (tmp_path_factory.mktemp("reference"), [] if not bad else ["--bad", str(BAD)]) for bad in (0, 1)}
    processes = {bad: start(directory, *args) for bad, (directory, args) in started.items()}
    runs: dict[bool, tuple[list[dict], dict]] = {}

    def get(bad: bool) -> tuple[list[dict], dict]:
        if bad not in runs:
            status, stderr = finish(processes[bad])
            assert status == 0, stderr[-3000:]
            directory = started[bad][0]
            runs[bad] = trained(directory), dict(np.load(directory / "final.npz"))
        return runs[bad]

    yield get
    for process in processes.values():
        finish(process)


def interrupted_and_rerun(directory: Path, args: list[str], signum: str, seed: int) -> tuple[list[dict], dict, str]:
    """Kill ``fit`` at a random step with ``signum``, run the same command again; the batches that count, weights."""
    at = random.Random(seed).randint(2, STEPS - 3)
    where = f"killed with {signum} at step {at}, {args} (seed {seed})"
    status, stderr = fit(directory, *args, kill=f"{at}:{signum}")
    if signum == "SIGKILL":
        assert status == -signal.SIGKILL, (where, stderr[-3000:])
    else:
        assert status != 0 and "KeyboardInterrupt" in stderr, (where, stderr[-3000:])
    no_process_left(directory.name)
    before = trained(directory)
    metadata = directory / "backup" / "training_metadata.json"
    backup = json.loads(metadata.read_text()) if metadata.exists() else {"epoch": 0, "batch": 0}
    where += f", backup at epoch {backup['epoch']} batch {backup['batch']}"
    # What the backup holds: the whole epochs before it, and its first batches of its epoch.
    kept = [r for r in before if r["epoch"] < backup["epoch"]]
    kept += [r for r in before if r["epoch"] == backup["epoch"]][: backup["batch"]]
    assert len(kept) == backup["epoch"] * (SAMPLES // BATCH) + backup["batch"], where

    status, stderr = fit(directory, *args)
    assert status == 0, (where, stderr[-3000:])
    no_process_left(directory.name)
    assert not (directory / "backup").exists(), "the backup is removed once fit has finished"
    return kept + trained(directory)[len(before) :], dict(np.load(directory / "final.npz")), where


def assert_same_run(got: tuple[list[dict], dict], expected: tuple[list[dict], dict], where: str) -> None:
    (batches, weights), (expected_batches, expected_weights) = got, expected
    assert [r["epoch"] for r in batches] == [r["epoch"] for r in expected_batches], where
    assert batches == expected_batches, where
    assert weights["iterations"] == expected_weights["iterations"] == STEPS, where
    for name in expected_weights:
        np.testing.assert_array_equal(weights[name], expected_weights[name], err_msg=f"{name}; {where}")


def each_sample_once(batches: list[dict], bad: int | None = None) -> None:
    """Every sample of every epoch trained on exactly once (one bad sample: replaced by others)."""
    for epoch in range(EPOCHS):
        indices = sorted(i for r in batches if r["epoch"] == epoch for i in r["indices"])
        if bad is None:
            assert indices == list(range(SAMPLES)), f"epoch {epoch}"
        else:
            assert bad not in indices and set(indices) == set(range(SAMPLES)) - {bad}, f"epoch {epoch}"
            assert len(indices) == SAMPLES, f"epoch {epoch}: the batches stay full"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("signum", ["SIGKILL", "SIGINT"])
def test_fit_killed_at_a_random_step_and_rerun_trains_each_sample_once(tmp_path, reference, signum):
    seed = random.randrange(1 << 30)
    save_freq = random.Random(seed).choice(["1", "2", "3", "epoch"])
    args = ["--save-freq", save_freq]
    *got, where = interrupted_and_rerun(tmp_path / uuid.uuid4().hex, args, signum, seed)
    expected = reference(False)
    each_sample_once(expected[0])
    assert_same_run(tuple(got), expected, where)


@pytest.mark.timeout(120)
def test_worker_processes_and_a_bad_sample_under_a_fraction_budget(tmp_path, reference):
    """``processes=2``, ``on_error="skip"``, ``max_errors=0.05``: the batches a thread loader trains on, once."""
    seed = random.randrange(1 << 30)
    bad = ["--bad", str(BAD), "--save-freq", "2"]
    *got, where = interrupted_and_rerun(tmp_path / uuid.uuid4().hex, [*bad, "--processes", "2"], "SIGKILL", seed)
    expected = reference(True)
    each_sample_once(expected[0], bad=BAD)
    assert_same_run(tuple(got), expected, where)
