"""Keras callbacks for training from a loader: ``LoaderStats`` adds figures to the logs; ``BackupAndRestore`` resumes.

See :doc:`/guide/training` for how to use them with ``model.fit``.
"""

from .tensorflow._keras import BackupAndRestore, LoaderStats

__all__ = ["BackupAndRestore", "LoaderStats"]
