"""GPU utilisation and memory, sampled with ``nvidia-smi`` while a benchmark runs.

``nvidia-smi --query-gpu=... -lms N`` prints one line per GPU every N ms; a
thread reads them until the sampler is closed. Where ``nvidia-smi`` is not on
the PATH (no NVIDIA driver), ``GpuSampler.available()`` is False and the
callers say so and go on without GPU figures.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
from dataclasses import dataclass

__all__ = ["GpuSample", "GpuSampler"]

QUERY = "index,name,utilization.gpu,memory.used"


@dataclass(frozen=True)
class GpuSample:
    """One line of ``nvidia-smi``: a GPU's utilisation (% of the time a kernel ran) and memory in use (MiB)."""

    index: int
    name: str
    utilization: float
    memory_mib: float


class GpuSampler:
    """Samples every GPU each ``interval`` seconds in a background ``nvidia-smi`` process; a context manager.

    Args:
        interval: seconds between samples (``nvidia-smi``'s ``-lms``).
        command: the ``nvidia-smi`` executable.
    """

    def __init__(self, interval: float = 0.25, command: str = "nvidia-smi") -> None:
        self.interval = interval
        self.command = command
        self.samples: list[GpuSample] = []
        self.errors: list[str] = []  # lines that were not samples (nvidia-smi's own messages)
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    @staticmethod
    def available(command: str = "nvidia-smi") -> bool:
        """Whether ``command`` is on the PATH."""
        return shutil.which(command) is not None

    def __enter__(self) -> GpuSampler:
        loop = f"--loop-ms={round(self.interval * 1e3)}"
        self._process = subprocess.Popen(
            [self.command, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", loop],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, name="GpuSampler", daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._process is not None and self._reader is not None
        self._process.terminate()
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(5)  # the pipe is closed now

    def summary(self) -> dict[int, dict[str, float | str | int]]:
        """Per GPU index: its name, the number of samples, median, mean and max utilisation %, max memory MiB."""
        result: dict[int, dict[str, float | str | int]] = {}
        for index in sorted({s.index for s in self.samples}):
            mine = [s for s in self.samples if s.index == index]
            util = [s.utilization for s in mine]
            result[index] = {
                "name": mine[0].name,
                "samples": len(mine),
                "util_median": statistics.median(util),
                "util_mean": statistics.fmean(util),
                "util_max": max(util),
                "memory_max_mib": max(s.memory_mib for s in mine),
            }
        return result

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            sample = _parse(line)
            if sample is not None:
                self.samples.append(sample)
            elif line.strip():
                self.errors.append(line.strip())


def _parse(line: str) -> GpuSample | None:
    """A sample from ``index, name, utilization, memory`` (a name may hold commas); None for any other line."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 4:
        return None
    try:
        return GpuSample(int(parts[0]), ", ".join(parts[1:-2]), float(parts[-2]), float(parts[-1]))
    except ValueError:  # "[N/A]", "[Not Supported]", or a message
        return None
