"""Loader calls in the actors of a Ray cluster: ``DataLoader(..., workers=RayWorkers(actors=K))``.

Needs the extra ``ray`` (``pip install 'parallel_loader[ray]'``); Ray itself is
imported only when a loader uses it. See :doc:`/guide/ray_cluster`.
"""

from ._calls.ray_workers import RayWorkers

__all__ = ["RayWorkers"]
