"""The dict ``DataLoader.state_dict`` saves, and its checks when ``load_state_dict`` reads it back.

The state is JSON. It holds:

* the epoch to go on with;
* which of its positions were done: ranges, as ``EpochPlan.done_ranges`` gives
  them, or a count for a stream;
* the epoch's length, the seed and shuffle setting, and the shard;
* the counts: errors as an int ``max_errors`` counts them, samples lost
  (``lost``, for a fraction), and calls done;
* the first errors' records, quoted, for a resumed run's ``ErrorBudgetExceeded`` (``first_errors``).

``loaded`` refuses a state that does not fit the loader (another length, seed,
shard or shuffle setting). Its message says what differs. See :doc:`/guide/long_runs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._core.checks import check_int
from .epoch_plan import EpochPlan

__all__ = ["FORMAT", "LoadedState", "loaded", "saved"]

# The version of the dict that state_dict() returns.
FORMAT = 1


def saved(
    *,
    epoch: int,
    done: Any,
    length: int | None,
    seed: int,
    shuffle: bool,
    shard: list[int],
    errors: int,
    calls: int,
    lost: int,
    first_errors: list[str],
) -> dict[str, Any]:
    """The state dict, in the current format."""
    return {
        "format": FORMAT,
        "epoch": epoch,
        "done": done,
        "length": length,
        "seed": seed,
        "shuffle": shuffle,
        "shard": shard,
        "errors": errors,
        "calls": calls,
        "lost": lost,
        "first_errors": first_errors,
    }


@dataclass(frozen=True)
class LoadedState:
    """A saved state, checked: the epoch to go on with, what of it was done, and the counts."""

    epoch: int
    seed: int
    errors: int
    calls: int
    lost: int | None  # samples lost; None in a state saved before it was kept
    first_errors: list[str]
    done: Any  # as saved, to pass on unchanged until the loader iterates
    resume: list[int] | int  # the done positions (a count for a stream)


def loaded(
    state: dict[str, Any],
    *,
    length: int | None,
    shuffle: bool,
    shard: list[int],
    seed: int | None,
) -> LoadedState:
    """Check ``state`` against the loader that loads it.

    Args:
        state: what ``state_dict`` returned.
        length: the loader's batches per epoch; ``None`` for a stream.
        shuffle: whether the loader shuffles.
        shard: the loader's ``[shard_index, num_shards]``.
        seed: the loader's seed if it was given one (shuffled orders must then match), else ``None``.

    Raises:
        ValueError: the state is malformed or does not fit the loader.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"not a DataLoader state of format {FORMAT}: {state!r:.200}")
    try:
        epoch = check_int("the state's epoch", state["epoch"], minimum=0)
        saved_seed = check_int("the state's seed", state["seed"], minimum=0)
        errors = check_int("the state's errors", state.get("errors", 0), minimum=0)
        calls = check_int("the state's calls", state.get("calls", 0), minimum=0)
        lost = state.get("lost")
        lost = None if lost is None else check_int("the state's lost samples", lost, minimum=0)
        first_errors = [str(quoted) for quoted in state.get("first_errors", [])]
        done = state["done"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed DataLoader state ({exc}): {state!r:.200}") from None
    if state.get("shuffle", False) != shuffle:
        raise ValueError(f"the state was saved with shuffle={state.get('shuffle')}, this loader has {shuffle}")
    if state.get("shard", [0, 1]) != shard:
        raise ValueError(
            f"the state was saved by shard {state.get('shard')} (index, count), this loader is shard {shard}: "
            "each shard resumes from its own state"
        )
    if shuffle and seed is not None and saved_seed != seed:
        raise ValueError(
            f"the state was saved with seed={saved_seed}, this loader has seed={seed}: "
            "the shuffled orders would differ; pass the same seed, or none"
        )
    resume: list[int] | int
    if length is None:
        resume = check_int("the state's done count", done, minimum=0)
    else:
        if state.get("length") != length:
            raise ValueError(
                f"the state was saved for {state.get('length')} batches per epoch, the yield function "
                f"now has {length}: it is not the same data"
            )
        resume = EpochPlan.positions(done, length)
    return LoadedState(
        epoch=epoch, seed=saved_seed, errors=errors, calls=calls, lost=lost, first_errors=first_errors, done=done,
        resume=resume,
    )  # fmt: skip
