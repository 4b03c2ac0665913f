"""The campaign: runs from consecutive seeds, one after another, under a watch that ends it on a hang.

A hang cannot be checked after the fact: ``HangWatch`` prints every thread's stack
and ends the process when a run passes its limit. The module knows nothing of
what a run does or checks; it only reports each failure as it comes.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
from dataclasses import asdict

from .._common import RunProgress
from .config import FAULTS, Config, Outcome
from .inject import Interrupts
from .report import failure_record
from .run import run_one

__all__ = ["HangWatch", "campaign"]


class HangWatch:
    """Ends the campaign, with every thread's stack, if one run takes longer than ``limit`` seconds."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.current: Config | None = None
        self._deadline = float("inf")
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name="faults-hang-watch", daemon=True)
        self._thread.start()

    def begin(self, cfg: Config) -> None:
        with self._cond:
            self.current, self._deadline = cfg, time.monotonic() + self.limit

    def end(self) -> None:
        with self._cond:
            self.current, self._deadline = None, float("inf")

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()

    def _watch(self) -> None:
        with self._cond:
            while not self._stopped:
                left = self._deadline - time.monotonic()
                if left <= 0 and self.current is not None:
                    print(f"\nHANG: run {asdict(self.current)} passed {self.limit} s; stacks:", file=sys.stderr)
                    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                    os._exit(3)
                self._cond.wait(min(left, 1.0) if left != float("inf") else 1.0)


def campaign(
    runs: int, seed: int, run_limit: float, faults: tuple[str, ...] = FAULTS, progress: bool | None = None
) -> list[Outcome]:
    """``runs`` runs from seeds ``seed, seed + 1, ...``; stops the process on a hang."""
    watch = HangWatch(run_limit)
    interrupts = Interrupts()
    outcomes = []
    bar = RunProgress(runs, progress)
    try:
        for i in range(runs):
            cfg = Config.draw(seed + i, faults)
            watch.begin(cfg)
            outcome = run_one(cfg, interrupts)
            watch.end()
            outcomes.append(outcome)
            bar.done(cfg.fault, "ok" if outcome.ok else "FAILED")
            if not outcome.ok:
                print(f"\nFAILED run {cfg.seed}: {json.dumps(failure_record(outcome))}", file=sys.stderr, flush=True)
    finally:
        bar.close()
        interrupts.restore()
        watch.close()
    return outcomes
