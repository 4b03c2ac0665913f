"""Fault-injection campaign: random loader configurations, one random fault each.

Each run draws a configuration (threads 1-16, ``max_len`` 1-8, ordered or not,
shuffled or not, epochs overlapping or not, 0-200 batches per epoch, 1-3 epochs,
and how the yield function is written: a plain ``__call__``, epoch hooks,
``get_batch(index, epoch)``, or a sample dataset batched by the loader) and one
fault:

* ``none``: no fault, the baseline;
* ``raise`` / ``skip``: the call for some indices raises, with ``on_error`` "raise"
  (the error must reach the consumer) or "skip" (recorded, the rest delivered);
* ``close``: another thread calls ``close(timeout)`` at a random moment;
* ``sigint``: a real SIGINT reaches the consuming thread at a random moment;
* ``trace``: a trace function raises ``KeyboardInterrupt`` at the N-th line the
  consuming thread runs in the package or in ``threading.Condition`` (N random),
  so that every line of the consumer's code, waits and wake-ups included, is hit
  over a campaign;
* ``task``: the training step raises at a random batch;
* ``hang`` / ``hang_skip``: a call hangs past ``call_timeout`` (the watchdog must
  raise ``LoaderTimeout``, or record it and go on);
* ``resume``: the consumer stops at a random batch, saves ``state_dict()``, and a
  new loader with another thread count and queue length goes on from it;
* ``train_task`` / ``train_sigint`` / ``train_trace``: the same through
  ``Train.run`` with a validation loader: the step raising, a real SIGINT, or
  Ctrl-C at a traced line.

After each run it checks: the run ended within ``--run-limit`` seconds (else it
prints every thread's stack and exits: a hang), no thread started by the run is
still alive shortly after, the exception (or none) is one the fault allows, and
every epoch that ended delivered each index exactly once (less the skipped ones,
which must be exactly the injected failures); an epoch cut short delivered none
twice. A resumed epoch, both parts together, is the epoch exactly once, and in
ordered mode in the order of an uninterrupted run.

    python -m benchmarks.faults --runs 1000 --seed 0

A run is replayed from its seed alone:
``faults.run_one(faults.Config.draw(seed), faults.Interrupts())``.

The campaign is a package, one module a concern, read in this order:
``config`` (what a run is: its drawn configuration, its fault, its outcome),
``data`` (the yield functions and the loader a run uses), ``inject`` (how a
fault reaches the run: SIGINTs, the close or SIGINT trigger, the line trap),
``run`` (one run: consume, resume or train, then check), ``check`` (what a run
must have done), ``campaign`` (the runs in a row, with the hang watch),
``report`` (the summary and its table) and ``cli`` (the options and ``main``).
"""

from __future__ import annotations

from .campaign import HangWatch, campaign
from .check import allowed_exceptions, check_delivery, leaked_threads
from .cli import main
from .config import FAULTS, PROTOCOLS, Config, InjectedError, Outcome, TaskError
from .data import Data, make_data, make_loader
from .inject import Interrupts, LineTrap, Trigger
from .report import failure_record, summarize, summary_table
from .run import run_one

__all__ = [
    "FAULTS",
    "PROTOCOLS",
    "Config",
    "Data",
    "HangWatch",
    "InjectedError",
    "Interrupts",
    "LineTrap",
    "Outcome",
    "TaskError",
    "Trigger",
    "allowed_exceptions",
    "campaign",
    "check_delivery",
    "failure_record",
    "leaked_threads",
    "main",
    "make_data",
    "make_loader",
    "run_one",
    "summarize",
    "summary_table",
]

_failure = failure_record  # the name the tests have always used
