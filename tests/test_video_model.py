"""The example's model and compiled steps, which the benchmark scripts import too."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "video_model.py"


def load_example():
    spec = importlib.util.spec_from_file_location("video_model", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_steps_learn_a_batch_and_take_any_batch_size():
    import keras

    video_model = load_example()
    keras.utils.set_random_seed(0)
    model = video_model.build_model(3, (4, 16, 20, 3))
    train_step = video_model.make_train_step(model, keras.optimizers.Adam(3e-3))
    eval_step = video_model.make_eval_step(model)
    rng = np.random.default_rng(0)
    clips = rng.random((6, 4, 16, 20, 3), dtype=np.float32)
    labels = np.array([0, 1, 2, 0, 1, 2])
    assert model.output_shape == (None, 3)
    for _ in range(40):
        loss, correct = train_step(clips, labels)
    assert np.isfinite(float(loss))
    assert int(correct) == 6  # a small net can memorise six clips
    summed, correct = eval_step(clips[:4], labels[:4])  # another batch size
    assert int(correct) == 4
    assert float(summed) < 4 * 0.5


def test_multiview_step_scores_every_view_and_each_video_by_its_mean_softmax():
    import keras

    video_model = load_example()
    keras.utils.set_random_seed(1)
    model = video_model.build_model(3, (4, 16, 20, 3))
    step = video_model.make_multiview_eval_step(model)
    rng = np.random.default_rng(1)
    for batch in (5, 2):  # any batch size
        clips = rng.random((batch, 6, 4, 16, 20, 3), dtype=np.float32)
        logits = model.predict(clips.reshape(-1, 4, 16, 20, 3), verbose=0).reshape(batch, 6, 3)
        labels = logits.sum(axis=1).argmax(axis=1) if batch == 5 else np.array([0, 1])
        clip_correct, video_correct = step(clips, labels)
        assert int(clip_correct) == int((logits.argmax(axis=2) == labels[:, None]).sum())
        probs = np.exp(logits - logits.max(axis=2, keepdims=True))
        probs /= probs.sum(axis=2, keepdims=True)
        assert int(video_correct) == int((probs.mean(axis=1).argmax(axis=1) == labels).sum())
