"""A small Conv3D video classifier and its compiled train and eval steps.

Shared by ``examples/train_video.py`` and the benchmark scripts, which import
``build_model``, ``make_train_step`` and ``make_eval_step`` from this file.
The steps are ``tf.function``s meant to run in the thread that drives training,
while loader threads decode the next batches.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

__all__ = ["build_model", "make_eval_step", "make_multiview_eval_step", "make_train_step"]


def build_model(num_classes: int, clip_shape: tuple[int, int, int, int]) -> keras.Model:
    """Build a small 3D convolutional network that classifies clips by their motion.

    The input frames are paired with their differences from the frames before
    them. Three Conv3D blocks (16, 32 and 64 filters, 3x3x3 kernels) see a few
    frames at a time, so they can tell motion apart; pooling is spatial first and
    temporal later, and global average pooling makes the result independent of
    where the motion happens. It has about 70 thousand weights.

    Args:
        num_classes: the number of outputs (logits, no softmax).
        clip_shape: ``(frames, height, width, channels)`` of one clip; at least 2 frames.

    Returns:
        An uncompiled ``keras.Model`` mapping a float clip batch to logits.
    """
    inputs = keras.Input(shape=clip_shape, name="clips")
    # Give the first layer each frame next to its difference from the previous one:
    # motion shows directly instead of having to be learnt from a static background.
    x = keras.layers.Concatenate(axis=-1)([inputs[:, 1:], inputs[:, 1:] - inputs[:, :-1]])
    for filters, pool in ((16, (1, 2, 2)), (32, (2, 2, 2)), (64, (2, 2, 2))):
        x = keras.layers.Conv3D(filters, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling3D(pool, padding="same")(x)  # any clip of 2 or more frames fits
    x = keras.layers.GlobalAveragePooling3D()(x)
    outputs = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, outputs, name="video_conv3d")


def make_train_step(
    model: keras.Model, optimizer: keras.optimizers.Optimizer
) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """Make a compiled training step for ``model``.

    The step takes ``(clips, labels)`` (float32 ``(B, T, H, W, 3)`` and int
    ``(B,)``), applies one optimizer update with sparse softmax cross-entropy, and
    returns ``(mean loss, number of correct predictions)`` as tensors, without
    waiting for them: call ``.numpy()`` only when you need the figures. The batch
    size may vary without retracing.
    """
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(reduce_retracing=True)
    def train_step(clips: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            logits = model(clips, training=True)
            loss = loss_fn(labels, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss, _correct(labels, logits)

    return train_step


def make_eval_step(model: keras.Model) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """Make a compiled evaluation step: ``(clips, labels) -> (summed loss, number correct)``.

    The loss is summed, not averaged, so that batches of different sizes add up
    to a correct mean over the whole set.
    """
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")

    @tf.function(reduce_retracing=True)
    def eval_step(clips: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        logits = model(clips, training=False)
        return loss_fn(labels, logits), _correct(labels, logits)

    return eval_step


def make_multiview_eval_step(model: keras.Model) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """Make a compiled multi-view evaluation step: ``(clips, labels) -> (views correct, videos correct)``.

    ``clips`` has a views axis, ``(B, V, T, H, W, 3)``, as ``VideoFolder`` gives
    with ``num_clips`` or ``num_crops``. Every view is classified on its own:
    the first output counts the views classified right (clip accuracy is that
    over ``B * V``); the second counts the videos whose views' mean softmax
    picks the right class (video accuracy is that over ``B``).
    """

    @tf.function(reduce_retracing=True)
    def multiview_eval_step(clips: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        views = clips.shape[1]
        logits = model(tf.reshape(clips, (-1, *clips.shape[2:])), training=False)
        logits = tf.reshape(logits, (-1, views, logits.shape[-1]))
        labels = tf.cast(labels, tf.int64)
        per_view = tf.reshape(tf.repeat(labels[:, None], views, axis=1), (-1,))
        clip_correct = _correct(per_view, tf.reshape(logits, (-1, logits.shape[-1])))
        return clip_correct, _correct(labels, tf.reduce_mean(tf.nn.softmax(logits), axis=1))

    return multiview_eval_step


def _correct(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int64)
    return tf.reduce_sum(tf.cast(tf.equal(predicted, tf.cast(labels, tf.int64)), tf.int32))
