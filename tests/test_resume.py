"""Checkpoint and resume mid-epoch: state_dict / load_state_dict on DataLoader and Train."""

import json
import threading
import time

import numpy as np
import pytest

from parallel_loader import DataLoader, Train, YieldFunction
from parallel_loader._faults.errors import ErrorBudgetExceeded
from parallel_loader.video import VideoFolder
from tests.helpers import Faulty
from tests.video_files import write_video

N = 40


class Indices(YieldFunction):
    """Batch ``i`` is ``i``; counts the calls made for each index."""

    def __init__(self, n=N):
        self.n = n
        self.calls = [0] * n

    def __len__(self):
        return self.n

    def __call__(self, index):
        self.calls[index] += 1
        return index


def json_round_trip(state):
    return json.loads(json.dumps(state))


def take(loader, count):
    """The first ``count`` batches of an epoch of ``loader``, which is then left part way."""
    part = []
    for batch in loader:
        part.append(batch)
        if len(part) == count:
            break
    return part


def interrupted(fn, stop_after, **kwargs):
    """Iterate a loader with 3 threads, stop after ``stop_after`` batches; return them and the state (via JSON)."""
    with DataLoader(fn, num_threads=3, max_len=4, **kwargs) as loader:
        return take(loader, stop_after), json_round_trip(loader.state_dict())


def resumed(fn, state, epochs=1, **kwargs):
    """A new loader over ``fn`` that goes on from ``state``; returns the batches of ``epochs`` epochs."""
    loader = DataLoader(fn, **kwargs)
    loader.load_state_dict(state)
    with loader:
        return [list(loader) for _ in range(epochs)], loader


@pytest.mark.parametrize("threads", [1, 5])
@pytest.mark.parametrize("shuffle", [False, True])
def test_resuming_with_another_thread_count_delivers_the_rest_of_the_epoch_exactly_once(threads, shuffle):
    part, state = interrupted(Indices(), 13, shuffle=shuffle, seed=4)
    assert state["epoch"] == 0 and state["length"] == N
    fn = Indices()
    options = dict(num_threads=threads, max_len=2, shuffle=shuffle, seed=4, overlap_epochs=False)  # calls counted
    (rest, following), loader = resumed(fn, state, epochs=2, **options)
    assert sorted(part + rest) == list(range(N))  # each index exactly once in the epoch
    assert sorted(following) == list(range(N))
    assert loader.epoch == 1
    # The resumed loader made only what was not delivered before (and each of those once).
    assert sum(fn.calls) == len(rest) + N


@pytest.mark.parametrize(("threads", "max_len"), [(1, 1), (5, 2)])
def test_an_ordered_shuffled_resume_gives_the_batches_of_an_uninterrupted_run_in_order(threads, max_len):
    options = dict(shuffle=True, seed=11, ordered=True)
    with DataLoader(Indices(), num_threads=3, max_len=4, **options) as loader:
        uninterrupted = [list(loader) for _ in range(3)]
    part, state = interrupted(Indices(), 17, **options)
    epochs, loader = resumed(Indices(), state, epochs=3, num_threads=threads, max_len=max_len, **options)
    assert part + epochs[0] == uninterrupted[0]
    assert epochs[1:] == uninterrupted[1:]  # later epochs go on as if never interrupted
    assert loader.epoch == 2
    # Without a seed of its own, a loader takes the state's, so the orders still match.
    epochs, _ = resumed(Indices(), state, num_threads=2, shuffle=True, ordered=True)
    assert part + epochs[0] == uninterrupted[0]


def test_a_state_taken_between_epochs_starts_the_next_epoch():
    options = dict(shuffle=True, seed=2, ordered=True)
    with DataLoader(Indices(), num_threads=3, **options) as loader:
        first, second = list(loader), list(loader)
    with DataLoader(Indices(), num_threads=3, **options) as loader:
        assert list(loader) == first
        state = json_round_trip(loader.state_dict())
    assert (state["epoch"], state["done"]) == (1, [])
    (epoch,), _ = resumed(Indices(), state, num_threads=2, **options)
    assert epoch == second


def test_a_state_taken_after_an_error_in_the_training_step_resumes_where_it_stopped():
    options = dict(shuffle=True, seed=5, ordered=True)
    with DataLoader(Indices(), num_threads=3, **options) as loader:
        uninterrupted = list(loader)
    trained = []
    loader = DataLoader(Indices(), num_threads=3, max_len=2, **options)
    with pytest.raises(ZeroDivisionError), loader:
        try:
            for batch in loader:
                if len(trained) == 21:
                    raise ZeroDivisionError("a failing training step")
                trained.append(batch)
        finally:
            state = json_round_trip(loader.state_dict())
    # The batch the step failed on was delivered, so it counts as done.
    (rest,), _ = resumed(Indices(), state, num_threads=4, **options)
    assert [*trained, uninterrupted[21], *rest] == uninterrupted


def test_a_loaded_state_is_passed_on_unchanged_until_iterated():
    _, state = interrupted(Indices(), 9, shuffle=True, seed=1)
    loader = DataLoader(Indices(), shuffle=True, seed=1)
    loader.load_state_dict(state)
    assert loader.state_dict() == state
    again = DataLoader(Indices(), shuffle=True, seed=1)
    again.load_state_dict(json_round_trip(loader.state_dict()))
    with again:
        assert len(list(again)) == N - 9


def test_a_stream_resumes_with_the_count_of_calls_still_to_make():
    def stream():
        return 1

    with DataLoader(stream, num_threads=2, batches_per_epoch=10) as loader:
        for taken, _ in enumerate(loader, 1):
            if taken == 4:
                break
        state = json_round_trip(loader.state_dict())
    assert (state["epoch"], state["done"], state["length"]) == (0, 4, None)
    (rest, following), _ = resumed(stream, state, epochs=2, num_threads=3, batches_per_epoch=10)
    assert (len(rest), len(following)) == (6, 10)


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """Two classes of four small videos each."""
    root = tmp_path_factory.mktemp("videos")
    for v in range(8):
        write_video(root / f"class{v % 2}" / f"v{v}.avi", 16 + 2 * v, video_id=v)
    return root


def video_epochs(root, threads, max_len, epochs, state=None, stop_after=None):
    data = VideoFolder(root, batch_size=2, clip_len=3, stride=2, size=(16, 20), seed=9, dtype="uint8")
    loader = DataLoader(data, num_threads=threads, max_len=max_len, shuffle=True, seed=3, ordered=True)
    if state is not None:
        loader.load_state_dict(state)
    with loader:
        if stop_after is not None:
            return take(loader, stop_after), json_round_trip(loader.state_dict())
        return [list(loader) for _ in range(epochs)]


@pytest.mark.parametrize("threads", [1, 5])
def test_a_resumed_seeded_video_folder_gives_bit_identical_batches(videos, threads):
    uninterrupted = video_epochs(videos, 3, 4, epochs=2)
    part, state = video_epochs(videos, 3, 4, epochs=1, stop_after=2)
    rest, following = video_epochs(videos, threads, 1, epochs=2, state=state)
    assert len(uninterrupted[0]) == 4
    for (clips, labels), (clips_u, labels_u) in zip(
        part + rest + following, uninterrupted[0] + uninterrupted[1], strict=True
    ):
        np.testing.assert_array_equal(clips, clips_u)
        np.testing.assert_array_equal(labels, labels_u)


def test_a_state_that_does_not_fit_is_refused_with_a_clear_error():
    _, state = interrupted(Indices(), 5, shuffle=True, seed=4)
    with pytest.raises(ValueError, match="saved for 40 batches per epoch, the yield function now has 41"):
        DataLoader(Indices(41), shuffle=True, seed=4).load_state_dict(state)
    with pytest.raises(ValueError, match="saved with seed=4, this loader has seed=5"):
        DataLoader(Indices(), shuffle=True, seed=5).load_state_dict(state)
    with pytest.raises(ValueError, match="saved with shuffle=True, this loader has False"):
        DataLoader(Indices()).load_state_dict(state)
    with pytest.raises(ValueError, match="not a DataLoader state of format 1"):
        DataLoader(Indices(), shuffle=True).load_state_dict(state | {"format": 2})
    with pytest.raises(ValueError, match="not a DataLoader state"):
        DataLoader(Indices(), shuffle=True).load_state_dict([state])
    with pytest.raises(ValueError, match="malformed DataLoader state"):
        DataLoader(Indices(), shuffle=True).load_state_dict({k: v for k, v in state.items() if k != "epoch"})
    with pytest.raises(ValueError, match=r"'done' must be \[start, stop\) pairs within the epoch's 40 positions"):
        DataLoader(Indices(), shuffle=True).load_state_dict(state | {"done": [[30, 41]]})
    with pytest.raises(ValueError, match="the state's epoch must be at least 0"):
        DataLoader(Indices(), shuffle=True).load_state_dict(state | {"epoch": -1})


def test_load_state_dict_after_iterating_is_refused():
    _, state = interrupted(Indices(), 5)
    with DataLoader(Indices(), num_threads=2) as loader:
        list(loader)
        with pytest.raises(RuntimeError, match="load_state_dict must be called before the first iteration"):
            loader.load_state_dict(state)
        batches = iter(loader)
        next(batches)
        with pytest.raises(RuntimeError, match="before the first iteration"):
            loader.load_state_dict(state)
        batches.close()


class Reaches(Faulty):
    """Like ``Faulty``; ``reached`` is set when the call for index ``mark`` begins."""

    def __init__(self, length, fail, mark):
        super().__init__(length, fail=fail)
        self.mark = mark
        self.reached = threading.Event()

    def __call__(self, index):
        if index == self.mark:
            self.reached.set()
        return super().__call__(index)


def test_a_resumed_run_continues_its_manifest_and_its_budget(tmp_path):
    log = tmp_path / "manifest.jsonl"
    fail = {3: ValueError, 30: KeyError}
    options = dict(ordered=True, on_error="skip", max_errors=1, error_log=log)
    # One thread and a short queue: index 30 is not made before the checkpoint at batch 6.
    with DataLoader(Faulty(N, fail=fail), num_threads=1, max_len=1, **options) as loader:
        for batch in loader:
            if batch == 6:
                state = json_round_trip(loader.state_dict())
                break
    assert state["errors"] == 1 and [r.index for r in loader.errors] == [3]
    resumed_loader = DataLoader(Faulty(N, fail=fail), num_threads=4, **options)
    resumed_loader.load_state_dict(state)
    # The budget of 1 counts the failure before the checkpoint: the second one is past it.
    with resumed_loader, pytest.raises(ErrorBudgetExceeded, match="2 failed calls") as info:
        list(resumed_loader)
    # Its message names the first records, the one before the resume first.
    assert "First: epoch 0 index 3: ValueError: bad 3; epoch 0 index 30: KeyError" in str(info.value)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["epoch"], r["index"]) for r in records] == [(0, 3), (0, 30)]


def test_a_failure_made_but_not_delivered_before_the_checkpoint_is_not_counted_twice():
    fn = Reaches(N, fail={12: ValueError}, mark=13)
    options = dict(ordered=True, on_error="skip", max_errors=1)
    with DataLoader(fn, num_threads=1, max_len=8, **options) as loader:
        for batch in loader:
            if batch == 5:
                # One thread: once it calls index 13, index 12's failure is recorded and
                # queued, ahead of its turn; it is not delivered when the state is taken.
                assert fn.reached.wait(5)
                state = json_round_trip(loader.state_dict())
                break
    assert [r.index for r in loader.errors] == [12]
    assert state["done"] == [[0, 6]]
    # Made again after the resume, index 12 fails again: one failed index, within a budget of 1.
    (rest,), loader = resumed(Faulty(N, fail={12: ValueError}), state, num_threads=2, **options)
    assert rest == [i for i in range(6, N) if i != 12]
    final = loader.state_dict()
    assert (final["epoch"], final["errors"], final["calls"]) == (1, 1, N)


class Recorder:
    def __init__(self, stop_at=None):
        self.batches = []
        self.stop_at = stop_at

    def __call__(self, batch):
        if len(self.batches) == self.stop_at:
            raise KeyboardInterrupt
        self.batches.append(batch)


def test_train_state_round_trip_resumes_mid_epoch_with_its_history():
    def make(task, threads):
        return Train(task, Indices(), max_nthread=threads, shuffle=True, seed=8, ordered=True)

    uninterrupted = Recorder()
    make(uninterrupted, 3).run(3)

    task = Recorder(stop_at=N + 15)  # stops in the second epoch
    train = make(task, 3)
    with pytest.raises(KeyboardInterrupt):
        train.run(3)
    state = json_round_trip(train.state_dict())
    assert len(state["history"]) == 1 and state["train"]["epoch"] == 1

    rest = Recorder()
    again = make(rest, 1)
    again.load_state_dict(state)
    history = again.run(2)
    # The step the interrupt came in did not train on its batch: the state counts batches trained, so it comes again.
    assert [*task.batches, *rest.batches] == uninterrupted.batches
    assert [h.epoch for h in history] == [0, 1, 2]
    assert [h.batches for h in history] == [N, N - 15, N]
    assert history[0].train.seconds == state["history"][0]["train"]["seconds"]
    after = again.state_dict()["train"]
    assert (after["epoch"], after["done"], after["seed"]) == (3, [], state["train"]["seed"])


@pytest.mark.parametrize("ordered", [False, True])
def test_a_state_of_the_batches_trained_leaves_out_those_delivered_but_not_trained(ordered):
    fail = {5: ValueError}
    with DataLoader(Faulty(N, fail=fail), num_threads=3, ordered=ordered, on_error="skip") as loader:
        delivered = take(loader, 12)
        state = json_round_trip(loader.state_dict(batches=9))  # a consumer that trained on 9 of them
        assert json_round_trip(loader.state_dict(batches=12)) == json_round_trip(loader.state_dict())
    (rest,), _ = resumed(Faulty(N, fail=fail), state, num_threads=2, on_error="skip")
    assert sorted(delivered[:9] + rest) == [i for i in range(N) if i not in fail]
    with DataLoader(Indices(), num_threads=2) as loader:
        whole = list(loader)
        assert loader.state_dict(batches=len(whole))["done"] == [] and loader.state_dict(batches=39)["epoch"] == 0


def test_a_train_state_taken_in_main_task_after_its_step_counts_that_batch():
    states = []

    def task(batch):
        if len(states) < 1 and batch == 4:
            time.sleep(0.2)  # the loader threads deliver ahead meanwhile
            states.append(json_round_trip(train.state_dict()))  # after this step: batches 0-4 count
        return batch

    train = Train(task, Indices(), max_nthread=3, max_len=8, ordered=True, shuffle=False)
    train.run(1)
    assert states[0]["train"]["epoch"] == 0 and states[0]["train"]["done"] == [[0, 5]]
    assert train.state_dict()["train"]["epoch"] == 1  # between epochs: the next one, whole
