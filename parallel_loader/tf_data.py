"""``as_tf_dataset`` and the loader behind a ``tf.data.Dataset`` (``loader_of``); TensorFlow is imported when called.

The same names are in :mod:`parallel_loader.tensorflow`; see :doc:`/guide/training`.
"""

from .tensorflow._tf_data import as_tf_dataset, infer_signature, loader_of

__all__ = ["as_tf_dataset", "infer_signature", "loader_of"]
