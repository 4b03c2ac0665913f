"""Train: loader threads make batches while the calling thread runs a Keras model's steps, then validation."""

import keras
import numpy as np

from parallel_loader import Train


class Points:
    """A sample dataset: points in a square, labelled 1 inside the unit circle, else 0."""

    def __init__(self, samples, seed):
        self.points = np.random.default_rng(seed).uniform(-1.5, 1.5, (samples, 2)).astype(np.float32)

    def __len__(self):
        return len(self.points)

    def __getitem__(self, index):
        point = self.points[index]
        return point, np.float32(point @ point < 1.0)


def main(epochs=30):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, "relu"), keras.layers.Dense(1, "sigmoid")])
    model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy", metrics=["accuracy"])
    trainer = Train(
        main_task=lambda batch: model.train_on_batch(*batch, return_dict=True),
        train_yield=Points(2048, seed=0),  # shuffled each epoch, as Keras's fit does
        val_yield=Points(512, seed=1),
        val_task=lambda batch: model.test_on_batch(*batch, return_dict=True),
        batch_size=32,
        num_threads=2,
        seed=0,
        on_epoch_end=lambda stats: stats.val.metrics["accuracy"] >= 0.95,  # True stops the run after this epoch
    )
    history = trainer.run(epochs)  # a progress bar per epoch on a terminal, one line elsewhere
    last = history[-1]  # EpochStats: batches, seconds, wait_fraction, train and val passes
    print(f"{len(history)} epochs; validation accuracy {last.val.metrics['accuracy']:.3f}")
    return history


if __name__ == "__main__":
    main()
