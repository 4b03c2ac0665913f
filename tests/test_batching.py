"""Sample datasets batched by the loader: SampleBatches, default_collate, DataLoader(batch_size=...)."""

import threading
from collections import namedtuple

import numpy as np
import pytest

from parallel_loader import DataLoader, SampleBatches, YieldFunction, default_collate


class Samples:
    """``n`` samples, PyTorch style: sample i is ``(features filled with i, label i)``."""

    def __init__(self, n):
        self.n = n
        self.events = []
        self.lock = threading.Lock()
        self.calls_by_thread = {}

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        if not 0 <= index < self.n:
            raise IndexError(index)
        name = threading.current_thread().name
        with self.lock:
            self.calls_by_thread[name] = self.calls_by_thread.get(name, 0) + 1
        return np.full(3, index, dtype=np.float32), index

    def on_epoch_begin(self, epoch):
        self.events.append(("begin", epoch))

    def on_epoch_end(self, epoch):
        self.events.append(("end", epoch))


def labels(batches):
    """The sample indices of each batch, as lists."""
    return [batch[1].tolist() for batch in batches]


def epochs(loader, count):
    return [labels(loader) for _ in range(count)]


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("ordered", [False, True])
def test_every_sample_once_per_epoch_and_batches_change_each_epoch(threads, ordered):
    with DataLoader(Samples(50), threads, batch_size=8, shuffle=True, seed=1, ordered=ordered) as loader:
        assert len(loader) == 7
        runs = epochs(loader, 3)
    for batches in runs:
        assert sorted(i for batch in batches for i in batch) == list(range(50))
        assert sorted(len(batch) for batch in batches) == [2] + [8] * 6
    as_sets = [{frozenset(batch) for batch in batches} for batches in runs]
    assert as_sets[0] != as_sets[1] != as_sets[2], "shuffle mixes the samples into new batches each epoch"


def test_batches_are_the_same_whatever_the_thread_count():
    def run(threads, ordered):
        with DataLoader(Samples(40), threads, 2, batch_size=6, shuffle=True, seed=7, ordered=ordered) as loader:
            return epochs(loader, 3)

    one = run(1, ordered=True)
    assert run(5, ordered=True) == one, "ordered: the same batches in the same order"
    unordered = run(5, ordered=False)
    for made, reference in zip(unordered, one, strict=True):
        assert sorted(made) == sorted(reference), "unordered: the same batches, in any order"
    assert one != run(1, ordered=True)[::-1]  # not trivially equal: epochs differ from each other


def test_each_batch_is_made_in_one_thread():
    fn = Samples(64)
    made_by = []

    def collate(samples):
        made_by.append(threading.current_thread().name)
        return default_collate(samples)

    with DataLoader(fn, 4, batch_size=8, collate=collate) as loader:
        assert len(list(loader)) == 8
    assert len(made_by) == 8 and all(name.startswith("DataLoader-") for name in made_by)
    assert sum(fn.calls_by_thread.values()) == 64
    assert set(fn.calls_by_thread) <= set(made_by), "samples are fetched by the thread that collates them"


def test_a_seed_reproduces_the_epochs_and_first_epoch_continues_them():
    def run(seed, first_epoch=0, count=3):
        with DataLoader(Samples(30), 2, batch_size=4, shuffle=True, seed=seed, ordered=True,
                        first_epoch=first_epoch) as loader:  # fmt: skip
            return epochs(loader, count)

    first = run(3)
    assert run(3) == first
    assert run(4) != first
    assert run(3, first_epoch=2, count=1) == first[2:]


def test_without_shuffle_batches_follow_the_sample_order_every_epoch():
    with DataLoader(Samples(10), 3, batch_size=4, ordered=True) as loader:
        runs = epochs(loader, 2)
    assert runs == [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]] * 2


@pytest.mark.parametrize("shuffle", [False, True])
def test_drop_last_both_ways(shuffle):
    with DataLoader(Samples(10), 2, batch_size=4, drop_last=True, shuffle=shuffle, seed=0) as loader:
        assert len(loader) == 2
        dropped = []
        for batches in epochs(loader, 4):
            assert [len(batch) for batch in batches] == [4, 4]
            seen = [i for batch in batches for i in batch]
            assert len(set(seen)) == 8
            dropped.append(frozenset(range(10)) - frozenset(seen))
    if shuffle:
        assert len(set(dropped)) > 1, "with shuffle, other samples are left out each epoch"
    else:
        assert set(dropped) == {frozenset({8, 9})}
    with DataLoader(Samples(10), 2, batch_size=4, drop_last=False, shuffle=shuffle, seed=0) as loader:
        assert len(loader) == 3
        assert sorted(i for batch in labels(loader) for i in batch) == list(range(10))
    with DataLoader(Samples(8), 2, batch_size=4, drop_last=True) as loader:
        assert len(loader) == 2, "no batch is dropped when the samples divide evenly"


def test_the_datasets_epoch_hooks_are_forwarded_in_order():
    fn = Samples(6)
    with DataLoader(fn, 2, batch_size=4, first_epoch=3) as loader:
        list(loader)
        list(loader)
    assert fn.events == [("begin", 3), ("end", 3), ("begin", 4), ("end", 4)]
    assert loader.yield_fn.epoch == 4


def test_a_callable_sample_dataset_and_a_list_of_samples():
    class Squares(YieldFunction):
        def __len__(self):
            return 5

        def __call__(self, index):
            return index * index

    with DataLoader(Squares(), 2, batch_size=2, ordered=True) as loader:
        batches = list(loader)
    assert [b.tolist() for b in batches] == [[0, 1], [4, 9], [16]]
    with DataLoader([np.zeros((2, 2)), np.ones((2, 2)), np.ones((2, 2))], 2, batch_size=3) as loader:
        (batch,) = list(loader)
    assert batch.shape == (3, 2, 2)


def test_sample_batches_alone_moves_epochs_with_on_epoch_begin():
    batches = SampleBatches(Samples(9), 3, shuffle=True, seed=2)
    first = [batches(i)[1].tolist() for i in range(len(batches))]
    batches.on_epoch_begin(1)
    second = [batches(i)[1].tolist() for i in range(len(batches))]
    assert sorted(i for b in first for i in b) == sorted(i for b in second for i in b) == list(range(9))
    assert first != second
    with pytest.raises(IndexError, match="batch 3 is out of range"):
        batches(3)


def test_default_collate_of_tuples_dicts_lists_and_named_tuples():
    pair = default_collate([(np.zeros(2, np.float32), 1), (np.ones(2, np.float32), 2)])
    assert isinstance(pair, tuple) and pair[0].shape == (2, 2) and pair[0].dtype == np.float32
    assert pair[1].tolist() == [1, 2]
    nested = default_collate([{"x": np.zeros(3), "meta": {"id": 5, "name": "a"}},
                              {"x": np.ones(3), "meta": {"id": 6, "name": "b"}}])  # fmt: skip
    assert nested["x"].shape == (2, 3)
    assert nested["meta"]["id"].tolist() == [5, 6] and nested["meta"]["name"].tolist() == ["a", "b"]
    assert [part.tolist() for part in default_collate([[1, 2.5], [3, 4.5]])] == [[1, 3], [2.5, 4.5]]
    Point = namedtuple("Point", "x y")
    point = default_collate([Point(1, 2), Point(3, 4)])
    assert isinstance(point, Point) and point.x.tolist() == [1, 3]


@pytest.mark.parametrize(
    ("samples", "error", "message"),
    [
        ([np.zeros(2), np.zeros(3)], ValueError, r"different shapes \[\(2,\), \(3,\)\]"),
        ([{"a": 1}, {"b": 1}], TypeError, "different keys"),
        ([(1, 2), (1,)], TypeError, "different structure"),
        ([object(), object()], TypeError, "pass collate="),
        ([None, None], TypeError, "NoneType"),
    ],
)
def test_default_collate_says_what_is_wrong(samples, error, message):
    with pytest.raises(error, match=message):
        default_collate(samples)


def test_a_collate_error_reaches_the_consumer_with_the_batch_index():
    class Ragged(Samples):
        def __getitem__(self, index):
            return np.zeros(index + 1)

    with pytest.raises(ValueError, match="different shapes") as info, DataLoader(Ragged(4), 2, batch_size=2) as loader:
        list(loader)
    assert any("for index" in note for note in info.value.__notes__)


@pytest.mark.parametrize(
    ("source", "kwargs", "error", "message"),
    [
        (Samples, {"batch_size": 2}, TypeError, r"pass an instance: Samples\(\.\.\.\)"),
        (lambda: 1, {"batch_size": 2}, TypeError, "batch_size needs a sample dataset with __len__"),
        (Samples(4), {"batch_size": 0}, ValueError, "batch_size must be at least 1"),
        (Samples(4), {"batch_size": 2.0}, TypeError, "batch_size must be an int"),
        (Samples(4), {"batch_size": 2, "drop_last": "yes"}, TypeError, "drop_last must be True or False"),
        (Samples(4), {"batch_size": 2, "collate": "stack"}, TypeError, "collate must be callable"),
        (Samples(4), {"drop_last": True}, ValueError, "pass batch_size too"),
        (Samples(4), {"collate": default_collate}, ValueError, "pass batch_size too"),
        (object(), {"batch_size": 2}, TypeError, "__len__"),
    ],
)
def test_bad_batching_arguments_fail_at_construction(source, kwargs, error, message):
    with pytest.raises(error, match=message):
        DataLoader(source, **kwargs)


def test_a_class_without_getitem_or_call_is_refused():
    class Sized:
        def __len__(self):
            return 3

    with pytest.raises(TypeError, match="needs __getitem__"):
        SampleBatches(Sized(), 2)


class EpochSamples:
    """A sample dataset whose sample depends on its epoch through get_sample's argument, not a hook."""

    def __len__(self):
        return 10

    def get_sample(self, index, epoch):
        return np.array([index, epoch])


def test_get_sample_takes_the_epoch_as_an_argument_and_epochs_still_overlap():
    with DataLoader(EpochSamples(), batch_size=4, num_threads=2, ordered=True) as loader:
        assert hasattr(loader.yield_fn, "get_batch")  # no epoch hook: the next epoch may be made ahead
        epochs = [[tuple(row) for batch in loader for row in batch] for _ in range(2)]
        assert (len(loader), len(loader.yield_fn), len(loader.yield_fn.samples)) == (3, 3, 10)  # batches, samples
    assert epochs == [[(i, e) for i in range(10)] for e in range(2)]
