"""The Keras example: train_on_batch from a sample-level dataset, its metrics, and early stopping; and model.fit."""

from __future__ import annotations

import threading

from parallel_loader import EpochStats, PassStats
from tests.helpers import load_example


def test_early_stopping_counts_epochs_without_improvement():
    example = load_example("train_keras")
    stop = example.EarlyStopping("loss", patience=2, min_delta=0.01)

    def epoch(loss):
        return EpochStats(0, PassStats(), val=PassStats(metrics={"loss": loss}))

    assert [stop(epoch(loss)) for loss in (1.0, 0.8, 0.795, 0.7, 0.71, 0.75)] == [
        False, False, False, False, False, True,
    ]  # fmt: skip
    assert stop.best == 0.7


def test_train_on_batch_with_keras_metrics_stops_early(capsys):
    example = load_example("train_keras")
    trainer = example.main(["--samples", "512", "--epochs", "40", "--patience", "2"])
    history = trainer.history
    assert 1 < len(history) < 40, "stopped by EarlyStopping"
    for stats in history:
        assert stats.batches == 512 // 32, "drop_last: full batches only"
        assert set(stats.train.metrics) == set(stats.val.metrics) == {"loss", "accuracy"}
    losses = [stats.val.metrics["loss"] for stats in history]
    assert min(losses[-2:]) >= min(losses[:-2]), "the last two epochs did not improve on the best"
    assert history[-1].val.metrics["accuracy"] > 0.9, "the model learned the circle"
    assert not [t for t in threading.enumerate() if t.name.startswith(("train-", "val-"))]
    out = capsys.readouterr()
    assert "stopped early after" in out.out
    assert out.err.count("\n") == len(history), "one progress line per epoch"


def test_fit_keeps_one_loader_for_the_run_and_reports_each_epochs_first_step_wait(capsys):
    example = load_example("train_keras")
    history = example.main(["--fit", "--samples", "512", "--epochs", "6", "--patience", "6", "--threads", "auto"])
    epochs = len(history.history["loss"])
    assert epochs == 6
    assert history.history["val_loss"][-1] < history.history["val_loss"][0], "the model learns"
    for key in ("first_step_wait_ms", "input_bound_pct", "loader_threads"):
        assert len(history.history[key]) == epochs, key
    assert not [t for t in threading.enumerate() if t.name.startswith(("train-", "val-"))]
    out = capsys.readouterr().out
    assert f"one loader for {epochs} epochs of {epochs};" in out
    assert out.count("| first-step wait") == epochs and "6 epochs; validation loss" in out
