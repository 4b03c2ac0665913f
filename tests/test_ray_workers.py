"""DataLoader(workers=RayWorkers(...)): the threaded loader's guarantees with the calls made in Ray actors.

The tests share one loopback cluster, started once for the module: a head and two
nodes on 127.0.0.1, one CPU each. Each loader starts its own one or two actors.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import ray
from ray._private import ray_constants
from ray.cluster_utils import Cluster

from parallel_loader import DataLoader, Train, WorkerProcessDied, as_tf_dataset
from parallel_loader._calls.remote_errors import RemoteTraceback
from parallel_loader.ray import RayWorkers
from parallel_loader.tensorflow._tf_data import loader_of
from parallel_loader.video import VideoDataset, VideoDecodeError

from . import process_data as data
from .video_files import truncate, write_video

pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWO = RayWorkers(actors=2, calls_per_actor=2)
# The cluster's processes inherit these: every node on 127.0.0.1 whatever the machine's other addresses,
# and the actors find the tests' yield functions (tests.process_data).
ENVIRONMENT = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": lambda _: "0",
    "PYTHONPATH": lambda saved: os.pathsep.join(p for p in (ROOT, saved) if p),
}


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """A head and two nodes on 127.0.0.1, one CPU each; this process connected to it."""
    saved = {key: os.environ.get(key) for key in ENVIRONMENT}
    os.environ.update({key: value(saved[key]) for key, value in ENVIRONMENT.items()})
    ray_constants.ENABLE_RAY_CLUSTER = False  # as the variable says, for this process's own Ray
    loopback = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for _ in range(2):
            loopback.add_node(num_cpus=1)
        ray.init(address=loopback.address, logging_level="WARNING", log_to_driver=False)
        yield loopback
    finally:
        ray.shutdown()
        loopback.shutdown()
        ray_constants.ENABLE_RAY_CLUSTER = True
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def gone(actors, timeout: float = 10.0) -> bool:
    """Whether each actor has ended within ``timeout`` seconds: a call to it fails as an actor error.

    Ray kills an actor asynchronously: a call sent a moment after ``ray.kill`` may still be answered.
    """
    deadline = time.monotonic() + timeout
    for actor in actors:
        while True:
            try:
                ray.get(actor.hook.remote("__len__", 0), timeout=timeout)
            except ray.exceptions.RayActorError:
                break
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
    return True


def test_every_index_once_in_the_shuffled_order_of_threads_from_actors_on_two_nodes():
    fn = data.Arrays(length=12)
    with DataLoader(fn, shuffle=True, seed=5, ordered=True, workers=TWO) as loader:
        epochs = [[int(b["labels"][1]) for b in loader] for _ in range(2)]
        pids = {b["pid"] for b in loader}
        stats = loader.stats()
    with DataLoader(fn, num_threads=2, shuffle=True, seed=5, ordered=True) as threads:
        expected = [[int(b["labels"][1]) for b in threads] for _ in range(2)]
    assert epochs == expected
    assert sorted(epochs[0]) == list(range(12)) and epochs[0] != epochs[1]
    assert os.getpid() not in pids and len(pids) == 2
    assert stats.threads == 4 and sum(s.count for s in stats.per_actor.values()) == stats.calls.count >= 36
    assert sorted(stats.per_actor) == ["DataLoader-actor-0", "DataLoader-actor-1"] and stats.transfer_seconds > 0


def test_batches_cross_as_writable_arrays_of_their_dtype_and_unordered_loses_none():
    with DataLoader(data.Arrays(length=8, size=160), workers=TWO) as loader:
        batches = list(loader)
    assert sorted(int(b["labels"][1]) for b in batches) == list(range(8))
    for batch in batches:
        image = batch["image"]
        assert image.dtype == np.uint8 and image.shape == (160, 160, 3) and image.flags.writeable
        assert (image == int(batch["labels"][1])).all()


def test_resume_with_another_actor_count_delivers_the_rest_in_order():
    fn = data.Arrays(length=10)
    with DataLoader(fn, shuffle=True, seed=2, ordered=True, workers=TWO) as first:
        it = iter(first)
        head = [int(next(it)["labels"][1]) for _ in range(4)]
        state = first.state_dict()
    with DataLoader(fn, shuffle=True, seed=2, ordered=True, workers=RayWorkers(actors=1)) as second:
        second.load_state_dict(state)
        rest = [int(b["labels"][1]) for b in second]
    with DataLoader(fn, shuffle=True, seed=2, ordered=True) as threads:
        expected = [int(b["labels"][1]) for b in threads]
    assert head + rest == expected


def test_an_error_comes_as_itself_with_the_actors_traceback_and_skip_records_it(tmp_path):
    fn = data.Arrays(length=6, fail_at=(3,))
    with DataLoader(fn, workers=TWO, ordered=True) as loader, pytest.raises(ValueError, match="bad index 3") as info:
        list(loader)
    assert type(info.value) is ValueError and isinstance(info.value.__cause__, RemoteTraceback)
    assert "Ray actor" in "".join(info.value.__notes__) and "in __call__" in str(info.value.__cause__)
    log = tmp_path / "errors.jsonl"
    with DataLoader(fn, workers=TWO, on_error="skip", error_log=log) as loader:
        got = sorted(int(b["labels"][1]) for b in loader)
        errors = loader.errors
    assert got == [0, 1, 2, 4, 5]
    assert [(e.index, e.type) for e in errors] == [(3, "ValueError")] and log.read_text().count("\n") == 1


def test_a_truncated_video_raises_the_video_decode_error_naming_it(tmp_path):
    bad = str(truncate(write_video(tmp_path / "v.avi", 30, fourcc="MJPG"), 0.5))  # 6 of 30 frames decode
    loader = DataLoader(VideoDataset([(bad, 0)] * 4, batch_size=4, clip_len=8, size=(16, 20)), workers=TWO)
    with loader, pytest.raises(VideoDecodeError) as raised:
        list(loader)
    assert type(raised.value) is VideoDecodeError and raised.value.path == bad and bad in str(raised.value)
    assert any("Ray actor" in note for note in raised.value.__notes__)


def test_epoch_hooks_and_reports_reach_the_actors_and_the_loader():
    fn = data.Hooked(length=4)
    with DataLoader(fn, workers=RayWorkers(actors=1), overlap_epochs=False) as loader:
        seen = [sorted(loader) for _ in range(2)]
    assert seen == [[(e, i) for i in range(4)] for e in range(2)]
    assert fn.calls == [("begin", 0), ("end", 0), ("begin", 1), ("end", 1)]
    with DataLoader(data.Reporting(), workers=RayWorkers(actors=1), on_error="skip", overlap_epochs=False) as loader:
        assert sorted(loader) == [0, 1, 2, 3]
        (record,) = loader.errors
    assert (record.index, record.type) == (1, "OSError") and record.context["pid"] != os.getpid()


def test_a_killed_actor_is_reported_with_the_index_and_fast():
    loader = DataLoader(data.Trouble("kill", at=2, length=6), workers=RayWorkers(actors=1, calls_per_actor=1))
    started = time.monotonic()
    with loader, pytest.raises(WorkerProcessDied, match=r"DataLoader-actor-0 .* died while making index 2") as info:
        list(loader)
    assert info.value.index == 2 and time.monotonic() - started < 30


def test_with_max_restarts_a_dead_actor_is_replaced_and_its_call_made_once(tmp_path):
    workers = RayWorkers(actors=1, calls_per_actor=2, max_restarts=1)
    with DataLoader(data.DiesOnce(str(tmp_path / "died"), at=2), workers=workers, ordered=True) as loader:
        got = list(loader)
        again = sorted(loader)
    assert got == list(range(6)) and again == list(range(6)) and loader.errors == []


def test_a_stuck_call_is_killed_with_its_stack_and_under_skip_the_epoch_goes_on():
    workers = RayWorkers(actors=2, calls_per_actor=1)
    with DataLoader(data.Trouble("hang", at=1, length=6), workers=workers, call_timeout=2, on_error="skip") as loader:
        first = loader._yield_calls.actors
        got = sorted(loader)
        (record,) = loader.errors
        replaced = loader._yield_calls.actors
    assert got == [0, 2, 3, 4, 5] and record.index == 1 and record.type == "LoaderTimeout"
    assert "wait_for_ever" in record.message and "DataLoader-actor-" in record.message
    killed = [a for a, b in zip(first, replaced, strict=True) if a._actor_id != b._actor_id]
    assert killed and gone(killed)


def test_close_and_ctrl_c_leave_no_actor_behind():
    with DataLoader(data.Arrays(length=6), workers=TWO) as loader:
        next(iter(loader))
        actors = loader._yield_calls.actors
    assert gone(actors)
    with pytest.raises(KeyboardInterrupt), DataLoader(data.Arrays(length=50), workers=TWO) as loader:
        for _ in loader:
            actors = loader._yield_calls.actors
            raise KeyboardInterrupt
    assert gone(actors)


def test_what_cannot_work_is_refused_at_construction(monkeypatch):
    with pytest.raises(ValueError, match="processes=P both say where the calls run"):
        DataLoader(data.Arrays(), workers=TWO, processes=1)
    with pytest.raises(ValueError, match="needs a yield function with __len__"):
        DataLoader(lambda: 1, workers=TWO)
    with pytest.raises(TypeError, match="cannot be pickled"):
        DataLoader(data.Unpicklable(), workers=TWO)
    with pytest.raises(TypeError, match=r"workers must be a parallel_loader\.ray\.RayWorkers"):
        DataLoader(data.Arrays(), workers=2)
    with pytest.raises(ValueError, match="actors must be"):
        RayWorkers(actors=0)
    with pytest.raises(ValueError, match="resources must map names"):
        RayWorkers(actors=1, resources={"CPU": -1})
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a process not yet connected
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=r"the Ray cluster at 127\.0\.0\.1:1 does not answer"):
        DataLoader(data.Arrays(), workers=RayWorkers(actors=1, address="127.0.0.1:1"))
    assert time.monotonic() - started < 30


def test_train_and_model_fit_take_batches_from_actors():
    import tensorflow as tf

    seen = []
    Train(lambda batch: seen.append(int(batch["labels"][1])), data.Arrays(length=4), workers=TWO).run(1)
    assert sorted(seen) == [0, 1, 2, 3]
    dataset = as_tf_dataset(data.Samples(), batch_size=5, workers=TWO)
    model = tf.keras.Sequential([tf.keras.Input((400,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(
        dataset.map(lambda x, y: (tf.cast(x, tf.float32) / 10, tf.cast(y, tf.float32))),
        epochs=2,
        shuffle=False,
        verbose=0,
    )
    assert len(history.history["loss"]) == 2 and loader_of(dataset).workers is TWO


def test_the_benchmark_compares_the_cpu_per_clip_of_threads_and_actors(cluster, tmp_path):
    from benchmarks import ray_workers

    argv = ["--address", cluster.address, "--videos", "4", "--seconds", "1", "--clips", "2", "--clip-len", "4"]
    report = ray_workers.main([*argv, "--size", "32", "--epochs", "1", "--out", str(tmp_path)])
    results = report["results"]
    assert sorted(results) == ["actors=2, calls_per_actor=2", "threads=2"]
    assert results["threads=2"]["ratio"] == 1.0 and results["actors=2, calls_per_actor=2"]["cpu ms/clip"] > 0
    assert ray.is_initialized()  # the cluster it was given is left as it was
