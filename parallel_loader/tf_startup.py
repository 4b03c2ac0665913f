"""``import_tensorflow``: TensorFlow imported without its start-up log lines, and the line naming its devices.

The same names are in :mod:`parallel_loader.tensorflow`; see :doc:`/guide/training`.
"""

from .tensorflow._startup import device_line, import_tensorflow

__all__ = ["device_line", "import_tensorflow"]
