"""Quick start: loader threads decode clips from a folder of videos while Keras trains on them."""

import sys

import keras

from parallel_loader import as_tf_dataset
from parallel_loader.keras import LoaderStats
from parallel_loader.video import VideoFolder


def main(root="data/sample", epochs=2):
    # root/train/<class>/<video>.avi, as `make demo` writes it to data/sample.
    train = VideoFolder(f"{root}/train", batch_size=4, clip_len=8, stride=2, size=(48, 64), seed=0)
    clips, _labels = train(0)  # batch 0: float32 (4, 8, 48, 64, 3) in [0, 1], int64 (4,)
    model = keras.Sequential(
        [
            keras.Input(clips.shape[1:]),
            keras.layers.Conv3D(8, 3, activation="relu"),
            keras.layers.GlobalAveragePooling3D(),
            keras.layers.Dense(len(train.classes)),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    # One loader for the dataset's lifetime: each fit epoch is its next epoch. Leaving the block ends its threads.
    with as_tf_dataset(train, num_threads=2, shuffle=True, seed=0) as dataset:
        return model.fit(dataset, epochs=epochs, shuffle=False, callbacks=[LoaderStats(dataset)])  # the loader shuffles


if __name__ == "__main__":
    main(*sys.argv[1:2])
