"""Starting TensorFlow quietly: no start-up lines, one line on the device, nothing hidden on a failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

QUIET = (
    "from parallel_loader.tf_startup import device_line, import_tensorflow; import_tensorflow(); print(device_line())"
)


def run(code: str, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(REPO)) if p)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_tensorflow_starts_without_its_log_lines_and_says_where_it_runs():
    result = run(QUIET)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", "TensorFlow's start-up lines are held back"
    assert re.fullmatch(r"TensorFlow \S+ on (the CPU: no GPU visible|\d+ GPUs?: .+)\n", result.stdout)


def test_a_failing_import_shows_what_was_held_back(tmp_path: Path):
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import os\nos.write(2, b'native loader: libfoo.so not found\\n')\nraise ImportError('broken install')\n"
    )
    result = run(QUIET, pythonpath=str(tmp_path))
    assert result.returncode != 0
    assert "native loader: libfoo.so not found" in result.stderr
    assert "ImportError: broken install" in result.stderr
