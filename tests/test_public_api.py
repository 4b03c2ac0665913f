"""The names the issues gave as public contracts: importable where they were promised, with those arguments."""

from __future__ import annotations

import inspect

import parallel_loader
from parallel_loader import DataLoader, Train, as_tf_dataset


def test_long_run_errors_are_importable_from_the_package():
    assert issubclass(parallel_loader.LoaderTimeout, TimeoutError)
    assert issubclass(parallel_loader.ErrorBudgetExceeded, Exception)
    assert {"LoaderTimeout", "ErrorBudgetExceeded", "LoaderClosed", "ErrorRecord"} <= set(parallel_loader.__all__)


def parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def test_loader_train_and_dataset_take_the_promised_arguments():
    long_runs = {"on_error", "max_errors", "error_log", "call_timeout", "thread_init"}
    sharding = {"num_shards", "shard_index", "shard_remainder"}
    batching = {"batch_size", "drop_last", "collate"}
    assert long_runs | sharding | batching | {"overlap_epochs", "min_threads", "max_threads"} <= parameters(DataLoader)
    assert long_runs | sharding | batching | {"num_threads", "max_nthread", "prefetch_to_device"} <= parameters(Train)
    assert sharding | batching | {"input_context", "prefetch_to_device", "device_buffer"} <= parameters(as_tf_dataset)
    for method in ("state_dict", "load_state_dict", "stats", "resize"):
        assert callable(getattr(DataLoader, method))
    for method in ("state_dict", "load_state_dict", "stop"):
        assert callable(getattr(Train, method))


def test_bad_file_handling_is_importable_where_the_readme_says():
    from parallel_loader.video import VideoDataset, VideoFolder, excluding, folder_samples
    from parallel_loader.video.check import main

    assert {"ErrorSink", "Quarantine", "QuarantineMemory", "InProcessMemory"} <= set(parallel_loader.__all__)
    assert callable(excluding) and callable(main)
    for fn in (VideoDataset, VideoFolder, folder_samples):
        assert "exclude" in parameters(fn)
    assert "quarantine" in parameters(VideoDataset) and "quarantine" in parameters(VideoFolder)
