"""The batches of one shard of an epoch, for one worker of a multi-worker job (pure functions).

See :doc:`/guide/distributed` for how the loader, ``Train`` and ``as_tf_dataset`` use them.
"""

from ._loader.sharding import REMAINDERS, Remainder, check_shard, shard_length, shard_positions

__all__ = ["REMAINDERS", "Remainder", "check_shard", "shard_length", "shard_positions"]
