"""Ray mode, the loader's side: ``RayCalls`` makes the calls of the yield function in Ray actors.

With ``workers=RayWorkers(actors=K, calls_per_actor=C)`` the loader runs ``K * C``
loader threads. Each sends its task to the actor with the fewest calls in
progress, and waits for the batch. The plan, the order, the budget and the state
stay in the loader. An actor's *place* is its number: the watchdog replaces a
stuck actor in its place, and ``max_restarts`` a dead one. What runs in an actor
is in ``ray_actor``. See :doc:`/guide/ray_cluster`.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.interrupt_safe import new_lock
from .._core.telemetry import CallTimes
from .._core.worker_pool import CallSlot
from .._faults.errors import LoaderClosed, WorkerProcessDied
from .._faults.results import Task
from .ray_actor import CallActor
from .ray_workers import RayWorkers, connect
from .remote_errors import hook_everywhere, rebuilt
from .thread_calls import Report

__all__ = ["RayCalls"]

log = logging.getLogger(__name__)

_STACK_WAIT = 2.0  # seconds to wait for a stuck actor's stack before killing it without
_START_WAIT = 60.0  # seconds a loader thread waits for the actors to start before its first call


class RayCalls:
    """The calls of one loader's yield function, made in the actors of a Ray cluster.

    Args:
        spec: the actors asked for.
        yield_fn: the batch-level yield function; Ray must be able to pickle it.
        stream: whether ``yield_fn`` is a stream (refused: see Raises).
        thread_init: called in each actor thread with its number; Ray must be able to pickle it.
        report: where failures that the yield function reports itself go (its error sink).
        name: the loader's name; the actors are ``name-actor-0``, ...

    Raises:
        ValueError: ``yield_fn`` is a stream.
        TypeError: ``yield_fn`` or ``thread_init`` cannot be pickled.
        ConnectionError: the cluster's address does not answer.
    """

    resizable = False

    def __init__(
        self,
        spec: RayWorkers,
        yield_fn: Any,
        *,
        stream: bool,
        thread_init: Callable[[int], Any] | None,
        report: Report,
        name: str,
    ) -> None:
        if stream:
            raise ValueError(
                "workers=RayWorkers(...) needs a yield function with __len__ (a YieldFunction): each actor "
                "has its own copy of the function, so a stream would be read once per actor"
            )
        import ray  # an optional dependency (the extra "ray")

        try:
            ray.cloudpickle.dumps((yield_fn, thread_init))
        except Exception as exc:
            raise TypeError(
                "workers=RayWorkers(...) sends the yield function and thread_init to each actor by pickling "
                f"them, and they cannot be pickled: {exc!r}. Keep open files, locks and decoders out of their "
                "state (open those on first use in each actor)"
            ) from exc
        self.spec = spec
        self.name = name
        self.address = connect(spec.address)
        self._ray = ray
        self._yield_fn = yield_fn
        self._thread_init = thread_init
        self._report = report
        self._class = ray.remote(
            max_concurrency=spec.calls_per_actor, concurrency_groups={"control": 1}, **spec.actor_options()
        )(CallActor)
        _warn_if_short(ray, spec, name)
        # Guards the places, the running calls and the flag below.
        self._lock = new_lock()
        self._closing = False
        self._ids = itertools.count()
        self._running: dict[threading.Thread, tuple[_Place, int, int]] = {}  # thread -> place, generation, id
        self._abandoned: set[threading.Thread] = set()  # loader threads whose stuck call was given up
        self._transfer = 0.0
        self._places = [_Place(i, f"{name}-actor-{i}") for i in range(spec.actors)]
        with self._lock:
            for place in self._places:
                self._start(place)
        # Ends the actors if the loader is dropped without close().
        self._finalizer = weakref.finalize(self, _kill, ray, self._places)
        self.thread_init = self._started

    @property
    def actors(self) -> list[Any]:
        """The handle of each actor running now (``None`` in the place of one that died for good)."""
        with self._lock:
            return [p.actor if p.dead is None else None for p in self._places]

    def width(self, num_threads: int) -> int:
        return self.spec.width

    def call(self, task: Task) -> Any:
        me = threading.current_thread()
        retried = False
        while True:
            place, actor, generation = self._take()
            call_id = next(self._ids)
            self._running[me] = (place, generation, call_id)
            started = time.perf_counter()
            try:
                reply = self._ray.get(actor.call.remote(task, call_id))
                batch = _owned(reply[1]) if reply[0] == "ok" else None
            except self._ray.exceptions.RayActorError as exc:
                if self._lost(me, place, generation):
                    return None  # an abandoned call: the pool drops its result
                if generation in place.killed:
                    continue  # the watchdog replaced the actor for another call: sent to the replacement
                if place.dead is None and not retried:
                    retried = True
                    continue  # the actor was replaced (max_restarts): sent again, once
                raise WorkerProcessDied(
                    f"{self.name}: {place.name} ({self.address}) died while making index {task[4]}: {exc}",
                    process=place.name,
                    exitcode=None,
                    index=task[4],
                ) from None
            finally:
                self._running.pop(me, None)
                with self._lock:
                    if place.generation == generation:
                        place.busy -= 1
            with self._lock:
                place.times.add(reply[-1])
                self._transfer += max(0.0, time.perf_counter() - started - reply[-1])
            for index, error, context in reply[-2]:
                self._report(index, error, context)
            if reply[0] == "error":
                raise rebuilt(reply[1], reply[2])
            return batch

    def stuck(self, slot: CallSlot, skip: tuple[str, ...] = ()) -> str:
        with self._lock:
            running = self._running.get(slot.thread)
            if running is None or self._closing or running[0].generation != running[1]:
                return slot.stack(skip=skip)
            place, generation, call_id = running
            actor = place.actor
        try:
            stack = self._ray.get(actor.stack.options(concurrency_group="control").remote(call_id), timeout=_STACK_WAIT)
        except Exception:
            stack = "(the actor gave no stack in time)\n"
        with self._lock:
            self._abandoned.add(slot.thread)
            if place.generation == generation and not self._closing:
                log.warning("%s: killing %s, stuck in a call", self.name, place.name)
                place.killed.add(generation)
                self._ray.kill(actor, no_restart=True)
                self._start(place)
        return f"in {place.name}:\n{stack}"

    def hook(self, name: str) -> Callable[[int], Any] | None:
        own = getattr(self._yield_fn, name, None)
        if own is None:
            return None

        def tell(actor: Any, epoch: int) -> tuple[BaseException, str] | None:
            try:
                return self._ray.get(actor.hook.options(concurrency_group="control").remote(name, epoch))
            except self._ray.exceptions.RayActorError:
                return None  # it died: a replacement gets the state after the hook

        return hook_everywhere(own, self._lock, lambda: [p.actor for p in self._places if p.dead is None], tell)

    def times(self) -> tuple[dict[str, CallTimes], float]:
        """Each actor's call times, as the actor measured them, and the seconds spent beyond them in all."""
        with self._lock:
            return {p.name: p.times for p in self._places}, self._transfer

    def close(self) -> None:
        with self._lock:
            self._closing = True
        self._finalizer()

    # Private: the loader threads' side.

    def _started(self, number: int) -> None:
        """The pool's thread_init: wait for the actors to start, so that no call_timeout counts a start.

        Past ``_START_WAIT`` seconds it goes on, and says so: actors the cluster cannot place never start.
        """
        with self._lock:
            starting = [p.ready for p in self._places if p.ready is not True]
        if starting:
            _, waiting = self._ray.wait(starting, num_returns=len(starting), timeout=_START_WAIT)
            if waiting and number == 0:
                log.warning(
                    "%s: %d actors have not started after %.0f s: does the cluster have the resources %s for each?",
                    self.name, len(waiting), _START_WAIT, self.spec.resources,
                )  # fmt: skip

    def _take(self) -> tuple[_Place, Any, int]:
        """The place with the fewest calls in progress, its actor and generation; counts the call."""
        with self._lock:
            if self._closing:
                raise LoaderClosed(f"{self.name}: the Ray actors are closed")
            live = [p for p in self._places if p.dead is None]
            if not live:
                raise WorkerProcessDied(
                    f"{self.name}: every Ray actor died ({self._places[0].dead}); max_restarts="
                    f"{self.spec.max_restarts} allowed no more replacements",
                    process=self._places[0].name,
                    exitcode=None,
                    index=None,
                )
            # An actor still starting would count its start against the call's call_timeout.
            ready = [p for p in live if self._ready(p)] or live
            place = min(ready, key=lambda p: p.busy)
            place.busy += 1
            return place, place.actor, place.generation

    def _ready(self, place: _Place) -> bool:
        """Whether the actor in ``place`` has started (a failed start counts: its calls then fail). Lock held."""
        if place.ready is not True:
            done, _ = self._ray.wait([place.ready], timeout=0)
            place.ready = True if done else place.ready
        return place.ready is True

    def _lost(self, me: threading.Thread, place: _Place, generation: int) -> bool:
        """The actor of a call died: replace it if allowed. True for a call the watchdog abandoned.

        Raises:
            LoaderClosed: the loader is closing.
        """
        with self._lock:
            if self._closing:
                raise LoaderClosed(f"{self.name}: the Ray actors were closed during a call")
            if me in self._abandoned:
                self._abandoned.discard(me)
                return True
            if place.generation == generation and generation not in place.killed:
                log.error("%s: %s died", self.name, place.name)
                if place.restarts < self.spec.max_restarts:
                    place.restarts += 1
                    self._start(place)
                else:
                    place.dead = f"{place.name} died"
            return False

    def _start(self, place: _Place) -> None:
        """Start (or replace) the actor in ``place`` with a copy of the yield function now. Lock held."""
        skip = bool(getattr(self._report, "skip", False))
        place.actor = self._class.options(name=None).remote(
            self._yield_fn, self._thread_init, place.number, self.spec.calls_per_actor, skip
        )
        place.ready = place.actor.__ray_ready__.remote()
        place.generation += 1
        place.busy = 0
        log.debug("%s: started %s", self.name, place.name)


class _Place:
    """One actor's place: the actor running in it now, replaced as need be."""

    def __init__(self, number: int, name: str) -> None:
        self.number = number
        self.name = name
        self.actor: Any = None
        self.ready: Any = True  # True once the actor has started, else the reference its start will fill
        self.generation = 0  # how many actors were started in this place
        self.busy = 0  # calls in progress in the actor of this generation
        self.restarts = 0  # replacements of actors that died (max_restarts)
        self.killed: set[int] = set()  # generations the watchdog killed
        self.dead: str | None = None  # why no actor runs here any more
        self.times = CallTimes()  # call times measured in the actors


def _owned(batch: Any) -> Any:
    """``batch`` with each read-only array (a view of Ray's object store) copied, as threads would give it."""
    kind = type(batch)
    if kind is np.ndarray:
        return batch if batch.flags.writeable else batch.copy()
    if kind is tuple or kind is list:
        return kind(_owned(item) for item in batch)
    if kind is dict:
        return {key: _owned(value) for key, value in batch.items()}
    return batch


def _warn_if_short(ray: Any, spec: RayWorkers, name: str) -> None:
    """Log when the cluster has too few CPUs for the actors: those left over wait until some are free."""
    need = spec.actor_options()["num_cpus"] * spec.actors
    have = ray.cluster_resources().get("CPU", 0)
    if need > have:
        log.warning("%s: %s actors reserve %s CPUs; the cluster has %s", name, spec.actors, need, have)


def _kill(ray: Any, places: list[_Place]) -> None:
    """End every actor (idempotent); nothing to do once Ray itself is shut down."""
    for place in places:
        actor, place.actor = place.actor, None
        place.dead = place.dead or "closed"
        if actor is not None and ray.is_initialized():
            ray.kill(actor, no_restart=True)
