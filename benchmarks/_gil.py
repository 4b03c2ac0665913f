"""How long a process's threads hold the GIL, sampled by py-spy from outside the process.

``py-spy record --gil`` samples the process at a fixed rate and keeps a sample
only from the thread that holds the GIL at that moment. So a thread's samples,
over the rate, are the seconds it held the GIL, give or take one sample each.
The samples are taken without stopping the process (``--nonblocking``).

Two limits, both to keep in mind when reading the figures:

* A thread that holds the GIL while the OS has it wait for a core still holds it.
  On a machine busier than its cores, the seconds grow with the wait.
* py-spy takes some CPU of its own, on the same cores: time speed in another run.

py-spy needs to attach to a running process (ptrace): as root, or with
``kernel.yama.ptrace_scope`` at 0.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["GilSampler", "held_by"]


class GilSampler:
    """py-spy sampling this process's GIL holders, from ``__init__`` until ``stop``.

    Args:
        rate: samples a second.

    Raises:
        RuntimeError: py-spy is not installed, or cannot attach to this process.
    """

    def __init__(self, rate: int) -> None:
        self.rate = rate
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(spy).exists():
            raise RuntimeError("py-spy is not installed (pip install py-spy): --gil needs it")
        handle, self._out = tempfile.mkstemp(prefix="gil_", suffix=".txt")
        os.close(handle)
        command = [spy, "record", "--pid", str(os.getpid()), "--gil", "--threads", "--nonblocking"]
        command += ["--rate", str(rate), "--format", "raw", "--output", self._out]
        self._spy = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self._spy.stdout is not None
        first = self._spy.stdout.readline()  # printed once attached, as sampling starts
        if "Sampling" not in first:
            self._spy.kill()
            raise RuntimeError(f"py-spy cannot sample this process: {first.strip() or self._spy.wait()}")

    def stop(self) -> tuple[dict[str, float], int]:
        """Stop sampling: seconds with the GIL by thread name, and how many times py-spy said it fell behind."""
        self._spy.send_signal(signal.SIGINT)
        rest, _ = self._spy.communicate(timeout=120)
        samples: collections.Counter[str] = collections.Counter()
        try:
            for line in Path(self._out).read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                thread = stack.split(";", 1)[0]  # "thread (1234): name", or "thread (1234)" without a name
                samples[thread.partition(": ")[2] or thread] += int(count)
        finally:
            Path(self._out).unlink()
        return {name: count / self.rate for name, count in samples.items()}, rest.count("behind in sampling")


def held_by(seconds: dict[str, float], prefix: str) -> float:
    """The seconds with the GIL of the threads whose names start with ``prefix``."""
    return sum(held for name, held in seconds.items() if name.startswith(prefix))
