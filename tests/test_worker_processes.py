"""DataLoader(processes=P): the threaded loader's guarantees with the calls made in worker processes.

Each test starts its own worker processes (a fresh interpreter: about a quarter of a second);
they are kept to one or two processes of one or two threads.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
import traceback

import numpy as np
import psutil
import pytest

from parallel_loader import DataLoader, LoaderTimeout, Train, WorkerProcessDied, as_tf_dataset
from parallel_loader._calls import worker_payload, worker_processes
from parallel_loader._calls.worker_launch import dumps as worker_processes_dumps
from parallel_loader._calls.worker_launch import executable, worker_children
from parallel_loader._calls.worker_processes import ProcessCalls
from parallel_loader.tensorflow._tf_data import loader_of

from . import process_data as data

pytestmark = pytest.mark.timeout(60)


def shm_left() -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"pl{os.getpid()}_")]


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """After each test: no worker process alive, no shared-memory block of this process."""
    yield
    gc.collect()
    assert worker_children() == []
    assert shm_left() == []


@pytest.fixture
def wrapped_python(tmp_path):
    """Make a script the interpreter of ``multiprocessing.set_executable``; put the old one back after.

    The script writes its pid to ``ran.txt`` and runs this interpreter with its arguments.
    ``gate`` given, it first waits to read a line from that FIFO.
    """
    before = multiprocessing.spawn.get_executable()

    def make(gate: str | None = None):
        record = tmp_path / "ran.txt"
        script = tmp_path / "python-wrapper"
        wait = f'read line < "{gate}"\n' if gate else ""
        script.write_text(f'#!/bin/sh\necho "$$" >> "{record}"\n{wait}exec "{sys.executable}" "$@"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        multiprocessing.set_executable(str(script))
        return record

    yield make
    multiprocessing.set_executable(before)


def started_by_wrapper(record, count: int, timeout: float = 30.0) -> list[int]:
    """The pids the wrapper recorded, once it has recorded ``count`` of them (or ``timeout`` passed)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [int(p) for p in record.read_text().split()] if record.exists() else []
        if len(pids) >= count or time.monotonic() >= deadline:
            return pids
        time.sleep(0.02)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_every_index_once_per_epoch_in_shuffled_order_as_threads_give_it():
    fn = data.Arrays(length=12)
    with DataLoader(fn, num_threads=1, processes=2, shuffle=True, seed=5, ordered=True) as loader:
        epochs = [[int(b["labels"][1]) for b in loader] for _ in range(2)]
        pids = set(loader._yield_calls.pids)
    with DataLoader(fn, num_threads=2, shuffle=True, seed=5, ordered=True) as threads:
        expected = [[int(b["labels"][1]) for b in threads] for _ in range(2)]
    assert epochs == expected
    assert sorted(epochs[0]) == list(range(12)) and epochs[0] != epochs[1]
    assert os.getpid() not in pids and len(pids) == 2


def test_batches_are_arrays_in_their_structure_from_shared_memory_and_unordered_mode_loses_none():
    with DataLoader(data.Arrays(length=10, size=160), num_threads=2, processes=1) as loader:
        batches = list(loader)
    assert sorted(int(b["labels"][1]) for b in batches) == list(range(10))
    for batch in batches:
        index = batch["labels"][1]
        assert batch["image"].shape == (160, 160, 3) and (batch["image"] == index).all()
        np.testing.assert_array_equal(batch["labels"][0], np.arange(300) + index)
        assert not batch["image"].flags.owndata  # a view of a block, not an unpickled copy
        assert batch["pid"] != os.getpid()
    del batches, batch


def test_sample_level_batching_puts_each_sample_in_one_batch():
    with DataLoader(data.Samples(), num_threads=1, processes=2, batch_size=3, shuffle=True, seed=1) as loader:
        epoch = [b for b in loader]
    samples = sorted(int(i) for _, labels in epoch for i in labels)
    assert samples == list(range(10))
    for arrays, labels in epoch:
        assert arrays.shape == (len(labels), 400) and (arrays[:, 0] == labels).all()
    del epoch, arrays


def test_epoch_hooks_reach_the_workers_and_the_consumers_copy():
    fn = data.Hooked(length=4)
    with DataLoader(fn, num_threads=1, processes=2, first_epoch=3) as loader:
        epochs = [sorted(loader) for _ in range(2)]
    assert epochs == [[(3, i) for i in range(4)], [(4, i) for i in range(4)]]
    assert fn.calls == [("begin", 3), ("end", 3), ("begin", 4), ("end", 4)]


def test_an_error_comes_with_the_workers_traceback_and_names_process_thread_and_index():
    loader = DataLoader(data.Arrays(fail_at=(3,)), num_threads=1, processes=1)
    with loader, pytest.raises(ValueError, match="bad index 3") as info:
        list(loader)
    text = "".join(traceback.format_exception(info.value))
    assert 'raise ValueError(f"bad index {index}")' in text  # the worker's own line
    notes = "\n".join(info.value.__notes__)
    assert "worker process DataLoader-process-0" in notes and "thread DataLoader-process-0-thread-0" in notes
    assert "for index 3" in notes


def test_skipped_errors_are_recorded_in_the_budget_and_the_manifest(tmp_path):
    log = tmp_path / "errors.jsonl"
    fn = data.Arrays(length=10, fail_at=(2, 7))
    with DataLoader(fn, num_threads=1, processes=2, on_error="skip", max_errors=2, error_log=log) as loader:
        got = sorted(int(b["labels"][1]) for b in loader)
        errors = loader.errors
    assert got == [0, 1, 3, 4, 5, 6, 8, 9]
    assert sorted(e.index for e in errors) == [2, 7] and {e.type for e in errors} == {"ValueError"}
    assert sorted(json.loads(line)["index"] for line in log.read_text().splitlines()) == [2, 7]


def test_resume_with_other_process_and_thread_counts_delivers_the_rest_in_order():
    fn = data.Arrays(length=12)
    with DataLoader(fn, num_threads=1, processes=2, shuffle=True, seed=9, ordered=True) as loader:
        order = []
        for batch in loader:
            order.append(int(batch["labels"][1]))
            if len(order) == 5:
                break
        state = loader.state_dict()
        del batch
    with DataLoader(fn, num_threads=2, processes=1, shuffle=True, seed=9, ordered=True) as resumed:
        resumed.load_state_dict(state)
        rest = [int(b["labels"][1]) for b in resumed]
    with DataLoader(fn, num_threads=1, shuffle=True, seed=9, ordered=True) as reference:
        assert order + rest == [int(b["labels"][1]) for b in reference]


def test_stats_count_the_batches_and_the_loader_threads():
    with DataLoader(data.Arrays(length=6), num_threads=2, processes=2, overlap_epochs=False) as loader:
        list(loader)
        stats = loader.stats()
    assert stats.batches == 6 and stats.calls.count == 6
    assert stats.threads == 4  # a loader thread per worker thread


def test_shards_split_the_epoch():
    fn = data.Arrays(length=9)
    shards = []
    for index in range(2):
        with DataLoader(fn, num_threads=1, processes=1, num_shards=2, shard_index=index, shuffle=True, seed=4) as shard:
            shards.append([int(b["labels"][1]) for b in shard])
    assert sorted(shards[0] + shards[1][:-1]) == list(range(9))  # the short shard is padded by one
    assert len(shards[0]) == len(shards[1]) == 5


def test_thread_init_runs_in_each_worker_thread_with_its_number():
    with DataLoader(data.ThreadNumbers(), num_threads=2, processes=2, thread_init=data.remember_number) as loader:
        batches = list(loader)
    assert sorted(i for i, _, _ in batches) == list(range(8))
    numbers = {(number, pid) for _, number, pid in batches}
    assert {n for n, _ in numbers} <= {0, 1, 2, 3}
    by_pid: dict[int, set[int]] = {}
    for number, pid in numbers:
        by_pid.setdefault(pid, set()).add(number // 2)
    assert all(len(places) == 1 for places in by_pid.values())  # numbers 0-1 in one process, 2-3 in the other


def test_a_failing_thread_init_is_raised_in_the_consumer():
    loader = DataLoader(data.ThreadNumbers(), num_threads=1, processes=1, thread_init=data.failing_init)
    with loader, pytest.raises(OSError, match="no decoder for thread 0") as info:
        list(loader)
    assert any("thread_init in worker process" in note for note in info.value.__notes__)


def test_what_cannot_cross_is_refused_at_construction():
    with pytest.raises(TypeError, match=r"cannot be pickled.*Keep open files, locks"):
        DataLoader(data.Unpicklable(), processes=1)
    lock = threading.Lock()
    with pytest.raises(TypeError, match="cannot be pickled"):
        DataLoader(data.Arrays(), processes=1, thread_init=lambda n: lock.locked())
    with pytest.raises(ValueError, match="stream"):
        DataLoader(lambda: 1, processes=1)
    with pytest.raises(ValueError, match="auto"):
        DataLoader(data.Arrays(), num_threads="auto", processes=1)
    with pytest.raises(ValueError, match="processes must be"):
        DataLoader(data.Arrays(), processes=-1)


def test_lambdas_and_local_classes_cross_by_value():
    class Squares(data.YieldFunction):
        def __len__(self) -> int:
            return 4

        def __call__(self, index: int) -> dict[str, np.ndarray]:
            return {"x": np.full(3, index * index), "init": np.array(seen)}

    seen: list[int] = []
    init = lambda n: seen.append(n)  # noqa: E731
    with DataLoader(Squares(), num_threads=1, processes=1, ordered=True, thread_init=init) as loader:
        batches = list(loader)
    assert [int(b["x"][0]) for b in batches] == [0, 1, 4, 9]
    assert [b["init"].tolist() for b in batches] == [[0]] * 4  # the worker's own copy of seen, changed there
    assert seen == []


# A training script: TensorFlow imported at its top, the yield function and an error defined in it.
_SCRIPT = """
import os, sys
import psutil
import tensorflow as tf
import numpy as np
from parallel_loader import DataLoader, YieldFunction


class Bad(Exception):
    pass


class Facts(YieldFunction):
    def __init__(self, fail=False):
        self.fail = fail

    def __len__(self):
        return 4

    def __call__(self, index):
        if self.fail:
            raise Bad("failed")
        rss = psutil.Process().memory_info().rss
        return {"tf": np.array("tensorflow" in sys.modules), "rss": np.array(rss), "pid": np.array(os.getpid())}


if __name__ == "__main__":
    with DataLoader(Facts(), num_threads=1, processes=2, ordered=True) as loader:
        seen = list(loader)
    try:
        with DataLoader(Facts(fail=True), num_threads=1, processes=1) as loader:
            list(loader)
    except Bad as exc:
        print("raised", type(exc) is Bad, exc)
    for b in seen:
        print(int(b["tf"]), int(b["rss"]), int(b["pid"]), os.getpid())
"""


def test_a_worker_runs_nothing_of_the_script_and_imports_only_what_the_yield_function_names(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0] == "raised True failed"  # the script's own exception class, as itself
    rows = [[int(v) for v in line.split()] for line in lines[1:] if line]
    assert len(rows) == 4
    for imported, rss, pid, consumer in rows:
        assert imported == 0 and pid != consumer
        assert rss < 250 * 2**20  # a worker holds what it runs: no TensorFlow, about 60 MB


def test_a_stuck_call_is_killed_with_its_stack_and_raised_as_a_timeout():
    loader = DataLoader(data.Trouble("hang"), num_threads=1, processes=1, call_timeout=0.5)
    with loader, pytest.raises(LoaderTimeout) as info:
        list(loader)
    assert info.value.index == 2
    assert "wait_for_ever" in str(info.value) and "DataLoader-process-0" in str(info.value)


def test_with_skip_a_stuck_call_is_recorded_its_process_replaced_and_the_others_resent():
    fn = data.Trouble("hang", at=3, length=8)
    with DataLoader(fn, num_threads=2, processes=1, call_timeout=0.5, on_error="skip") as loader:
        first = loader._yield_calls.pids
        got = sorted(loader)
        assert loader._yield_calls.pids != first
        errors = loader.errors
    assert got == [0, 1, 2, 4, 5, 6, 7]
    assert [(e.index, e.type) for e in errors] == [(3, "LoaderTimeout")]


def test_a_worker_killed_by_a_signal_is_reported_with_its_exit_code_and_index():
    loader = DataLoader(data.Trouble("kill", at=4), num_threads=1, processes=1)
    with loader, pytest.raises(WorkerProcessDied, match=r"exit code -9 \(SIGKILL\) while making index 4") as info:
        list(loader)
    assert (info.value.exitcode, info.value.index) == (-9, 4)


def test_with_skip_a_dead_worker_is_replaced_and_the_epoch_goes_on():
    with DataLoader(data.Trouble("kill", at=1, length=6), num_threads=1, processes=1, on_error="skip") as loader:
        got = sorted(loader)
        errors = loader.errors
    assert got == [0, 2, 3, 4, 5]
    assert [(e.index, e.type) for e in errors] == [(1, "WorkerProcessDied")]


def test_ctrl_c_in_the_consumer_ends_the_workers_and_unlinks_the_blocks():
    with pytest.raises(KeyboardInterrupt), DataLoader(data.Arrays(length=50), num_threads=1, processes=2) as loader:
        pids = [None]
        for _ in loader:
            pids = loader._yield_calls.pids
            raise KeyboardInterrupt
    assert pids[0] is not None and not any(psutil.pid_exists(p) and _alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_workers_exit_when_the_consuming_process_is_killed(tmp_path):
    script = textwrap.dedent(
        """
        import sys, time
        from parallel_loader import DataLoader
        from tests.process_data import Arrays
        if __name__ == "__main__":
            loader = DataLoader(Arrays(length=10**6), num_threads=1, processes=2, max_len=2)
            it = iter(loader)
            next(it)
            while loader.stats().busy:  # the queue full, the workers idle: no block being made
                time.sleep(0.01)
            print(*loader._yield_calls.pids, flush=True)
            time.sleep(60)
        """
    )
    path = tmp_path / "consumer.py"
    path.write_text(script)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    consumer = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in consumer.stdout.readline().split()]
    finally:
        consumer.kill()
        consumer.wait(10)
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)
    while any(n.startswith(f"pl{consumer.pid}_") for n in os.listdir("/dev/shm")) and time.monotonic() < deadline:
        time.sleep(0.05)  # Python's resource tracker unlinks the dead consumer's blocks once the workers are gone
    assert not any(n.startswith(f"pl{consumer.pid}_") for n in os.listdir("/dev/shm"))


def test_train_passes_processes_to_its_loaders():
    seen = []
    trainer = Train(
        lambda batch: seen.append(("train", int(batch["labels"][1]))),
        data.Arrays(length=6),
        val_yield=data.Arrays(length=3),
        val_task=lambda batch: seen.append(("val", int(batch["labels"][1]))),
        num_threads=1,
        processes=2,
    )
    trainer.run(1)
    assert sorted(seen) == [("train", i) for i in range(6)] + [("val", i) for i in range(3)]


def test_as_tf_dataset_passes_processes_to_its_loaders():
    dataset = as_tf_dataset(data.Samples(), batch_size=4, num_threads=1, processes=1)
    for _ in range(2):
        labels = sorted(int(i) for _, batch_labels in dataset for i in batch_labels.numpy())
        assert labels == list(range(10))
    assert loader_of(dataset).processes == 1


def test_what_the_yield_function_reports_in_a_worker_reaches_the_loaders_errors():
    # Without overlap: a report from a call made ahead for the next epoch is recorded at once too.
    with DataLoader(data.Reporting(), num_threads=1, processes=1, on_error="skip", overlap_epochs=False) as loader:
        assert sorted(loader) == [0, 1, 2, 3]
        (record,) = loader.errors
    assert (record.index, record.type, record.context["path"]) == (1, "OSError", "clip_1.mp4")
    assert record.context["pid"] != os.getpid()  # reported in the worker, recorded here


def test_a_program_that_exits_without_close_leaves_no_worker_and_no_block(tmp_path):
    script = textwrap.dedent(
        """
        import os
        from parallel_loader import DataLoader
        from tests.process_data import Arrays
        if __name__ == "__main__":
            loader = DataLoader(Arrays(length=100, size=160), num_threads=1, processes=2, max_len=2)
            it = iter(loader)
            next(it)
            print(os.getpid(), *loader._yield_calls.pids, flush=True)
        """
    )
    path = tmp_path / "no_close.py"
    path.write_text(script)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root}, timeout=60
    )
    assert run.returncode == 0 and run.stderr == ""  # no worker reported dead as the program ends
    consumer, *pids = [int(p) for p in run.stdout.split()]
    assert len(pids) == 2 and not any(_alive(p) for p in pids)
    assert [n for n in os.listdir("/dev/shm") if n.startswith(f"pl{consumer}_")] == []


def test_workers_run_the_interpreter_multiprocessing_set_executable_names(wrapped_python):
    record = wrapped_python()
    assert os.fsdecode(executable()) == str(record.parent / "python-wrapper")
    with DataLoader(data.Arrays(length=4), num_threads=1, processes=2, ordered=True) as loader:
        assert [int(b["labels"][1]) for b in loader] == [0, 1, 2, 3]
        pids = loader._yield_calls.pids
    assert sorted(started_by_wrapper(record, 2)) == sorted(pids)


def test_a_slow_boot_holds_no_lock_and_close_ends_it_at_once_leaving_no_process_or_pipe(tmp_path, wrapped_python):
    # Each worker's interpreter waits on a gate that never opens, so its boot (4 MB, more than a
    # pipe holds) is never read. Another worker still starts, and close() ends both without waiting.
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    record = wrapped_python(str(gate))
    fds = open_fds()
    fn = data.Arrays(length=4)
    fn.ballast = np.zeros(4 << 20, np.uint8)
    calls = ProcessCalls(fn, 2, 1, stream=False, thread_init=None, report=lambda *a: None, name="slow", max_batches=2)
    failures: list[BaseException] = []

    def bind(number: int) -> None:
        try:
            calls.thread_init(number)
        except BaseException as exc:
            failures.append(exc)

    binders = [threading.Thread(target=bind, args=(n,), name=f"bind-{n}") for n in range(2)]
    try:
        binders[0].start()
        assert len(started_by_wrapper(record, 1)) == 1  # worker 0 runs; its boot waits on the gate
        binders[1].start()
        assert len(started_by_wrapper(record, 2)) == 2  # worker 1 started meanwhile: no lock held by the boot
        pids = calls.pids
        closer = threading.Thread(target=calls.close, name="closer")
        closer.start()
        closer.join(timeout=20)
        assert not closer.is_alive()  # close() did not wait for a boot that never ends
    finally:  # should it fail: end the gated interpreters, which ends every wait above
        for pid in started_by_wrapper(record, 0, timeout=0):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        for thread in binders:
            if thread.is_alive():
                thread.join(timeout=20)
        calls.close()
    assert not any(thread.is_alive() for thread in binders)
    assert sorted(type(f).__name__ for f in failures) == ["LoaderClosed", "LoaderClosed"]
    assert not any(_alive(p) for p in pids) and worker_children() == []
    failures.clear()  # their tracebacks hold the lanes
    binders.clear()
    calls = None
    gc.collect()
    assert open_fds() <= fds  # the boot pipes and the lanes closed


def test_one_pickle_is_sent_to_every_worker(monkeypatch):
    made = []
    for module in (worker_processes, worker_payload):  # the first pickle, and those made again after a hook
        monkeypatch.setattr(module, "dumps", lambda obj: made.append(1) or worker_processes_dumps(obj))
    with DataLoader(data.Arrays(length=8), num_threads=2, processes=2) as loader:
        assert sorted(int(b["labels"][1]) for b in loader) == list(range(8))
        assert all(loader._yield_calls.pids)
    assert len(made) == 1  # at construction, to check that it crosses


def test_a_worker_replaced_after_an_epoch_hook_starts_with_the_state_the_hook_left(tmp_path):
    fn = data.HookedDiesOnce(str(tmp_path / "died"), die_epoch=1, length=6)
    with DataLoader(fn, num_threads=1, processes=1, on_error="skip") as loader:
        epochs = [sorted(loader) for _ in range(2)]
        errors = loader.errors
    assert [(e.index, e.type) for e in errors] == [(2, "WorkerProcessDied")]
    assert epochs == [[(0, i) for i in range(6)], [(1, i) for i in range(6) if i != 2]]
