"""Save and resume a training run mid-epoch: model, optimizer and loader state together.

``TrainingCheckpoint`` keeps TensorFlow's ``tf.train.Checkpoint`` of the model and the
optimizer (through a ``tf.train.CheckpointManager``, which keeps the last few) and,
beside each one, the ``Train`` state as JSON: the epochs done and which batches of the
current epoch were delivered. Restoring both puts the run back at the batch after the
last one saved: the rest of that epoch, then the later epochs, in the same order.

The loader state of checkpoint ``n`` is written (atomically) before checkpoint ``n``
itself, so a checkpoint the manager lists always has its loader state.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import tensorflow as tf

from parallel_loader import Train

__all__ = ["TrainingCheckpoint"]

log = logging.getLogger("checkpointing")


class TrainingCheckpoint:
    """The model's and optimizer's variables and a ``Train``'s position, saved together in ``directory``.

    Args:
        directory: where the checkpoints go (made if missing).
        max_to_keep: how many of the latest checkpoints to keep.
        **trackables: what to save, as ``tf.train.Checkpoint`` takes it
            (``model=model, optimizer=optimizer``).
    """

    def __init__(self, directory: str | os.PathLike[str], max_to_keep: int = 3, **trackables: Any) -> None:
        self.directory = Path(directory)
        self._checkpoint = tf.train.Checkpoint(**trackables)
        self._manager = tf.train.CheckpointManager(self._checkpoint, str(self.directory), max_to_keep=max_to_keep)

    def save(self, trainer: Train) -> str:
        """Save the variables and ``trainer.state_dict()`` as they are now; return the checkpoint's path."""
        latest = self._manager.latest_checkpoint
        number = _number(latest) + 1 if latest else 1
        state = self._state_path(number)
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = state.with_suffix(".partial")
        partial.write_text(json.dumps(trainer.state_dict()), encoding="utf-8")
        partial.replace(state)  # complete before the checkpoint that names it exists
        path = self._manager.save(checkpoint_number=number)
        kept = {_number(p) for p in self._manager.checkpoints}
        for old in self.directory.glob("train-state-*.json"):
            if int(old.stem.rsplit("-", 1)[1]) not in kept:
                old.unlink(missing_ok=True)
        return path

    def restore(self, trainer: Train) -> str | None:
        """Restore the latest checkpoint into the variables and ``trainer``; ``None`` if there is none.

        Call it before ``trainer.run``. Raises ``ValueError`` if the saved loader
        state does not fit the trainer's data (another data set, say).
        """
        latest = self._manager.latest_checkpoint
        if latest is None:
            return None
        self._checkpoint.restore(latest)  # the optimizer's slots are restored when it first builds them
        state = json.loads(self._state_path(_number(latest)).read_text(encoding="utf-8"))
        trainer.load_state_dict(state)
        return latest

    def _state_path(self, number: int) -> Path:
        return self.directory / f"train-state-{number}.json"


def _number(checkpoint_path: str) -> int:
    """The number at the end of a checkpoint's path (``.../ckpt-12`` is 12)."""
    return int(checkpoint_path.rsplit("-", 1)[1])
