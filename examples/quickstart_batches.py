"""A batch-level yield function: each call makes a whole batch, and loader threads call it at once."""

import numpy as np

from parallel_loader import DataLoader, YieldFunction


class ClipBatches(YieldFunction):
    """len() batches an epoch; self(index) makes batch index, any object. Several threads call it at once."""

    def __len__(self):
        return 20

    def __call__(self, index):
        rng = np.random.default_rng(index)  # randomness from the index, never from a shared generator
        return rng.random((4, 8, 32, 32, 3), dtype=np.float32), rng.integers(0, 5, 4)


def train_step(clips, labels):
    """Stands in for the model's step."""
    return float(clips.mean())


def main(epochs=2, step=train_step):
    # shuffle changes the order the batches come in each epoch, not what is in each batch.
    # ordered=True would deliver them in that order whichever thread finishes first.
    with DataLoader(ClipBatches(), num_threads=4, shuffle=True, seed=0) as loader:
        for epoch in range(epochs):
            for clips, labels in loader:  # float32 (4, 8, 32, 32, 3), int64 (4,)
                step(clips, labels)
            print(f"epoch {epoch}: {len(loader)} batches")


if __name__ == "__main__":
    main()
