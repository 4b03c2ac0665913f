"""Sharding: every worker computes the same shuffled order of an epoch and delivers only its own shard."""

import numpy as np

from parallel_loader import DataLoader, YieldFunction, as_tf_dataset


class Batches(YieldFunction):
    """10 batches an epoch; batch i holds i, so a worker's batches show which it got."""

    def __init__(self, batch_size=4):
        self.batch_size = batch_size

    def __len__(self):
        return 10

    def __call__(self, index):
        return np.full(self.batch_size, index)


def shard(shard_index, num_shards=3, epochs=2):
    """The batches worker shard_index of num_shards reads in each epoch (the same seed on every worker)."""
    loader = DataLoader(Batches(), num_threads=2, shuffle=True, seed=0, num_shards=num_shards, shard_index=shard_index)
    with loader:
        return [[int(batch[0]) for batch in loader] for _ in range(epochs)]


def dataset_fn(context):
    """For strategy.distribute_datasets_from_function: this input pipeline's shard of every epoch."""
    batches = Batches(batch_size=context.get_per_replica_batch_size(8))  # each batch goes to one replica
    return as_tf_dataset(batches, shuffle=True, seed=0, input_context=context)


if __name__ == "__main__":
    for i in range(3):
        # 10 batches in 3 shards: 4 each, the short shards topped up from the start of the order.
        print(f"shard {i}: {shard(i)}")
