"""What a worker process costs to start: a training script that imports TensorFlow at its top, run as users run it.

``WORKER_SCRIPT`` is such a script. It defines its yield function itself, so the
function must cross to the workers from ``__main__``. It makes a ``DataLoader``
with worker processes, times the first batch from the loop's start, reads the
rest of the epoch (so every worker has run), and prints one JSON line: each
worker's resident memory, its CPU seconds so far (its start, which a loaded
machine does not stretch as it does the wall time), and whether TensorFlow is
loaded in it (a mapped TensorFlow library). ``run_script`` runs it in a new interpreter against any
tree of the package, so a tree from before a change can be measured alike. The
module knows nothing of the other benchmarks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["WORKER_SCRIPT", "run_script"]

WORKER_SCRIPT = '''
import json
import sys
import time

import {first_import}  # a training script's first import

import numpy as np
import psutil

from parallel_loader import DataLoader, YieldFunction


class Counting(YieldFunction):
    """A trivial yield function defined in the script: it crosses to the workers from __main__."""

    def __len__(self):
        return 32

    def __call__(self, index):
        return np.full((4, 16), index, np.float32)


def video_dataset(job):
    from parallel_loader.video import IndexCache, VideoDataset

    rows = [(path, k % 2) for k, path in enumerate(job["paths"])]
    return VideoDataset(rows, batch_size=1, clip_len=job["clip_len"], stride=job["stride"], size=tuple(job["size"]),
                        dtype="uint8", seed=0, classes=["a", "b"], index_cache=IndexCache(job["store"]))


def worker(pid):
    process = psutil.Process(pid)
    maps = [m.path for m in process.memory_maps()]
    cpu = process.cpu_times()
    return {"rss_mb": process.memory_info().rss / 2**20, "cpu_s": cpu.user + cpu.system,
            "tensorflow": any("/tensorflow/" in p for p in maps)}


def main():
    job = json.loads(sys.argv[1])
    video = job["kind"] == "video"
    data = video_dataset(job) if video else Counting()
    made = time.perf_counter()
    with DataLoader(data, num_threads=1, processes=job["processes"]) as loader:
        started = time.perf_counter()
        batches = iter(loader)
        next(batches)
        first = time.perf_counter()
        if video:  # one clip, then the worker as it is after it
            workers = [worker(pid) for pid in loader._yield_calls.pids if pid]
        else:
            for _ in batches:
                pass
            workers = [worker(pid) for pid in loader._yield_calls.pids if pid]
    print(json.dumps({"first_s": first - started, "first_from_made_s": first - made, "workers": workers}))


if __name__ == "__main__":
    main()
'''


def run_script(job: dict[str, Any], tree: Path, first_import: str = "tensorflow", timeout: float = 300) -> Any:
    """Run ``WORKER_SCRIPT`` with ``job`` in a new interpreter importing the package from ``tree``; its JSON.

    ``first_import`` is the module the script imports at its top (a lighter one only for smoke tests).

    Raises:
        RuntimeError: the script failed (its stderr is in the message).
    """
    with tempfile.TemporaryDirectory(prefix="host_scale_start_") as folder:
        script = Path(folder) / "train.py"
        script.write_text(WORKER_SCRIPT.replace("{first_import}", first_import), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script), json.dumps(job)],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=os.environ | {"PYTHONPATH": str(tree)},
        )
    if done.returncode != 0:
        raise RuntimeError(f"the worker-start script failed against {tree}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
