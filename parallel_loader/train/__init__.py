"""``Train``: loader threads make batches while the calling thread trains, with progress and per-epoch records.

See :doc:`/guide/training`.
"""

from ._pass_stats import EpochStats, PassStats
from ._progress import BAR, LINE, PassProgress, progress_mode
from ._train import Train

__all__ = ["BAR", "LINE", "EpochStats", "PassProgress", "PassStats", "Train", "progress_mode"]
