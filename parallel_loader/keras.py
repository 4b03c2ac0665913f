"""Keras callbacks for training from a loader: ``LoaderStats`` adds the loader's figures to each epoch's logs.

See :doc:`/guide/training` for how to use them with ``model.fit``.
"""

from .tensorflow._keras import LoaderStats

__all__ = ["LoaderStats"]
