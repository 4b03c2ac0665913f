"""Where the calls run and how many at once: ``processes="auto"`` and the training default.

Words used here:

- *decode cores*: the host's usable cores less those left to the trainer, one per
  16 cores and at least one. A trainer's own Python (Keras, TensorFlow's dispatch) needs them.
- *GIL ceiling*: the most threads one process can keep busy. A reader thread holds
  the GIL for about a fifth of its time (``GIL_SHARE``, from py-spy profiles of
  ``benchmarks/video_cold.py``). So five threads fill one process's GIL.

``auto_placement`` sizes ``processes="auto"`` at the start: enough processes to fill
the decode cores, none run past the ceiling. While the loader runs, a worker whose
GIL holds its threads back is split (``_calls/gil_split``). ``training_placement`` is the default of
``as_tf_dataset`` and ``Train``. With neither ``num_threads`` nor ``processes``
given, they decode in worker processes, so the trainer's Python never takes the
GIL from a decode thread. A yield function that cannot cross to a process falls
back to threads, with one log line. So does a Keras dataset: a worker would
import Keras to unpickle it. A plain ``DataLoader`` keeps threads. See
:doc:`/guide/host_scale`.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

from .._calls.worker_launch import dumps
from .._data.keras_source import KerasSource, keras_dataset_base
from .autotune import available_cores

__all__ = ["ENV", "GIL_SHARE", "THREADS_DEFAULT", "auto_placement", "training_placement"]

log = logging.getLogger(__name__)

GIL_SHARE = 0.2  # the share of its busy time a video reader thread holds the GIL (17-20% measured)
THREADS_DEFAULT = 4  # loader threads in this process when the calls stay here
MAX_PAYLOAD = 64 << 20  # a source pickling to more stays in threads: each worker would hold a copy
# "0" keeps the training default's calls in the trainer's process (to debug a yield function in
# place); an int asks for that many processes; unset or "auto" sizes them from the cores.
ENV = "PARALLEL_LOADER_PROCESSES"


def auto_placement(num_threads: int | None = None, cores: int | None = None) -> tuple[int, int]:
    """``(processes, num_threads)`` for ``processes="auto"``.

    Args:
        num_threads: threads in each process, if given; else sized here, at most the GIL ceiling.
        cores: the host's usable cores (default: ``autotune.available_cores()``).

    Returns:
        The processes and the threads of each: together about one thread per decode core.
    """
    cores = available_cores() if cores is None else max(1, cores)
    decode = max(1, cores - max(1, cores // 16))
    ceiling = max(1, math.floor(1 / GIL_SHARE))
    if num_threads is not None:
        return max(1, math.ceil(decode / num_threads)), num_threads
    processes = math.ceil(decode / ceiling)
    return processes, math.ceil(decode / processes)


def training_placement(
    yield_fn: Any, num_threads: int | str | None, processes: int | str | None, *, name: str, also: tuple[Any, ...] = ()
) -> tuple[int | str, int | str]:
    """``(num_threads, processes)`` for a training loader, as ``as_tf_dataset`` and ``Train`` settle them.

    Explicit values keep their meaning: ``num_threads`` alone means threads in this
    process, as before. With neither given, the calls run in worker processes sized
    by ``auto_placement``, unless ``yield_fn`` cannot cross to one.

    Args:
        yield_fn: the loader's yield function or sample dataset.
        num_threads: as given (None: not given).
        processes: as given (None: not given).
        name: the loader's name, for the log line.
        also: what crosses to the workers with ``yield_fn``: ``thread_init``, ``collate``.

    Raises:
        ValueError: the ``PARALLEL_LOADER_PROCESSES`` environment variable is not ``"auto"`` or an int.
    """
    if processes is not None:
        if num_threads is None:
            num_threads = "auto" if processes == "auto" else THREADS_DEFAULT
        return num_threads, processes
    if num_threads is not None:
        return num_threads, 0
    asked = os.environ.get(ENV, "auto").strip()
    if asked != "auto" and not asked.isdigit():
        raise ValueError(f'{ENV} must be "auto" or a number of worker processes (0: none), got {asked!r}')
    if asked == "0":
        return THREADS_DEFAULT, 0
    why = _cannot_cross(yield_fn, also)
    if why is not None:
        log.info("%s: decoding in loader threads of this process, not worker processes: %s", name, why)
        return THREADS_DEFAULT, 0
    return ("auto", "auto") if asked == "auto" else (THREADS_DEFAULT, int(asked))


def _cannot_cross(yield_fn: Any, also: tuple[Any, ...]) -> str | None:
    """Why ``yield_fn`` (with ``also``, what crosses with it) cannot go to worker processes, or None if it can."""
    if not hasattr(yield_fn, "__len__"):  # a sample dataset has no __call__: epoch_length would refuse it
        return "it is a stream (no __len__), which each process would read again"
    if isinstance(yield_fn, KerasSource) or keras_dataset_base(yield_fn) is not None:
        # Its base class crosses by reference: unpickling it imports Keras, and Keras its backend.
        return (
            "it is a Keras dataset: each worker process would import Keras and its backend to unpickle it, "
            "seconds and hundreds of MB each; pass processes to send it to worker processes anyway"
        )
    try:
        size = len(dumps((yield_fn, *also)))
    except Exception as exc:
        return f"it, thread_init or collate cannot be pickled ({exc!r})"
    if size > MAX_PAYLOAD:
        return f"it pickles to {size / 2**20:.0f} MiB, which each worker process would hold a copy of"
    return None
