"""Quick start: four loader threads batch a map-style dataset while the main thread trains."""

import numpy as np

from parallel_loader import DataLoader


class Clips:
    """A sample dataset: len() samples; get_sample(i, epoch) is one (clip, label). Loader threads call it at once."""

    def __len__(self):
        return 96  # samples; len(loader) is batches

    def get_sample(self, index, epoch):
        # Randomness from the index and the epoch, never from a shared generator or an epoch hook:
        # each epoch differs, and the next epoch's first batches are made while this one ends.
        rng = np.random.default_rng([index, epoch])
        return rng.random((8, 32, 32, 3), dtype=np.float32), index % 4


def train_step(clips, labels):
    """Stands in for the model's step (model.train_on_batch, a tf.function, ...)."""
    return float(clips.mean())


def main(epochs=2, step=train_step):
    # Each thread makes whole batches of 8 samples; shuffle draws a new order of the samples each epoch.
    with DataLoader(Clips(), num_threads=4, batch_size=8, shuffle=True, seed=0) as loader:
        for epoch in range(epochs):
            for clips, labels in loader:  # float32 (8, 8, 32, 32, 3), int64 (8,); 12 batches an epoch
                step(clips, labels)
            print(f"epoch {epoch}: {len(loader)} batches")


if __name__ == "__main__":
    main()
