"""Start TensorFlow without its screen of start-up lines, and say in one line what it runs on.

Importing TensorFlow writes C++ log lines to stderr: oneDNN notes, CUDA stubs
not found, and on every machine without a GPU a red ``failed call to cuInit ...
CUDA error`` that only means there is no GPU. ``TF_CPP_MIN_LOG_LEVEL`` hides the
lines logged once TensorFlow's logging has started, but not those written while
its libraries load. So ``import_tensorflow`` sets the level. It also
holds the process's stderr back during the import and the first look for GPUs.
If the import fails, what was held back is written out before the error is raised.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from types import ModuleType

__all__ = ["device_line", "import_tensorflow"]


def import_tensorflow(verbose: bool = False) -> ModuleType:
    """Import TensorFlow and look for its GPUs, quietly unless ``verbose``.

    Call it before anything else imports TensorFlow (later imports are then
    free); once TensorFlow is imported it only returns the module.

    Args:
        verbose: let TensorFlow write all its start-up lines.

    Returns:
        The ``tensorflow`` module.
    """
    if "tensorflow" in sys.modules or verbose:
        import tensorflow as tf

        return tf
    # 2: errors only, from here on; an error after start-up is still shown.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _stderr_held():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # where the cuInit error of a machine without a GPU comes from
    return tf


def device_line() -> str:
    """One plain line on the devices TensorFlow uses, e.g. ``TensorFlow 2.21.0 on the CPU: no GPU visible``."""
    tf = import_tensorflow()
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return f"TensorFlow {tf.__version__} on the CPU: no GPU visible"
    return f"TensorFlow {tf.__version__} on {len(gpus)} GPU{'s' if len(gpus) > 1 else ''}: " + ", ".join(
        gpu.name for gpu in gpus
    )


@contextlib.contextmanager
def _stderr_held() -> Iterator[None]:
    """Send file descriptor 2 to a temporary file; on an exception, write out what it got."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable stderr: nothing to hold back
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            _restore(saved)
            held.seek(0)
            sys.stderr.write(held.read().decode(errors="replace"))
            sys.stderr.flush()
            raise
        _restore(saved)


def _restore(saved: int) -> None:
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
