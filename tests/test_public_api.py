"""The names the issues gave as public contracts: importable where they were promised, with those arguments."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import subprocess
import sys

import pytest

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
    assert {"processes", "workers"} <= parameters(DataLoader) & parameters(Train) & parameters(as_tf_dataset)
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


# The public surface, module by module: what each module's __all__ holds. A name added or removed here
# is a change users see (the changelog says so); everything else lives under a leading underscore.
SURFACE = {
    "parallel_loader": {
        "CallStats",
        "ThreadTuner",
        "DataLoader",
        "DevicePrefetcher",
        "EpochStats",
        "ErrorBudgetExceeded",
        "ErrorRecord",
        "ErrorSink",
        "FIFOQueue",
        "InProcessMemory",
        "LoaderClosed",
        "LoaderStats",
        "LoaderTimeout",
        "PassStats",
        "Quarantine",
        "QuarantineMemory",
        "QueueClosed",
        "SampleBatches",
        "Train",
        "WorkerProcessDied",
        "YieldFunction",
        "as_tf_dataset",
        "default_collate",
    },
    "parallel_loader.video": {
        "KINETICS_PATTERN",
        "SAMPLINGS",
        "VIDEO_EXTENSIONS",
        "AnnotationError",
        "Augment",
        "CutMix",
        "IndexCache",
        "Mixup",
        "SampleList",
        "VideoDataset",
        "VideoDecodeError",
        "VideoFolder",
        "VideoIndex",
        "VideoInfo",
        "VideoSample",
        "default_index_cache",
        "epic_kitchens_samples",
        "excluded_paths",
        "excluding",
        "folder_samples",
        "frame_count",
        "hmdb51_samples",
        "kinetics_samples",
        "probe",
        "read_clip",
        "read_frames_at",
        "sample_list",
        "set_default_index_cache",
        "ssv2_samples",
        "table_samples",
        "ucf101_samples",
        "webdataset_fields",
        "webdataset_samples",
    },
    "parallel_loader.video.remote": {
        "Network",
        "ObjectChanged",
        "RemotePath",
        "close",
        "configure",
        "forget_settings",
        "is_url",
    },
    "parallel_loader.video.index": {
        "DEFAULT_MAX_BYTES",
        "DEFAULT_MAX_TABLE_BYTES",
        "ENVIRONMENT_VARIABLE",
        "IndexCache",
        "SourceKey",
        "default_directory",
        "default_index_cache",
        "set_default_index_cache",
    },
    "parallel_loader.video.check": {"check_file", "check_videos", "find_videos", "main"},
    "parallel_loader.keras": {"BackupAndRestore", "LoaderStats"},
    "parallel_loader.ray": {"RayWorkers"},
    "parallel_loader.sharding": {"REMAINDERS", "Remainder", "check_shard", "shard_length", "shard_positions"},
    "parallel_loader.tensorflow": {
        "DevicePrefetcher",
        "as_tf_dataset",
        "device_line",
        "import_tensorflow",
        "infer_signature",
        "loader_of",
    },
    "parallel_loader.tf_data": {"as_tf_dataset", "infer_signature", "loader_of"},
    "parallel_loader.tf_startup": {"device_line", "import_tensorflow"},
    "parallel_loader.train": {"BAR", "LINE", "EpochStats", "PassProgress", "PassStats", "Train", "progress_mode"},
}


def test_each_public_module_exports_exactly_its_surface_and_every_name_imports():
    for module_name, names in SURFACE.items():
        module = importlib.import_module(module_name)
        assert set(module.__all__) == names, module_name
        missing = [name for name in names if not hasattr(module, name)]
        assert missing == [], f"{module_name} lacks {missing}"


def test_the_paths_the_readme_documents_still_import():
    from parallel_loader.tf_data import loader_of
    from parallel_loader.tf_startup import import_tensorflow
    from parallel_loader.video.remote import configure

    assert callable(loader_of) and callable(import_tensorflow) and callable(configure)
    assert importlib.util.find_spec("parallel_loader.video.index.__main__") is not None
    assert importlib.util.find_spec("parallel_loader.sample_data") is not None


def test_a_re_exported_name_is_the_same_object_everywhere():
    from parallel_loader import tensorflow, tf_data, tf_startup, train, video
    from parallel_loader.video import index, remote

    assert parallel_loader.as_tf_dataset is tensorflow.as_tf_dataset is tf_data.as_tf_dataset
    assert tf_startup.import_tensorflow is tensorflow.import_tensorflow
    assert parallel_loader.Train is train.Train and parallel_loader.PassStats is train.PassStats
    assert video.IndexCache is index.IndexCache and remote.is_url("s3://bucket/a.mp4")


@pytest.mark.parametrize("command", ["parallel_loader.video.check", "parallel_loader.video.index"])
def test_the_commands_run_with_python_dash_m(command):
    done = subprocess.run([sys.executable, "-m", command, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "RuntimeWarning" not in done.stderr
