"""Sample tables at scale: a 10,000,000-row CSV or Parquet table to ``VideoDataset``, and what each worker adds.

The script writes a table of ``path,label,start,end`` rows (``class_<k>/video_<i>.mp4``,
an int label of 400 classes, and two times in seconds) as CSV and as Parquet.
No video exists: the paths are read, never opened. Each table is then read in a
new process, which times:

* construction: ``table_samples`` + ``VideoDataset(find_missing=False)``, and how
  many video files it opened (an audit hook on ``open``, and PyAV's and
  OpenCV's opens, are traced);
* the process's peak resident memory (``ru_maxrss``) after construction, and its
  growth above the peak the imports reached;
* each worker's memory with ``processes=2``: ``DataLoader`` runs a yield function
  that reads every sample of its batches (path, label, segment) out of the
  dataset's list, for 50 batches. Each worker's resident set (RSS) and unique
  set (USS) are then read, and compared with the same run over a 1,000-row list.

The tables are in the page cache (just written). One process per table and size.

    python -m benchmarks.table_scale                       # 10,000,000 rows, CSV and Parquet
    python -m benchmarks.table_scale --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parallel_loader import YieldFunction
from parallel_loader.video._datasets.dataset import _places

from ._common import DEFAULT_OUT, format_table, machine_info, parse_ints, run_job, write_json
from ._resources import trace_video_opens

__all__ = ["TouchSamples", "main"]

CLASSES = 400
SMALL = 1_000  # the list a worker's memory is compared with
BATCHES = 50  # batches each run makes through the workers
# The targets for a 10,000,000-row CSV.
TARGET_ROWS = 10_000_000
TARGET_S, TARGET_PEAK_MB, TARGET_WORKER_MB = 60.0, 1536.0, 100.0


class TouchSamples(YieldFunction):
    """A yield function that reads its batch's samples out of a ``VideoDataset``'s list, decoding nothing.

    Batch ``i`` is the dataset's batch ``i`` in the epoch's order. Each sample's
    path and segment are read, and the labels as ``VideoDataset`` reads them.
    The batch is the labels, the paths' lengths and the worker's process id.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __call__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        data = self.dataset
        chosen = _places(index, data.batch_size, data._state[1], len(data._list))
        samples = data._list
        paths = [samples.path(i) for _, i in chosen]
        segments = [samples.segment(i) for _, i in chosen]
        labels = samples.labels_at([i for _, i in chosen]).astype(np.int64)  # as VideoDataset reads them
        lengths = np.array([len(p) + (s[0] or 0) for p, s in zip(paths, segments, strict=True)])
        return labels, lengths, np.array([os.getpid()])


def make_table(folder: Path, rows: int) -> dict[str, str]:
    """Write the table of ``rows`` rows as CSV and Parquet under ``folder``; their paths by kind."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    files = {"csv": str(folder / f"table_{rows}.csv"), "parquet": str(folder / f"table_{rows}.parquet")}
    writer = None
    with pa_csv.CSVWriter(files["csv"], _schema()) as csv_writer:
        for first in range(0, rows, 1_000_000):  # a million rows at a time: the writer's memory stays small
            i = np.arange(first, min(rows, first + 1_000_000), dtype=np.int64)
            label = i % CLASSES
            number = pc.utf8_lpad(pa.array(i).cast(pa.string()), 8, "0")
            folder_name = pc.utf8_lpad(pa.array(label).cast(pa.string()), 3, "0")
            path = pc.binary_join_element_wise("class_", folder_name, "/video_", number, ".mp4", "")
            start = ((i * 7) % 3000) / 10.0
            batch = pa.record_batch([path, pa.array(label), pa.array(start), pa.array(start + 10.0)], schema=_schema())
            csv_writer.write_batch(batch)
            if writer is None:
                writer = pq.ParquetWriter(files["parquet"], _schema())
            writer.write_batch(batch)
    if writer is not None:
        writer.close()
    return files


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([("path", pa.string()), ("label", pa.int64()), ("start", pa.float64()), ("end", pa.float64())])


def run_once(job: dict[str, Any]) -> dict[str, Any]:
    """One fresh process: the table to ``VideoDataset``, its time, memory and files opened; then the workers'."""
    import psutil

    opened = trace_video_opens(".mp4")
    from parallel_loader import DataLoader
    from parallel_loader.video import VideoDataset, table_samples

    def dataset(source: str, rows: int | None) -> VideoDataset:
        samples = table_samples(source, start="start", end="end", root="/videos")
        if rows is not None:
            samples = samples[:rows]
        return VideoDataset(samples, batch_size=8, clip_len=8, stride=2, seed=0, find_missing=False)

    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    data = dataset(job["table"], None)
    result: dict[str, Any] = {"construct_s": time.perf_counter() - started}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result.update(peak_mb=peak / 1024, peak_growth_mb=(peak - peak_before) / 1024, opened=len(opened))
    result["samples"] = len(data._list)
    small = dataset(job["table"], SMALL)
    for name, each in (("big", data), ("small", small)):
        started = time.perf_counter()
        result[f"{name}_workers"] = _workers(DataLoader, TouchSamples(each), psutil)
        result[f"{name}_workers_s"] = time.perf_counter() - started
    return result


def _workers(loader_class: Any, fn: TouchSamples, psutil: Any) -> dict[str, Any]:
    """Run ``fn`` in 2 worker processes: their memory once each has made a batch, and after ``BATCHES`` batches."""
    with loader_class(fn, processes=2, num_threads=2, shuffle=False, seed=0) as loader:
        answered: set[int] = set()
        memory: dict[str, Any] = {}
        count = 0
        while "after" not in memory:  # epochs, until each worker has made a batch and BATCHES are made
            for _, _, pid in loader:
                answered.add(int(pid[0]))
                count += 1
                if len(answered) == 2 and "started" not in memory:
                    memory["started"] = _memory(sorted(answered), psutil)
                if len(answered) == 2 and count >= BATCHES:
                    memory["after"] = _memory(sorted(answered), psutil)
                    break
    return memory


def _memory(pids: list[int], psutil: Any) -> dict[str, list[float]]:
    """Each process's memory in MB: resident (RSS), its anonymous part, and the shared sample file's pages in it.

    The anonymous part is what the process allocated. The sample file's pages are
    the page cache's, shared by every process that maps them.
    """
    memory: dict[str, list[float]] = {"rss": [], "anon": [], "shared_samples": []}
    for pid in pids:
        worker = psutil.Process(pid)
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        memory["rss"].append(worker.memory_info().rss / 2**20)
        memory["anon"].append(int(status["RssAnon"].split()[0]) / 1024)
        # The sample file has no name: it shows as the temporary folder's "#<inode>".
        maps = worker.memory_maps(grouped=False)
        memory["shared_samples"].append(sum(m.rss for m in maps if os.path.basename(m.path).startswith("#")) / 2**20)
    return memory


def _in_fresh_process(job: dict[str, Any]) -> dict[str, Any]:
    what = f"a run of {job['table']}"
    return run_job("benchmarks.table_scale", job, what, 1800, {"PARALLEL_LOADER_VIDEO_INDEX": "off"})


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", help=argparse.SUPPRESS)  # a run in a fresh process: its job, as JSON
    parser.add_argument("--rows", type=parse_ints, default=[TARGET_ROWS], help="table sizes, e.g. 1000000,10000000")
    parser.add_argument("--kinds", default="csv,parquet", help="which tables: csv, parquet or both")
    parser.add_argument("--out", type=str, default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    if args.job:
        print(json.dumps(run_once(json.loads(args.job))))
        return None
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="table_scale_") as tmp:
        for rows in args.rows:
            started = time.perf_counter()
            files = make_table(Path(tmp), rows)
            print(f"wrote {rows:,} rows as CSV and Parquet in {time.perf_counter() - started:.1f} s", flush=True)
            for kind in args.kinds.split(","):
                size = os.path.getsize(files[kind]) / 2**20
                results[f"{kind} {rows}"] = {"rows": rows, "kind": kind, "file_mb": size}
                results[f"{kind} {rows}"].update(_in_fresh_process({"table": files[kind]}))
            for path in files.values():
                os.unlink(path)
    headers = [
        "table",
        "rows",
        "file MB",
        "construct s",
        "peak RSS MB",
        "peak growth MB",
        "videos opened",
        f"worker RSS MB ({SMALL:,} rows)",
        "RSS added, started",
        f"RSS added, {BATCHES} batches",
        "of which the shared file",
        "anonymous added",
    ]
    table = []
    for r in results.values():
        big, small = r["big_workers"], r["small_workers"]
        added = {
            f"{when}_{what}": max(b - s for b, s in zip(big[when][what], small[when][what], strict=True))
            for when in ("started", "after")
            for what in ("rss", "anon")
        }
        r.update(added, shared=max(big["after"]["shared_samples"]))
        table.append([
            r["kind"], f"{r['rows']:,}", r["file_mb"], r["construct_s"], r["peak_mb"], r["peak_growth_mb"],
            r["opened"], f"{_pair(big['started']['rss'])} ({_pair(small['started']['rss'])})", r["started_rss"],
            r["after_rss"], r["shared"], r["after_anon"],
        ])  # fmt: skip
    print(
        "\ntable_samples(start=, end=, root=) -> VideoDataset(batch 8, find_missing=False); then DataLoader("
        f"processes=2) over a yield function reading each batch's samples, {BATCHES} batches; "
        f"a fresh process per table; added: the larger of the two workers' difference from a {SMALL:,}-row list; "
        "started: once each worker has made a batch"
    )
    print(format_table(headers, table))
    targets = _targets(results)
    for line in targets:
        print(line)
    write_json(Path(args.out) / "table_scale.json", {"machine": machine_info(), "results": results, "targets": targets})
    return results


def _pair(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values)


def _targets(results: dict[str, Any]) -> list[str]:
    lines = []
    for r in results.values():
        if r["rows"] != TARGET_ROWS or r["kind"] != "csv":
            continue
        for what, value, bar in (
            (f"construct_s <= {TARGET_S:.0f}", r["construct_s"], TARGET_S),
            (f"peak RSS MB <= {TARGET_PEAK_MB:.0f}", r["peak_mb"], TARGET_PEAK_MB),
            (f"worker RSS added at start-up MB <= {TARGET_WORKER_MB:.0f}", r["started_rss"], TARGET_WORKER_MB),
            ("videos opened == 0", r["opened"], 0),
        ):
            lines.append(
                f"target {what} at {TARGET_ROWS:,} CSV rows: {'met' if value <= bar else 'MISSED'} ({value:.2f})"
            )
    return lines


if __name__ == "__main__":
    main()
