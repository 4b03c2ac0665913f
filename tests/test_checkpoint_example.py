"""train_video.py --checkpoint-dir: Ctrl-C saves model, optimizer and loader state; a rerun resumes mid-epoch."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from parallel_loader.sample_data import make_sample_data
from tests.helpers import load_example

BATCHES_PER_EPOCH = 4  # 8 training videos in batches of 2
EPOCHS = 6


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    make_sample_data(root, classes=2, per_class=5)  # 4 training and 1 validation video per class
    return root


def interrupt_after_first_checkpoint(directory: Path, main_thread: int) -> threading.Thread:
    """Send Ctrl-C (SIGINT) to this process once the first checkpoint's loader state is on disk."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while not list(directory.glob("train-state-*.json")) and time.monotonic() < deadline:
            time.sleep(0.005)
        signal.pthread_kill(main_thread, signal.SIGINT)

    thread = threading.Thread(target=watch, name="interrupter")
    thread.start()
    return thread


@pytest.mark.timeout(240)
def test_ctrl_c_saves_and_a_rerun_resumes_mid_epoch(tiny_data, tmp_path, capsys):
    example = load_example("train_video")
    checkpoints = tmp_path / "checkpoints"
    argv = ["--data", str(tiny_data), "--epochs", str(EPOCHS), "--batch-size", "2", "--clip-len", "4"]
    argv += ["--size", "16", "16", "--eval-clips", "1", "--eval-crops", "1", "--no-progress"]
    argv += ["--checkpoint-dir", str(checkpoints), "--checkpoint-every", "1"]

    watcher = interrupt_after_first_checkpoint(checkpoints, threading.main_thread().ident)
    try:
        assert example.main(argv) == 130
    finally:
        watcher.join(timeout=130)
    assert "interrupted: saved" in capsys.readouterr().out
    latest = max(checkpoints.glob("train-state-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    saved = json.loads(latest.read_text())
    epochs_done = len(saved["history"])
    batches_done = sum(stop - start for start, stop in saved["train"]["done"])
    assert epochs_done < EPOCHS, "interrupted before the end"
    assert saved["train"]["epoch"] == epochs_done and batches_done < BATCHES_PER_EPOCH
    assert not [t for t in threading.enumerate() if t.name.startswith(("train-", "val-"))]

    assert example.main(argv) == 0
    out = capsys.readouterr().out
    assert f"resumed from {checkpoints / 'ckpt-'}" in out
    assert f"{epochs_done} epochs done, {batches_done} batches of the next one" in out
    final = max(checkpoints.glob("train-state-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    history = json.loads(final.read_text())["history"]
    assert [h["epoch"] for h in history] == list(range(EPOCHS))
    # The interrupted epoch trained on the rest of its batches only, the later ones on all of theirs.
    assert history[epochs_done]["train"]["batches"] == BATCHES_PER_EPOCH - batches_done
    assert all(h["train"]["batches"] == BATCHES_PER_EPOCH for h in history[epochs_done + 1 :])
    assert len(list(checkpoints.glob("train-state-*.json"))) <= 3, "old loader states go with old checkpoints"
    assert os.path.exists(checkpoints / "checkpoint")
