"""Video indexes: ``IndexCache`` makes each on first use and keeps it; ``python -m parallel_loader.video.index``.

The command makes a data set's indexes ahead of time. See :doc:`/video/indexes`.
"""

from .._base.keys import SourceKey
from .._indexes.cache import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_TABLE_BYTES,
    ENVIRONMENT_VARIABLE,
    IndexCache,
    default_directory,
    default_index_cache,
    set_default_index_cache,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_TABLE_BYTES",
    "ENVIRONMENT_VARIABLE",
    "IndexCache",
    "SourceKey",
    "default_directory",
    "default_index_cache",
    "set_default_index_cache",
]
