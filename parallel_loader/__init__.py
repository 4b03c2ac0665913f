"""parallel_loader: threads that prepare batches while the main thread trains.

N loader threads call a yield function (or batch a sample dataset). They put
the batches in a bounded queue, and the training loop takes them out. So a step
costs max(T_load / N, T_train) instead of T_load + T_train.

Video decoding lives in ``parallel_loader.video`` and the synthetic data set in
``parallel_loader.sample_data``; multi-worker sharding in ``parallel_loader.sharding``.
``as_tf_dataset`` and ``DevicePrefetcher`` import TensorFlow only when called.
``parallel_loader.tf_startup`` imports TensorFlow without its start-up log lines.
``parallel_loader.train`` holds ``Train`` and draws its progress (with tqdm).
See :doc:`/architecture`.
"""

from ._core.fifo_queue import FIFOQueue, QueueClosed
from ._core.telemetry import CallStats, LoaderStats
from ._data.batching import SampleBatches, default_collate
from ._data.yield_function import YieldFunction
from ._faults.error_budget import ErrorRecord
from ._faults.error_sink import ErrorSink
from ._faults.errors import ErrorBudgetExceeded, LoaderClosed, LoaderTimeout, WorkerProcessDied
from ._faults.quarantine import InProcessMemory, Quarantine, QuarantineMemory
from ._loader.autotune import ThreadTuner
from ._loader.data_loader import DataLoader
from .tensorflow._device_prefetch import DevicePrefetcher
from .tensorflow._tf_data import as_tf_dataset
from .train._train import EpochStats, PassStats, Train

__all__ = [
    "CallStats",
    "DataLoader",
    "DevicePrefetcher",
    "ErrorBudgetExceeded",
    "ErrorRecord",
    "ErrorSink",
    "EpochStats",
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
    "ThreadTuner",
    "Train",
    "WorkerProcessDied",
    "YieldFunction",
    "as_tf_dataset",
    "default_collate",
]

__version__ = "0.1.0"
