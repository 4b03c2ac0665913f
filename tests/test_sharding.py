"""Sharding: disjoint shards that cover each epoch, equal lengths, both remainders, determinism."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from parallel_loader import DataLoader, YieldFunction
from parallel_loader._loader.sharding import check_shard, shard_length, shard_positions


class Indices(YieldFunction):
    """Batch i is i; records the epochs begun."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.begun: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __call__(self, index: int) -> int:
        return index

    def on_epoch_begin(self, epoch: int) -> None:
        self.begun.append(epoch)


CASES = [(length, shards) for length in (1, 2, 5, 7, 12, 13) for shards in (1, 2, 3, 4, 5) if length >= shards]


@pytest.mark.parametrize(("length", "shards"), CASES)
def test_drop_gives_disjoint_equal_shards_and_leaves_out_only_the_last_positions(length, shards):
    parts = [list(shard_positions(length, shards, i, "drop")) for i in range(shards)]
    per = length // shards
    assert all(len(p) == per == shard_length(length, shards, "drop") for p in parts)
    taken = sorted(itertools.chain.from_iterable(parts))
    assert taken == list(range(per * shards))  # disjoint, and only the last length % shards left out


@pytest.mark.parametrize(("length", "shards"), [*CASES, (1, 3), (2, 5)])
def test_pad_covers_the_epoch_in_equal_shards_topped_up_from_the_start(length, shards):
    parts = [list(shard_positions(length, shards, i, "pad")) for i in range(shards)]
    per = -(-length // shards)
    assert all(len(p) == per == shard_length(length, shards, "pad") for p in parts)
    taken = list(itertools.chain.from_iterable(parts))
    assert set(taken) == set(range(length))  # every position somewhere
    # the real positions are disjoint; the extra ones are the first positions of the order again
    padded = [p for i, part in enumerate(parts) for k, p in enumerate(part) if i + k * shards >= length]
    assert sorted(padded) == sorted(p % length for p in range(length, per * shards))  # from the start, wrapping
    assert sorted(taken) == sorted(list(range(length)) + padded)


@pytest.mark.parametrize("remainder", ["pad", "drop"])
def test_an_empty_epoch_gives_empty_shards(remainder):
    assert [list(shard_positions(0, 3, i, remainder)) for i in range(3)] == [[], [], []]


def test_shards_take_every_nth_position_so_each_step_takes_the_next_positions_of_the_order():
    assert list(shard_positions(10, 3, 0, "drop")) == [0, 3, 6]
    assert list(shard_positions(10, 3, 2, "drop")) == [2, 5, 8]
    assert list(shard_positions(10, 3, 0, "pad")) == [0, 3, 6, 9]
    assert list(shard_positions(10, 3, 1, "pad")) == [1, 4, 7, 0]
    assert list(shard_positions(10, 3, 2, "pad")) == [2, 5, 8, 1]
    assert list(shard_positions(10, 1, 0)) == list(range(10))


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((4, 2, 2), ValueError, r"shard_index must be in range\(num_shards\) = 0..1, got 2"),
        ((4, 2, -1), ValueError, "shard_index must be at least 0"),
        ((4, 0, 0), ValueError, "num_shards must be at least 1"),
        ((4, 2.0, 0), TypeError, "num_shards must be an int"),
        ((4, 2, True), TypeError, "shard_index must be an int"),
        ((4, 2, 0, "wrap"), ValueError, "shard_remainder must be 'pad' or 'drop'"),
        ((1, 2, 0, "drop"), ValueError, "leaves every shard empty: use shard_remainder='pad'"),
        ((-1, 2, 0), ValueError, "length must be at least 0"),
    ],
)
def test_bad_arguments_say_what_to_fix(args, error, message):
    with pytest.raises(error, match=message):
        shard_positions(*args)


def test_check_shard_accepts_numpy_ints():
    assert check_shard(np.int64(4), np.int32(3), "drop") == (4, 3, "drop")


def epoch_orders(n, shards, shard, *, threads=2, epochs=3, remainder="pad", shuffle=True, ordered=True):
    loader = DataLoader(
        Indices(n), num_threads=threads, shuffle=shuffle, seed=11, ordered=ordered,
        num_shards=shards, shard_index=shard, shard_remainder=remainder,
    )  # fmt: skip
    with loader:
        return len(loader), [list(loader) for _ in range(epochs)]


@pytest.mark.parametrize("remainder", ["pad", "drop"])
def test_loader_shards_cut_the_single_global_permutation_of_each_epoch(remainder):
    n, shards = 23, 3
    _, full = epoch_orders(n, 1, 0)  # the unsharded loader's shuffled orders, same seed
    lengths, parts = zip(*(epoch_orders(n, shards, i, remainder=remainder) for i in range(shards)), strict=True)
    per = -(-n // shards) if remainder == "pad" else n // shards
    assert set(lengths) == {per}
    for epoch in range(3):
        order = full[epoch]
        padded = order + order if remainder == "pad" else order
        for i in range(shards):
            assert parts[i][epoch] == padded[i : per * shards : shards]
        got = list(itertools.chain.from_iterable(p[epoch] for p in parts))
        if remainder == "drop":
            assert sorted(got) == sorted(order[: per * shards])  # disjoint; the order's last n % shards left out
        else:
            assert set(got) == set(range(n)) and len(got) == per * shards
    # A new permutation each epoch: every pair of shard 0's three epochs differs.
    assert all(a != b for a, b in itertools.combinations(parts[0], 2)), parts[0]


@pytest.mark.parametrize("ordered", [True, False])
def test_a_shard_does_not_depend_on_the_number_of_threads(ordered):
    one = epoch_orders(40, 4, 1, threads=1, ordered=ordered)
    many = epoch_orders(40, 4, 1, threads=5, ordered=ordered)
    if ordered:
        assert one == many
    else:
        assert one[0] == many[0] and [sorted(e) for e in one[1]] == [sorted(e) for e in many[1]]


def test_without_shuffle_every_epoch_has_the_same_shard():
    length, orders = epoch_orders(9, 2, 1, shuffle=False)
    assert length == 5
    assert orders == [[1, 3, 5, 7, 0]] * 3


def test_the_yield_function_still_sees_every_epoch():
    fn = Indices(6)
    with DataLoader(fn, num_threads=2, num_shards=2, shard_index=0, first_epoch=4) as loader:
        assert sorted(loader) == [0, 2, 4]
        assert sorted(loader) == [0, 2, 4]
    assert fn.begun == [4, 5]


def test_sharding_needs_a_seed_to_shuffle_and_indices():
    with pytest.raises(ValueError, match="needs a seed, the same on every shard"):
        DataLoader(Indices(4), shuffle=True, num_shards=2)
    with pytest.raises(ValueError, match="num_shards > 1 needs a yield function with __len__"):
        DataLoader(lambda: 0, num_shards=2)
    with pytest.raises(ValueError, match=r"shard_index must be in range\(num_shards\)"):
        DataLoader(Indices(4), num_shards=2, shard_index=2)


def test_drop_with_fewer_batches_than_shards_fails_at_len_and_at_the_epoch():
    fn = Indices(1)
    with DataLoader(fn, num_shards=2, shard_index=1, shard_remainder="drop") as loader:
        with pytest.raises(ValueError, match="leaves every shard empty"):
            len(loader)
        with pytest.raises(ValueError, match="leaves every shard empty"):
            list(loader)
        fn.n = 4  # the loader is still usable once the epoch is long enough
        assert sorted(loader) == [1, 3]  # unordered: 4 threads may deliver in any order


@pytest.mark.parametrize("length", [1, 3, 26, 27, 28])
@pytest.mark.parametrize(("shards", "replicas"), [(1, 2), (2, 2), (1, 3), (3, 2)])
def test_with_replicas_every_shard_is_a_multiple_of_them_by_the_same_remainder_rule(length, shards, replicas):
    parts = shards * replicas
    padded = [shard_positions(length, shards, i, "pad", replicas) for i in range(shards)]
    each = shard_length(length, shards, "pad", replicas)
    assert each == -(-length // parts) * replicas and all(len(s) == each for s in padded)
    assert sorted(set(itertools.chain(*padded))) == list(range(length))  # all of it, topped up from the start
    if length < parts:
        with pytest.raises(ValueError, match=f"{shards} shard\\(s\\) of {replicas} replicas"):
            shard_length(length, shards, "drop", replicas)
        return
    dropped = [list(shard_positions(length, shards, i, "drop", replicas)) for i in range(shards)]
    assert all(len(s) == length // parts * replicas for s in dropped)
    assert sorted(itertools.chain(*dropped)) == list(range(length // parts * parts))  # the last ones left out


@pytest.mark.parametrize(("remainder", "batches"), [("pad", [*range(27), 0]), ("drop", list(range(26)))])
def test_a_loader_for_two_replicas_keeps_each_epoch_even_and_resumes_in_it(remainder, batches):
    with DataLoader(Indices(27), num_threads=3, ordered=True, replicas=2, shard_remainder=remainder) as loader:
        assert len(loader) == len(batches)
        assert list(loader) == batches
        part = []
        for batch in loader:
            part.append(batch)
            if len(part) == 5:
                break
        state = loader.state_dict()
    resumed = DataLoader(Indices(27), num_threads=2, ordered=True, replicas=2, shard_remainder=remainder)
    resumed.load_state_dict(state)
    with resumed:
        assert part + list(resumed) == batches


def test_replicas_need_a_yield_function_with_a_length():
    with pytest.raises(ValueError, match="replicas > 1 needs a yield function with __len__"):
        DataLoader(lambda: 1, replicas=2)
    with pytest.raises(ValueError, match="replicas must be at least 1"):
        DataLoader(Indices(4), replicas=0)
