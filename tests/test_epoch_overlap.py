"""Epochs overlap: the next epoch's first batches are made while this one's last ones are used.

Deterministic: the tests wait on conditions (bounded), never on the clock alone.
"""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest

from parallel_loader import DataLoader, Train, YieldFunction

WAIT = 10.0  # seconds a condition may take on a loaded machine before the test fails


class Recorder:
    """A yield function without epoch hooks: batch i is i; counts calls under a condition."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0
        self.changed = threading.Condition()

    def __len__(self) -> int:
        return self.n

    def __call__(self, index: int) -> int:
        with self.changed:
            self.calls += 1
            self.changed.notify_all()
        return index

    def wait_for_calls(self, count: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.calls >= count, timeout=WAIT)

    def settle(self) -> int:
        """The number of calls once none has come for a moment (the loader has nothing more to make)."""
        with self.changed:
            while self.changed.wait(timeout=0.2):
                pass
            return self.calls


def test_the_next_epochs_first_batches_are_made_before_it_starts():
    data = Recorder(10)
    with DataLoader(data, num_threads=2, max_len=4) as loader:
        assert sorted(loader) == list(range(10))
        # No iteration is running: the threads still make the next epoch's first batches.
        assert data.wait_for_calls(10 + 4), "no batch of the next epoch was made ahead"
        assert data.settle() == 14, "at most max_len batches are made ahead"
        assert sorted(loader) == list(range(10)), "the batches made ahead are delivered, once"


def test_no_overlap_when_turned_off():
    data = Recorder(10)
    with DataLoader(data, num_threads=2, max_len=4, overlap_epochs=False) as loader:
        assert not loader.overlap_epochs
        assert sorted(loader) == list(range(10))
        assert data.settle() == 10
        assert sorted(loader) == list(range(10))


@pytest.mark.parametrize("seed", range(8))
def test_every_index_once_per_epoch_across_overlapping_epochs_and_breaks(seed):
    rng = random.Random(seed)
    n = rng.randint(0, 30)
    ordered, shuffle = rng.random() < 0.5, rng.random() < 0.5
    data = Recorder(n)
    with DataLoader(
        data, num_threads=rng.randint(1, 6), max_len=rng.randint(1, 5), ordered=ordered, shuffle=shuffle, seed=seed
    ) as loader:
        expected = list(loader)
        assert Counter(expected) == Counter(range(n))
        for epoch in range(1, 8):
            if n and rng.random() < 0.3:  # abandon this epoch part way
                batches = iter(loader)
                for _ in range(rng.randint(0, n - 1)):
                    next(batches)
                batches.close()
                continue
            got = list(loader)
            assert Counter(got) == Counter(range(n)), f"epoch {epoch}: {got}"
            if ordered and not shuffle:
                assert got == expected == list(range(n))


class EpochTagged(YieldFunction):
    """A yield function that names its epoch in each batch, through get_batch, with epoch hooks too."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.begun: list[int] = []
        self.ended: list[int] = []
        self.calls: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return self.n

    def __call__(self, index: int) -> tuple[int, int]:
        raise AssertionError("a loader calls get_batch when the yield function has it")

    def get_batch(self, index: int, epoch: int) -> tuple[int, int]:
        self.calls.append((epoch, index))
        return epoch, index

    def on_epoch_begin(self, epoch: int) -> None:
        self.begun.append(epoch)

    def on_epoch_end(self, epoch: int) -> None:
        self.ended.append(epoch)


def test_get_batch_gets_each_calls_own_epoch_while_epochs_overlap():
    data = EpochTagged(6)
    with DataLoader(data, num_threads=3, max_len=2, shuffle=True, seed=1, first_epoch=2) as loader:
        assert loader.overlap_epochs
        for epoch in range(2, 6):
            batches = list(loader)
            assert all(made_for == epoch for made_for, _ in batches), batches
            assert sorted(index for _, index in batches) == list(range(6))
    assert data.begun == data.ended == [2, 3, 4, 5]
    assert {epoch for epoch, _ in data.calls} >= {2, 3, 4, 5}
    assert all(epoch <= 6 for epoch, _ in data.calls), "only the next epoch is made ahead"


class Hooked(YieldFunction):
    """An old-style yield function: on_epoch_begin sets what __call__ reads, so epochs must not overlap."""

    def __init__(self) -> None:
        self.epoch = -1
        self.running = 0
        self.overlapped = False
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return 5

    def __call__(self, index: int) -> int:
        with self.lock:
            self.running += 1
        epoch = self.epoch
        with self.lock:
            self.running -= 1
        return epoch

    def on_epoch_begin(self, epoch: int) -> None:
        with self.lock:
            self.overlapped |= self.running > 0
        self.epoch = epoch


def test_a_yield_function_with_hooks_and_no_get_batch_keeps_epochs_apart():
    data = Hooked()
    with DataLoader(data, num_threads=3, max_len=2) as loader:
        assert not loader.overlap_epochs
        for epoch in range(4):
            assert list(loader) == [epoch] * 5
    assert not data.overlapped


def test_a_resumed_loader_overlaps_too_and_delivers_the_rest_once():
    data = Recorder(12)
    with DataLoader(data, num_threads=2, max_len=3, shuffle=True, seed=5, ordered=True) as loader:
        full = [list(loader) for _ in range(3)]
    with DataLoader(Recorder(12), num_threads=2, max_len=3, shuffle=True, seed=5, ordered=True) as loader:
        batches = iter(loader)
        head = [next(batches) for _ in range(5)]
        state = loader.state_dict()
        batches.close()
    with DataLoader(Recorder(12), num_threads=4, max_len=2, shuffle=True, seed=5, ordered=True) as loader:
        loader.load_state_dict(state)
        assert head + list(loader) == full[0]
        assert [list(loader) for _ in range(2)] == full[1:]


def test_train_keeps_the_training_loader_working_during_validation():
    train_data = Recorder(6)
    validated = []

    def val_task(batch: int) -> None:
        if not validated:  # the first validation batch: the next training epoch is being made meanwhile
            validated.append(train_data.wait_for_calls(6 + 2))

    trainer = Train(lambda batch: None, train_data, Recorder(3), num_threads=2, max_len=2, val_task=val_task)
    trainer.run(2, progress=False)
    assert validated == [True]
    assert [stats.batches for stats in trainer.history] == [6, 6]


def test_which_yield_functions_overlap_epochs():
    class Plain(YieldFunction):  # inherits the no-op hooks: its batches cannot depend on the epoch
        def __len__(self):
            return 3

        def __call__(self, index):
            return index

    class Stream:
        def __call__(self):
            return 0

    assert DataLoader(Plain()).overlap_epochs
    assert DataLoader(Recorder(3)).overlap_epochs
    assert DataLoader(EpochTagged(3)).overlap_epochs  # hooks, but get_batch names the epoch
    assert not DataLoader(Hooked()).overlap_epochs
    assert not DataLoader(Stream(), batches_per_epoch=2).overlap_epochs
    assert not DataLoader(Plain(), overlap_epochs=False).overlap_epochs
    with pytest.raises(TypeError, match="overlap_epochs must be True or False"):
        DataLoader(Plain(), overlap_epochs="yes")


class FailsInEpoch(YieldFunction):
    """Batch i of epoch e is (e, i); index 0 fails in epoch ``bad_epoch`` only."""

    def __init__(self, bad_epoch: int) -> None:
        self.bad_epoch = bad_epoch
        self.failed = threading.Event()

    def __len__(self) -> int:
        return 6

    def get_batch(self, index: int, epoch: int) -> tuple[int, int]:
        if epoch == self.bad_epoch and index == 0:
            self.failed.set()
            raise ValueError(f"bad 0 of epoch {epoch}")
        return epoch, index


def test_a_failure_made_ahead_belongs_to_its_epoch():
    data = FailsInEpoch(bad_epoch=1)
    with DataLoader(data, num_threads=2, max_len=3) as loader:
        assert sorted(loader) == [(0, i) for i in range(6)]
        assert data.failed.wait(WAIT), "epoch 1's index 0 was made ahead"
        with pytest.raises(ValueError, match="bad 0 of epoch 1"):
            list(loader)  # raised by its own epoch, not by epoch 0


def test_a_skipped_failure_made_ahead_is_recorded_by_its_epoch_only():
    data = FailsInEpoch(bad_epoch=1)
    with DataLoader(data, num_threads=2, max_len=3, on_error="skip") as loader:
        assert sorted(loader) == [(0, i) for i in range(6)]
        assert data.failed.wait(WAIT)
        assert loader.errors == [], "not recorded before its epoch runs"
        assert sorted(loader) == [(1, i) for i in range(1, 6)]
        (record,) = loader.errors
        assert (record.epoch, record.index, record.type) == (1, 0, "ValueError")
        assert record.thread.startswith("DataLoader-"), "named after the thread that made the call"
    data = FailsInEpoch(bad_epoch=1)
    with DataLoader(data, num_threads=2, max_len=3, on_error="skip") as loader:
        list(loader)
        assert data.failed.wait(WAIT)
    assert loader.errors == [], "an epoch that never ran records nothing"
