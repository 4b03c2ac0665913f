"""FIFOQueue: order, bounds, blocking, timeouts and closing."""

import threading

import numpy as np
import pytest

from parallel_loader import FIFOQueue, QueueClosed
from tests.helpers import assert_blocks_until, join_all, run_in_thread


def test_items_come_out_in_order_and_none_is_an_item():
    q = FIFOQueue(4)
    for item in ["a", None, 3]:
        q.enqueue(item)
    assert len(q) == 3
    assert [q.dequeue(), q.dequeue(), q.dequeue()] == ["a", None, 3]
    assert len(q) == 0


def test_attributes_and_independent_instances():
    a, b = FIFOQueue(2), FIFOQueue(5)
    a.enqueue(1)
    assert (a.max_len, b.max_len) == (2, 5)
    assert (len(a), len(b)) == (1, 0)
    assert not a.closed
    a.close()
    assert a.closed and not b.closed
    assert "closed" in repr(a)


@pytest.mark.parametrize("bad", [0, -3])
def test_max_len_below_one_is_a_value_error(bad):
    with pytest.raises(ValueError, match="max_len must be at least 1"):
        FIFOQueue(bad)


@pytest.mark.parametrize("bad", [2.5, "4", None, True])
def test_max_len_not_an_int_is_a_type_error(bad):
    with pytest.raises(TypeError, match="max_len must be an int"):
        FIFOQueue(bad)


def test_enqueue_blocks_while_full_until_a_dequeue():
    q = FIFOQueue(1)
    q.enqueue("first")
    assert_blocks_until(lambda: q.enqueue("second"), q.dequeue)
    assert q.dequeue() == "second"


def test_dequeue_blocks_while_empty_until_an_enqueue():
    q = FIFOQueue(1)
    assert assert_blocks_until(q.dequeue, lambda: q.enqueue("x")) == "x"


def test_timeouts_raise_timeout_error():
    q = FIFOQueue(1)
    with pytest.raises(TimeoutError):
        q.dequeue(timeout=0.01)
    with pytest.raises(TimeoutError):
        q.dequeue(timeout=0)
    q.enqueue(1)
    with pytest.raises(TimeoutError):
        q.enqueue(2, timeout=0.01)
    assert len(q) == 1, "a timed-out enqueue must not add its item"
    assert q.dequeue(timeout=0) == 1


def test_negative_timeout_is_a_value_error_even_when_the_call_would_not_block():
    q = FIFOQueue(2)
    with pytest.raises(ValueError, match="timeout"):
        q.enqueue(1, timeout=-1)
    q.enqueue(1)
    with pytest.raises(ValueError, match="timeout"):
        q.dequeue(timeout=-0.5)
    assert len(q) == 1


@pytest.mark.parametrize(("timeout", "error"), [(float("nan"), ValueError), ("1", TypeError), (True, TypeError)])
def test_a_timeout_that_is_not_a_number_of_seconds_is_refused_at_once(timeout, error):
    q = FIFOQueue(1)
    with pytest.raises(error, match="timeout"):
        q.dequeue(timeout=timeout)  # NaN used to spin for ever
    q.enqueue(1)
    with pytest.raises(error, match="timeout"):
        q.enqueue(2, timeout=timeout)
    assert len(q) == 1


def test_an_infinite_timeout_waits_like_none():
    q = FIFOQueue(1)
    assert assert_blocks_until(lambda: q.dequeue(timeout=float("inf")), lambda: q.enqueue("x")) == "x"
    q.enqueue("full")
    assert_blocks_until(lambda: q.enqueue("more", timeout=float("inf")), q.dequeue)
    assert q.dequeue() == "more"


def test_numpy_integer_capacity_is_accepted():
    q = FIFOQueue(np.int64(2))
    assert q.max_len == 2 and type(q.max_len) is int


# close(): {enqueue, dequeue} x {blocked, not blocked} x {empty, not empty}


@pytest.mark.parametrize("items", [0, 1])
def test_enqueue_after_close_raises(items):
    q = FIFOQueue(2)
    for i in range(items):
        q.enqueue(i)
    q.close()
    with pytest.raises(QueueClosed):
        q.enqueue("late")
    assert len(q) == items


def test_close_wakes_a_blocked_enqueue_which_raises():
    q = FIFOQueue(1)
    q.enqueue("kept")
    with pytest.raises(QueueClosed):
        assert_blocks_until(lambda: q.enqueue("dropped"), q.close)
    assert q.dequeue() == "kept"
    with pytest.raises(QueueClosed):
        q.dequeue()


def test_dequeue_after_close_drains_then_raises():
    q = FIFOQueue(3)
    for i in range(3):
        q.enqueue(i)
    q.close()
    assert [q.dequeue(), q.dequeue(), q.dequeue()] == [0, 1, 2]
    with pytest.raises(QueueClosed):
        q.dequeue()
    with pytest.raises(QueueClosed):
        q.dequeue(timeout=1)


def test_close_wakes_a_blocked_dequeue_which_raises():
    q = FIFOQueue(1)
    with pytest.raises(QueueClosed):
        assert_blocks_until(q.dequeue, q.close)


def test_close_is_idempotent():
    q = FIFOQueue(1)
    q.enqueue(1)
    q.close()
    q.close()
    assert q.closed
    assert q.dequeue() == 1


def test_close_wakes_every_waiter_at_once():
    empty, full = FIFOQueue(1), FIFOQueue(1)
    full.enqueue(0)
    ready = threading.Barrier(7)

    def waiting(call):
        def run():
            ready.wait(5)
            return call()

        return run

    started = [run_in_thread(waiting(empty.dequeue), f"get-{i}") for i in range(3)]
    started += [run_in_thread(waiting(lambda: full.enqueue(1)), f"put-{i}") for i in range(3)]
    ready.wait(5)
    empty.close()
    full.close()
    join_all([t for t, _ in started])
    assert all(isinstance(out.get("error"), QueueClosed) for _, out in started)


def test_many_producers_and_consumers_lose_and_duplicate_nothing():
    producers, consumers, per_producer = 8, 8, 12_500  # 100,000 items
    q = FIFOQueue(16)
    received: list[list[tuple[int, int]]] = [[] for _ in range(consumers)]

    def produce(p):
        for seq in range(per_producer):
            q.enqueue((p, seq))

    def consume(c):
        out = received[c]
        while True:
            try:
                out.append(q.dequeue())
            except QueueClosed:
                return

    consumer_threads = [threading.Thread(target=consume, args=(c,), name=f"consumer-{c}") for c in range(consumers)]
    producer_threads = [threading.Thread(target=produce, args=(p,), name=f"producer-{p}") for p in range(producers)]
    for t in consumer_threads + producer_threads:
        t.start()
    join_all(producer_threads, timeout=60)
    q.close()
    join_all(consumer_threads, timeout=60)

    everything = [item for out in received for item in out]
    assert len(everything) == producers * per_producer
    assert set(everything) == {(p, s) for p in range(producers) for s in range(per_producer)}
    for out in received:  # each consumer saw each producer's items in the order they were put
        for p in range(producers):
            seqs = [s for (q_p, s) in out if q_p == p]
            assert seqs == sorted(seqs)
