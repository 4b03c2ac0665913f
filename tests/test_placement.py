"""Where the calls run: ``processes="auto"`` and the training default of ``as_tf_dataset``, ``Train`` and ``fit``.

The suite's conftest keeps the training default in threads; these tests unset that.
"""

from __future__ import annotations

import logging
import os
import threading

import numpy as np
import pytest

from parallel_loader import DataLoader, ThreadTuner, Train, as_tf_dataset
from parallel_loader._calls.worker_launch import worker_children
from parallel_loader._loader import placement
from parallel_loader._loader.placement import THREADS_DEFAULT, auto_placement, training_placement
from parallel_loader.tensorflow._tf_data import loader_of

from . import process_data as data

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def default(monkeypatch):
    """The training default as users get it: no PARALLEL_LOADER_PROCESSES."""
    monkeypatch.delenv(placement.ENV, raising=False)


@pytest.fixture(autouse=True)
def no_worker_left():
    yield
    assert worker_children() == []


class Locked(data.YieldFunction):
    """A yield function that cannot cross to a process: a lock in its state."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return 2

    def __call__(self, index: int) -> dict[str, np.ndarray]:
        return {"x": np.full(2, index)}


@pytest.mark.parametrize(
    ("cores", "threads", "expected"),
    [
        (1, None, (1, 1)),
        (2, None, (1, 1)),  # one core left to the trainer, one decodes
        (6, None, (1, 5)),  # up to the GIL ceiling in one process
        (7, None, (2, 3)),  # past it: two processes share the decode cores evenly
        (16, None, (3, 5)),  # one core left to the trainer, 15 decode
        (96, None, (18, 5)),  # six left to the trainer
        (17, 8, (2, 8)),  # threads given: processes enough to fill the decode cores
    ],
)
def test_auto_placement_fills_the_decode_cores_without_passing_the_gil_ceiling(cores, threads, expected):
    assert auto_placement(threads, cores=cores) == expected


def test_explicit_values_keep_their_meaning(default):
    fn = data.Arrays(length=4)
    assert training_placement(fn, 3, None, name="t") == (3, 0)  # threads alone: in this process
    assert training_placement(fn, "auto", None, name="t") == ("auto", 0)
    assert training_placement(fn, None, 2, name="t") == (THREADS_DEFAULT, 2)
    assert training_placement(fn, None, 0, name="t") == (THREADS_DEFAULT, 0)
    assert training_placement(fn, 2, "auto", name="t") == (2, "auto")
    assert training_placement(fn, None, None, name="t") == ("auto", "auto")


def test_what_cannot_cross_falls_back_to_threads_with_one_log_line_saying_why(default, caplog):
    with caplog.at_level(logging.INFO, logger=placement.__name__):
        assert training_placement(Locked(), None, None, name="locked") == (THREADS_DEFAULT, 0)
        assert training_placement(lambda: 1, None, None, name="stream") == (THREADS_DEFAULT, 0)
        # What crosses with the data counts too: an unpicklable thread_init keeps the calls here.
        assert training_placement(data.Arrays(), None, None, name="init", also=(Locked(),)) == (THREADS_DEFAULT, 0)
        huge = data.Arrays(size=4700)  # each batch is 66 MB, but the function pickles small: it crosses
        assert training_placement(huge, None, None, name="huge") == ("auto", "auto")
        huge.table = np.zeros(placement.MAX_PAYLOAD + 1, np.uint8)  # a copy in every worker: stays here
        assert training_placement(huge, None, None, name="big") == (THREADS_DEFAULT, 0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4
    assert lines[2].startswith("init: decoding in loader threads") and "thread_init" in lines[2]
    assert lines[3].startswith("big: decoding in loader threads") and "64 MiB" in lines[3]
    assert lines[0].startswith("locked: decoding in loader threads") and "cannot be pickled" in lines[0]
    assert lines[1].startswith("stream: decoding in loader threads") and "stream" in lines[1]


def test_the_environment_variable_chooses_threads_or_a_process_count(monkeypatch):
    fn = data.Arrays(length=4)
    monkeypatch.setenv(placement.ENV, "0")
    assert training_placement(fn, None, None, name="t") == (THREADS_DEFAULT, 0)
    monkeypatch.setenv(placement.ENV, "3")
    assert training_placement(fn, None, None, name="t") == (THREADS_DEFAULT, 3)  # as processes=3 given
    with as_tf_dataset(data.Arrays(length=2)) as dataset:
        assert (loader_of(dataset).processes, loader_of(dataset).num_threads) == (3, THREADS_DEFAULT)
    monkeypatch.setenv(placement.ENV, "many")
    with pytest.raises(ValueError, match="PARALLEL_LOADER_PROCESSES must be"):
        training_placement(fn, None, None, name="t")


def test_a_data_loader_with_processes_auto_sizes_both_from_the_cores():
    with DataLoader(data.Arrays(length=6), processes="auto", ordered=True) as loader:
        got = [int(b["labels"][1]) for b in loader]
        assert (loader.processes, loader.num_threads) == auto_placement()
    assert got == list(range(6))
    with pytest.raises(ValueError, match="both say where the calls run"):
        DataLoader(data.Arrays(), processes="auto", workers=object())
    with pytest.raises(ValueError, match="tunes the threads of this process"):
        DataLoader(data.Arrays(), processes="auto", num_threads=ThreadTuner())
    with pytest.raises(TypeError, match="num_threads must be"):
        DataLoader(data.Arrays(), processes="auto", num_threads="many")


def test_a_plain_data_loader_keeps_its_calls_in_this_process(default):
    with DataLoader(data.Arrays(length=2)) as loader:
        pids = {b["pid"] for b in loader}
    assert pids == {os.getpid()} and loader.processes == 0


def test_as_tf_dataset_decodes_in_worker_processes_by_default(default):
    with as_tf_dataset(data.Arrays(length=4), ordered=True) as dataset:
        loader = loader_of(dataset)
        batches = list(dataset.as_numpy_iterator())
    assert (loader.processes, loader.num_threads) == auto_placement()
    assert [int(b["labels"][1]) for b in batches] == [0, 1, 2, 3]
    assert os.getpid() not in {int(b["pid"]) for b in batches}


def test_as_tf_dataset_with_threads_given_keeps_them_here(default):
    with as_tf_dataset(data.Arrays(length=2), num_threads=2) as dataset:
        pids = {int(b["pid"]) for b in dataset.as_numpy_iterator()}
        assert loader_of(dataset).processes == 0
    assert pids == {os.getpid()}


def test_train_decodes_every_data_set_in_worker_processes_by_default(default):
    pids: list[int] = []
    trainer = Train(lambda b: pids.append(b["pid"]), data.Arrays(length=4), val_yield=data.Arrays(length=2),
                    val_task=lambda b: pids.append(b["pid"]), ordered=True)  # fmt: skip
    trainer.run(1, progress=False)
    assert len(pids) == 6 and os.getpid() not in pids
    assert trainer.num_threads == trainer.eval_num_threads == "auto"
    unpicklable = Train(lambda b: None, Locked())
    assert unpicklable.num_threads == THREADS_DEFAULT
    unpicklable.run(1, progress=False)


def test_fit_with_backup_and_restore_trains_from_worker_processes_by_default(default, tmp_path):
    import keras

    from parallel_loader.keras import BackupAndRestore

    dataset = as_tf_dataset(data.Pairs(16), batch_size=4, shuffle=True, seed=1)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    with dataset:
        history = model.fit(dataset, epochs=2, verbose=0, callbacks=[BackupAndRestore(tmp_path / "backup", dataset)])
        assert loader_of(dataset).processes >= 1
    assert int(model.optimizer.iterations) == 8 and np.isfinite(history.history["loss"]).all()


def test_a_keras_dataset_stays_in_threads_by_default_with_one_log_line_saying_why(default, caplog):
    import keras

    class Rows(keras.utils.PyDataset):
        def __len__(self):
            return 3

        def __getitem__(self, idx):
            return np.full((2, 1), os.getpid(), np.int64), np.full(2, idx, np.int64)

    with caplog.at_level(logging.INFO, logger=placement.__name__):
        assert training_placement(Rows(), None, None, name="keras") == (THREADS_DEFAULT, 0)
        # Keras's own processes asked for: it stays here too, where the loader's threads call it.
        parallel = Rows(workers=4, use_multiprocessing=True)
        assert training_placement(parallel, None, None, name="keras-mp") == (THREADS_DEFAULT, 0)
        assert training_placement(Rows(), None, 2, name="asked") == (THREADS_DEFAULT, 2)  # processes given: sent
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(":")[0] for line in lines] == ["keras", "keras-mp"]
    assert all("Keras dataset" in line and "would import Keras" in line for line in lines)
    pids: list[int] = []
    trainer = Train(
        lambda batch: pids.extend(batch[0][:, 0].tolist()), Rows(), val_yield=Rows(), val_task=lambda batch: None
    )
    assert trainer.num_threads == trainer.eval_num_threads == THREADS_DEFAULT
    trainer.run(1, progress=False)
    assert set(pids) == {os.getpid()}
    with as_tf_dataset(Rows()) as dataset:
        assert loader_of(dataset).processes == 0


def test_train_gives_each_loader_the_decode_cores_since_they_take_turns(default):
    # Each loader is sized for the whole host: the validation loader starts at the first validation
    # pass, after the training pass, and the test loader only in test().
    during_training: list[tuple[list, list]] = []

    def step(batch):
        loaders = trainer._last
        during_training.append((loaders["val"]._yield_calls.pids, loaders["test"]._yield_calls.pids))

    trainer = Train(
        step,
        data.Arrays(length=4),
        val_yield=data.Arrays(length=2),
        test_yield=data.Arrays(length=2),
        val_task=lambda batch: None,
        test_task=lambda batch: None,
    )
    assert {spec[2]["processes"] for spec in trainer._specs.values()} == {"auto"}
    trainer.run(1, progress=False)
    processes, _ = auto_placement()
    assert during_training == [([None] * processes, [None] * processes)] * 4
    assert all(trainer._last["val"]._yield_calls.pids) and not any(trainer._last["test"]._yield_calls.pids)
    assert trainer.test(progress=False).batches == 2
