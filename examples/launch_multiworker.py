"""Start workers of examples/train_multiworker.py on this machine, wait for them, and check they agree.

    python examples/launch_multiworker.py --workers 2 -- --data data/sample --epochs 20

Asks the OS for one free 127.0.0.1 port per worker, gives each worker its
``TF_CONFIG``, and prints their output line by line with a ``[worker i]``
prefix. It waits at most ``--timeout`` seconds, and always ends every worker:
on the timeout, on Ctrl-C, and as soon as one fails (the others would wait in
a collective for ever). Then it reads the workers' reports and prints, per
worker, the batches and clips it read and its final validation accuracy;
whether in every epoch the shards were disjoint and covered the epoch; and
whether the workers' final weights are identical. Exits with status 1 when a
worker failed, a check failed, or the accuracy is below ``--min-val-accuracy``.
Everything after ``--`` goes to every worker, and so do the launcher's own
``--verbose`` (TensorFlow's start-up log) and ``--no-progress`` (no progress
line per epoch). A worker's output is a pipe, not a terminal, so its progress
comes as one line per epoch, not a bar.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from example_options import add_output_arguments

WORKER = Path(__file__).resolve().with_name("train_multiworker.py")
REAP_SECONDS = 5.0  # how long a worker gets to end after SIGTERM before SIGKILL


class WorkerFailed(RuntimeError):
    """A worker exited with a non-zero status, or the workers ran out of time."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports the OS says are free on 127.0.0.1, all held open until all are chosen."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(ports: Sequence[int], index: int) -> str:
    """The ``TF_CONFIG`` of worker ``index`` in a cluster of workers at ``127.0.0.1:port``."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


def run_workers(
    worker_args: Sequence[str],
    workers: int,
    out: Path,
    timeout: float,
    echo: Callable[[str], None] = print,
    script: Path = WORKER,
) -> list[dict[str, Any]]:
    """Run ``workers`` copies of ``script`` with ``worker_args`` and return their reports, in worker order.

    Worker ``i`` gets ``--report out/worker<i>.json`` added to its arguments, and
    its output lines go to ``echo`` (called from a thread per worker). Every
    process is ended before this returns or raises, whatever happens.

    Raises:
        WorkerFailed: a worker exited with a non-zero status, or they did not all
            end within ``timeout`` seconds.
    """
    ports = free_ports(workers)
    finished: queue.Queue[tuple[int, int]] = queue.Queue()
    processes: list[subprocess.Popen[str]] = []
    pumps: list[threading.Thread] = []
    try:
        for index in range(workers):
            # TensorFlow's log level is left to the worker: it hides the start-up lines unless --verbose.
            env = dict(os.environ, TF_CONFIG=tf_config(ports, index))
            command = [sys.executable, "-u", str(script), *worker_args, "--report", str(out / f"worker{index}.json")]
            process = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
            )
            processes.append(process)
            pump = threading.Thread(
                target=_pump, args=(process, index, echo, finished), name=f"worker{index}-output", daemon=True
            )
            pump.start()
            pumps.append(pump)
        deadline = time.monotonic() + timeout
        for _ in range(workers):
            try:
                index, status = finished.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise WorkerFailed(f"the workers did not finish within {timeout:g} s; all were stopped") from None
            if status != 0:
                raise WorkerFailed(f"worker {index} exited with status {status}; the others were stopped")
    finally:
        _reap(processes)
        for pump in pumps:
            pump.join(REAP_SECONDS)  # the pipe is closed once its process is gone
    return [json.loads((out / f"worker{index}.json").read_text(encoding="utf-8")) for index in range(workers)]


def check(reports: list[dict[str, Any]]) -> tuple[bool, list[str]]:
    """Compare the workers' reports: per worker what it read, shards per epoch, identical weights."""
    lines, ok = [], True
    for r in reports:
        batches = sum(len(b) for b in r["read"].values())
        lines.append(
            f"worker {r['worker']}: read {r['clips']} clips ({batches} batches of {r['clips_per_batch']}) "
            f"in {len(r['read'])} epochs; final validation accuracy {r['val_accuracy']:.3f}"
        )
    total = reports[0]["batches_per_epoch"]
    for epoch in sorted(reports[0]["read"], key=int):
        shards = [r["read"].get(epoch, []) for r in reports]
        taken = [i for shard in shards for i in shard]
        disjoint = len(taken) == len(set(taken))
        covered = set(taken) == set(range(total))
        equal = len({len(shard) for shard in shards}) == 1
        # With a padded remainder a few batches are read twice by design.
        padded = total % len(reports) != 0
        if not (covered and equal and (disjoint or padded)):
            ok = False
            lines.append(
                f"epoch {epoch}: shards {[sorted(s) for s in shards]}: disjoint {disjoint}, "
                f"cover the {total} batches {covered}, equal lengths {equal}"
            )
    if ok:
        epochs = len(reports[0]["read"])
        lines.append(f"shards: in each of {epochs} epochs disjoint, equal, and covering all {total} batches")
    weights = [np.load(r["weights"]) for r in reports]
    arrays = [[w[name] for name in w.files] for w in weights]
    identical = all(
        len(a) == len(arrays[0]) and all(np.array_equal(x, y) for x, y in zip(a, arrays[0], strict=True))
        for a in arrays[1:]
    )
    largest = max(
        (float(np.max(np.abs(x - y))) for a in arrays[1:] for x, y in zip(a, arrays[0], strict=True)), default=0.0
    )
    count = sum(x.size for x in arrays[0])
    lines.append(
        f"weights: {'identical' if identical else 'DIFFERENT'} on all {len(reports)} workers "
        f"({count:,} values; largest difference {largest:g})"
    )
    return ok and identical, lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    worker_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for the whole run")
    parser.add_argument("--out", type=Path, help="folder for the reports and weights (default: a temporary one)")
    parser.add_argument("--min-val-accuracy", type=float, default=0.0, help="fail below this final accuracy")
    add_output_arguments(parser)  # passed on to every worker
    args = parser.parse_args(own)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    # Before the arguments after --, so that those win where both are given.
    passed_on = (["--verbose"] if args.verbose else []) + (["--no-progress"] if args.progress is False else [])
    worker_args = passed_on + worker_args
    # Ctrl-C reaches the workers too (same process group); SIGTERM from a job runner should end them as well.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    with tempfile.TemporaryDirectory(prefix="multiworker-") as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        lock = threading.Lock()  # one line at a time from the workers' output threads

        def echo(line: str) -> None:
            with lock:
                print(line, flush=True)

        try:
            reports = run_workers(worker_args, args.workers, out, args.timeout, echo)
        except WorkerFailed as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        ok, lines = check(reports)
    print("\n".join(lines))
    low = [r["worker"] for r in reports if r["val_accuracy"] < args.min_val_accuracy]
    if low:
        print(f"error: validation accuracy below --min-val-accuracy {args.min_val_accuracy} on workers {low}")
    return 0 if ok and not low else 1


def _pump(process: subprocess.Popen[str], index: int, echo: Callable[[str], None], finished: queue.Queue) -> None:
    """Pass a worker's output on with its prefix; when it ends, report its exit status."""
    assert process.stdout is not None
    for line in process.stdout:
        echo(f"[worker {index}] {line.rstrip()}")
    finished.put((index, process.wait()))


def _reap(processes: list[subprocess.Popen[str]]) -> None:
    """End every process still running: SIGTERM, then SIGKILL after ``REAP_SECONDS``; wait for each."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + REAP_SECONDS
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    sys.exit(main())
