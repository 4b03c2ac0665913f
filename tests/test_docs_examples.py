"""The examples the README and the docs show: they run and do what the text says of them.

The README shows ``examples/quickstart_samples.py`` and ``examples/quickstart_video.py``
whole, and a test here keeps each block equal to its file. The docs include the
examples' code from the files themselves (``literalinclude``), so it cannot drift.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import threading
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from parallel_loader.sample_data import make_sample_data

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
README_EXAMPLES = ["quickstart_samples", "quickstart_video"]


def example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` by name, so that worker processes can unpickle what it defines."""
    if str(EXAMPLES) not in sys.path:
        sys.path.append(str(EXAMPLES))
    return importlib.import_module(name)


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", markdown, flags=re.MULTILINE | re.DOTALL)


@pytest.fixture(scope="module")
def sample_videos(tmp_path_factory) -> Path:
    """A tiny sample set: 2 classes, 4 training and 1 validation video each."""
    root = tmp_path_factory.mktemp("sample")
    make_sample_data(root, classes=2, per_class=5, val_fraction=0.2)
    return root


def first_values(batches: list[np.ndarray]) -> list[int]:
    return [int(batch[0, 0]) for batch in batches]


@pytest.mark.parametrize("name", README_EXAMPLES)
def test_the_readme_shows_each_quick_start_file_as_it_is(name):
    code = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8")
    blocks = python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert code in blocks, f"README.md has no python block equal to examples/{name}.py: copy the file into it"


def test_the_readme_stays_a_short_page():
    """The manual is the docs site; the README is what, the two commands, two examples, the guarantees, links."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: move the rest into docs/"
    assert "make demo" in "\n".join(lines) and "make test" in "\n".join(lines)


@pytest.mark.timeout(30)
def test_samples_quick_start_gives_every_sample_once_an_epoch_in_full_batches(capsys):
    quick_start = example("quickstart_samples")
    dataset = quick_start.Clips()
    # Each sample's clip is drawn from its index and epoch, so its first value tells which sample and epoch it is.
    index_of = {float(dataset.get_sample(i, e)[0][0, 0, 0, 0]): i for i in range(len(dataset)) for e in range(2)}
    assert len(index_of) == 2 * len(dataset) == 2 * 96  # the clips differ each epoch
    batches = []

    def step(clips, labels):
        assert clips.shape == (8, 8, 32, 32, 3) and clips.dtype == np.float32
        assert labels.shape == (8,) and labels.dtype == np.int64
        indices = [index_of[float(value)] for value in clips[:, 0, 0, 0, 0]]
        assert labels.tolist() == [i % 4 for i in indices], "each clip comes with its own label"
        batches.append(indices)

    quick_start.main(epochs=2, step=step)
    assert len(batches) == 2 * 12
    epochs = [[i for batch in batches[:12] for i in batch], [i for batch in batches[12:] for i in batch]]
    for order in epochs:
        assert sorted(order) == list(range(96)), "every sample exactly once per epoch"
    assert epochs[0] != epochs[1], "a new order each epoch"
    assert capsys.readouterr().out.splitlines() == ["epoch 0: 12 batches", "epoch 1: 12 batches"]


@pytest.mark.timeout(120)
def test_video_quick_start_trains_keras_on_decoded_clips(sample_videos):
    history = example("quickstart_video").main(str(sample_videos), epochs=2)
    assert history.model.input_shape == (None, 8, 48, 64, 3)
    assert len(history.history["loss"]) == 2 and all(np.isfinite(history.history["loss"]))
    assert history.history["loader_threads"] == [2, 2], "LoaderStats saw the one loader of both epochs"


@pytest.mark.timeout(30)
def test_batch_level_quick_start_shuffles_the_order_of_whole_batches():
    quick_start = example("quickstart_batches")
    data = quick_start.ClipBatches()
    index_of = {float(data(i)[0][0, 0, 0, 0, 0]): i for i in range(len(data))}
    orders = []

    def step(clips, labels):
        assert clips.shape == (4, 8, 32, 32, 3) and labels.shape == (4,)
        orders.append(index_of[float(clips[0, 0, 0, 0, 0])])

    quick_start.main(epochs=2, step=step)
    first, second = orders[:20], orders[20:]
    assert sorted(first) == sorted(second) == list(range(20)), "every batch once per epoch"
    assert first != second, "a new order each epoch"


@pytest.mark.timeout(120)
def test_train_quick_start_trains_validates_and_stops_early(capsys):
    history = example("quickstart_train").main(epochs=30)
    assert 1 <= len(history) <= 30
    for stats in history:
        assert stats.batches == 2048 // 32
        assert set(stats.train.metrics) == set(stats.val.metrics) == {"loss", "accuracy"}
    if len(history) < 30:
        assert history[-1].val.metrics["accuracy"] >= 0.95, "on_epoch_end stopped the run"
    assert f"{len(history)} epochs; validation accuracy" in capsys.readouterr().out


@pytest.mark.timeout(30)
def test_long_runs_quick_start_skips_within_the_budget_and_logs_each_failure(tmp_path):
    log = tmp_path / "bad_batches.jsonl"
    delivered, errors = example("quickstart_long_runs").skip_bad_batches(str(log))
    assert sorted(delivered) == [i for i in range(20) if i != 13]
    assert [(e.index, e.type) for e in errors] == [(13, "OSError")]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["index"] for line in lines] == [13]
    assert "videos/13.mp4" in json.dumps(lines[0]["context"]), "the exception's filename is the record's context"


@pytest.mark.timeout(30)
def test_long_runs_quick_start_records_a_stuck_call_and_goes_on():
    before = set(threading.enumerate())
    delivered, errors = example("quickstart_long_runs").catch_stuck_calls()
    for thread in set(threading.enumerate()) - before:  # close() does not wait for the abandoned call, just released
        thread.join(10)
    assert sorted(delivered) == [i for i in range(20) if i != 5]
    assert [(e.index, e.type) for e in errors] == [(5, "LoaderTimeout")]


@pytest.mark.timeout(30)
def test_long_runs_quick_start_resumes_the_rest_of_the_epoch():
    before, after = example("quickstart_long_runs").resume_mid_epoch()
    assert len(before) == 8 and len(after) == 12
    assert sorted(before + after) == list(range(20)), "the two parts are the epoch, each batch once"


@pytest.mark.timeout(60)
def test_processes_quick_start_delivers_every_batch_in_order(capsys):
    assert example("quickstart_processes").main() == list(range(16))
    assert "16 batches, in order: True" in capsys.readouterr().out


@pytest.mark.timeout(30)
def test_sharding_quick_start_gives_disjoint_equal_shards_that_cover_each_epoch():
    quick_start = example("quickstart_sharding")
    shards = [quick_start.shard(i, num_shards=3, epochs=2) for i in range(3)]
    for epoch in range(2):
        parts = [shard[epoch] for shard in shards]
        assert [len(part) for part in parts] == [4, 4, 4], "every worker runs the same number of steps"
        assert set().union(*parts) == set(range(10)), "together the shards are the whole epoch"
        assert sum(len(set(part)) for part in parts) >= 10
    assert shards[0][0] != shards[0][1], "the order changes each epoch"


@pytest.mark.timeout(60)
def test_sharding_quick_start_dataset_fn_reads_its_input_pipelines_shard():
    import tensorflow as tf

    quick_start = example("quickstart_sharding")
    seen = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2)
        with quick_start.dataset_fn(context) as dataset:
            batches = [batch.numpy() for batch in dataset]
        assert all(batch.shape == (4,) for batch in batches), "per-replica batches: 8 over 2 replicas"
        seen.append([int(batch[0]) for batch in batches])
    assert sorted(seen[0] + seen[1]) == list(range(10)), "two disjoint shards make the epoch"


@pytest.mark.timeout(60)
def test_video_data_quick_start_reads_exact_clips_segments_and_views(sample_videos, capsys):
    info, clip, frames, views = example("quickstart_video_data").main(str(sample_videos))
    assert info.width == 320 and info.height == 240 and info.frames > 42
    assert clip.shape == (16, 112, 112, 3) and clip.dtype == np.uint8
    assert frames.shape == (2, 8, 48, 64, 3) and frames.dtype == np.float32
    assert views.shape == (2, 9, 8, 48, 64, 3), "2 validation videos, 3 clips x 3 crops each"
    assert "views (2, 9, 8, 48, 64, 3)" in capsys.readouterr().out
