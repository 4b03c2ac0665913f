"""Start-up at scale: from a Kinetics-style CSV of 10,000 to 1,000,000 rows to the first batch, in a fresh process.

For each size a CSV ``label,youtube_id,time_start,time_end,split`` is written
with 400 labels, and every row's file ``<label>/<id>_<start:06d>_<end:06d>.avi``
is a hard link to one of a few real small videos (XviD AVIs from
``parallel_loader.sample_data``), all in a temporary directory. Each run is a
new process with nothing cached (an empty index store of its own) that times:

* construction: ``kinetics_samples`` + ``VideoDataset``, and how many video
  files they opened (traced: PyAV's and OpenCV's opens, and Python's ``open``
  through an audit hook);
* of that, what naming missing files costs (``find_missing=True``: each
  folder listed once; timed again after construction, so the folders are
  listed warm, as they are in the construction too, having just been written),
  and, for comparison, what a stat per file would cost instead;
* the extra memory: the process's resident set size after construction less
  before it, and the growth of its peak (``ru_maxrss``) above the peak the
  imports reached (0 when construction stays below it);
* pickling the dataset: time and size (what a worker process receives);
* the first batch of ``DataLoader(dataset, shuffle=True)`` (2 threads), and
  the video files opened by then.

The CSV and the folders are in the page cache (they were just written);
nothing else is. Medians over ``--rounds`` fresh processes per size.

    python -m benchmarks.startup                       # 10,000, 100,000 and 1,000,000 rows, 3 rounds
    python -m benchmarks.startup --rows 10000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._common import DEFAULT_OUT, format_table, machine_info, parse_ints, run_job, write_json
from ._resources import trace_video_opens

__all__ = ["main"]

PATTERN = "{label}/{youtube_id}_{time_start:06d}_{time_end:06d}.avi"
LABELS = 400
# The targets at 100,000 rows (construction, extra memory, pickle time and size, first batch)
# and at 1,000,000 (construction).
TARGETS = {100_000: {"construct_s": 2.0, "rss_mb": 25.0, "pickle_s": 1.0, "pickle_mb": 15.0, "first_batch_s": 3.0}}
TARGETS_CONSTRUCT = {1_000_000: 20.0}
_LINKS_PER_FILE = 50_000


def make_set(folder: Path, rows: int, sources: Sequence[Path]) -> Path:
    """A CSV of ``rows`` rows under ``folder`` and a hard link per row to one of ``sources``; the CSV's path.

    A file system allows a file only so many links (65,000 on ext4): a source
    is copied to a new file in ``folder`` every ``_LINKS_PER_FILE`` links.
    """
    for k in range(LABELS):
        (folder / f"class_{k:03d}").mkdir(parents=True, exist_ok=True)
    targets = list(sources)
    lines = ["label,youtube_id,time_start,time_end,split"]
    for i in range(rows):
        label = f"class_{i % LABELS:03d}"
        youtube_id = f"{i:011d}"
        start = (i * 7) % 300
        lines.append(f"{label},{youtube_id},{start},{start + 10},train")
        k = i % len(sources)
        if i and i // len(sources) % _LINKS_PER_FILE == 0 and k == i % len(sources):
            targets[k] = folder / f"source_{i}_{sources[k].name}"
            shutil.copyfile(sources[k], targets[k])
        os.link(
            targets[k],
            folder / PATTERN.format(label=label, youtube_id=youtube_id, time_start=start, time_end=start + 10),
        )
    csv_file = folder / "train.csv"
    csv_file.write_text("\n".join(lines) + "\n")
    return csv_file


def run_once(job: dict[str, Any]) -> dict[str, Any]:
    """One fresh process: construction, memory, pickling and the first batch, with the video files opened."""
    import pickle

    import psutil

    opened = trace_video_opens(".avi")
    from parallel_loader import DataLoader
    from parallel_loader.video import VideoDataset, kinetics_samples
    from parallel_loader.video._samples.finding import missing_files

    process = psutil.Process()
    rss, peak = process.memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    samples = kinetics_samples(job["csv"], job["root"], pattern=PATTERN)
    data = VideoDataset(samples, batch_size=8, clip_len=8, stride=2, size=(112, 112), seed=0)
    construct = time.perf_counter() - started
    rss_after = process.memory_info().rss
    started = time.perf_counter()
    missing_files(samples.paths())  # what find_missing=True costs of the construction (folders listed warm)
    listing = time.perf_counter() - started
    started = time.perf_counter()
    for path in samples.paths():  # the alternative: a stat per file (not used; for comparison)
        os.path.exists(path)
    stat_each = time.perf_counter() - started
    del samples
    result: dict[str, Any] = {
        "find_missing_s": listing,
        "stat_each_s": stat_each,
        "construct_s": construct,
        "rss_mb": (rss_after - rss) / 2**20,
        "peak_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024,
        "opened_constructing": len(opened),
    }
    started = time.perf_counter()
    blob = pickle.dumps(data)
    result["pickle_s"] = time.perf_counter() - started
    result["pickle_mb"] = len(blob) / 2**20
    started = time.perf_counter()
    pickle.loads(blob)
    result["unpickle_s"] = time.perf_counter() - started
    started = time.perf_counter()
    with DataLoader(data, num_threads=2, shuffle=True, seed=0) as loader:
        next(iter(loader))
        result["first_batch_s"] = time.perf_counter() - started
    result["opened_first_batch"] = len(set(opened))
    return result


def _in_fresh_process(job: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="startup_index_") as store:
        what = f"a run of {job['rows']} rows"
        return run_job("benchmarks.startup", job, what, 1800, {"PARALLEL_LOADER_VIDEO_INDEX": store})


def _sources(folder: Path) -> list[Path]:
    """A few real small videos: the sample set's XviD AVIs (made once)."""
    from parallel_loader.sample_data import make_sample_data

    make_sample_data(str(folder), 2, 2, 0.0, 0)
    return sorted(folder.rglob("*.avi"))


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", help=argparse.SUPPRESS)  # a run in a fresh process: its job, as JSON
    parser.add_argument(
        "--rows", type=parse_ints, default=[10_000, 100_000, 1_000_000], help="CSV sizes, e.g. 10000,100000"
    )
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per size; medians reported")
    parser.add_argument("--out", type=str, default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    if args.job:
        print(json.dumps(run_once(json.loads(args.job))))
        return None
    keys = [
        "construct_s",
        "find_missing_s",
        "stat_each_s",
        "rss_mb",
        "peak_mb",
        "pickle_s",
        "pickle_mb",
        "unpickle_s",
        "first_batch_s",
    ]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="startup_") as tmp:
        sources = _sources(Path(tmp) / "sources")
        for rows in args.rows:
            folder = Path(tmp) / f"rows_{rows}"
            csv_file = make_set(folder, rows, sources)
            job = {"csv": str(csv_file), "root": str(folder), "rows": rows}
            runs = [_in_fresh_process(job) for _ in range(args.rounds)]
            medians = {key: statistics.median(r[key] for r in runs) for key in keys}
            opened = max(r["opened_constructing"] for r in runs), max(r["opened_first_batch"] for r in runs)
            results[str(rows)] = {"runs": runs, "medians": medians, "opened": opened}
            shutil.rmtree(folder)
    headers = [
        "rows",
        "construct s",
        "of which find_missing s",
        "stat each file s",
        "extra RSS MB",
        "peak +MB",
        "pickle s",
        "pickle MB",
        "unpickle s",
        "1st batch s",
        "files opened (build, 1st batch)",
    ]
    table = [
        [f"{int(rows):,}", *(f"{r['medians'][k]:.3f}" for k in keys), f"{r['opened'][0]}, {r['opened'][1]}"]
        for rows, r in results.items()
    ]
    print(
        f"\nKinetics-style CSV -> kinetics_samples + VideoDataset (batch 8) -> DataLoader(shuffle=True, 2 threads); "
        f"{len(sources)} real XviD AVIs hard-linked; each run a fresh process with an empty index store; "
        f"medians of {args.rounds}"
    )
    print(format_table(headers, table))
    targets = _targets(results)
    for line in targets:
        print(line)
    write_json(Path(args.out) / "startup.json", {"machine": machine_info(), "results": results, "targets": targets})
    return results


def _targets(results: dict[str, Any]) -> list[str]:
    def line(what: str, rows: int, value: float, met: bool) -> str:
        return f"target {what} at {rows:,} rows: {'met' if met else 'MISSED'} ({value:.2f})"

    lines = []
    for rows, bars in TARGETS.items():
        if str(rows) in results:
            medians = results[str(rows)]["medians"]
            lines += [line(f"{key} <= {bar}", rows, medians[key], medians[key] <= bar) for key, bar in bars.items()]
            opened = results[str(rows)]["opened"][0]
            lines.append(line("no video file opened constructing", rows, opened, opened == 0))
    for rows, bar in TARGETS_CONSTRUCT.items():
        if str(rows) in results:
            value = results[str(rows)]["medians"]["construct_s"]
            lines.append(line(f"construct_s <= {bar}", rows, value, value <= bar))
    return lines


if __name__ == "__main__":
    main()
