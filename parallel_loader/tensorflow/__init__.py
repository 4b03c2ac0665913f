"""The TensorFlow side: a loader as a ``tf.data.Dataset``, batches copied to the GPU ahead, a quiet import.

Nothing here imports TensorFlow until it is called. See :doc:`/guide/training`.
"""

from ._device_prefetch import DevicePrefetcher
from ._startup import device_line, import_tensorflow
from ._tf_data import as_tf_dataset, infer_signature, loader_of

__all__ = ["DevicePrefetcher", "as_tf_dataset", "device_line", "import_tensorflow", "infer_signature", "loader_of"]
