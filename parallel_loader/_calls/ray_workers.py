"""``RayWorkers``: what a loader asks of a Ray cluster, and how it reaches that cluster.

``RayWorkers`` is a small options object, checked when it is made. It names the
actors, the calls each runs at once, and the cluster's address. It also says
what each actor reserves, and how often a dead actor is restarted.
``connect`` joins the cluster, failing fast on an address that does not answer.
Ray itself is imported only here and in ``ray_calls``, when a loader uses it.
See :doc:`/guide/ray_cluster`.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

from .._core.checks import check_int

__all__ = ["CONNECT_TIMEOUT", "RayWorkers", "connect"]

log = logging.getLogger(__name__)

# The most seconds an address may take to answer; Ray's own connect loop retries for minutes.
CONNECT_TIMEOUT = 30.0


class RayWorkers:
    """Make a loader's calls in Ray actors, across the machines of a Ray cluster.

    Pass it as ``workers=`` to ``DataLoader``, ``as_tf_dataset`` or ``Train``.
    The epoch plan, the order, the error budget and resume stay in the training process.

    Args:
        actors: how many actors make batches, at least 1.
        calls_per_actor: calls each actor runs at once, in threads of its own (at least 1).
        address: the cluster's address (``"host:port"``). ``None``: the cluster this process is
            connected to, else ``RAY_ADDRESS``, else a new local one.
        resources: what each actor reserves, as Ray names it (``{"CPU": 2, "GPU": 0}``);
            default one CPU.
        max_restarts: how often an actor that died is replaced; its call is retried once.

    Raises:
        TypeError, ValueError: an argument is of the wrong type or out of range.

    See :doc:`/guide/ray_cluster`.
    """

    def __init__(
        self,
        actors: int,
        *,
        calls_per_actor: int = 2,
        address: str | None = None,
        resources: Mapping[str, float] | None = None,
        max_restarts: int = 0,
    ) -> None:
        self.actors = check_int("actors", actors, minimum=1)
        self.calls_per_actor = check_int("calls_per_actor", calls_per_actor, minimum=1)
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise TypeError(f'address must be "host:port" or None, got {address!r}')
        self.address = address
        self.resources = _check_resources(resources)
        self.max_restarts = check_int("max_restarts", max_restarts, minimum=0)

    @property
    def width(self) -> int:
        """How many calls run at once over all actors, and so how many loader threads wait for them."""
        return self.actors * self.calls_per_actor

    def actor_options(self) -> dict[str, Any]:
        """The options of each actor's ``ray.remote``: what it reserves, in Ray's words."""
        rest = dict(self.resources)
        options: dict[str, Any] = {"num_cpus": rest.pop("CPU", 1), "num_gpus": rest.pop("GPU", 0)}
        if "memory" in rest:
            options["memory"] = rest.pop("memory")
        if rest:
            options["resources"] = rest
        return options

    def __repr__(self) -> str:
        return (
            f"RayWorkers(actors={self.actors}, calls_per_actor={self.calls_per_actor}, address={self.address!r}, "
            f"resources={self.resources!r}, max_restarts={self.max_restarts})"
        )


def connect(address: str | None) -> str:
    """Join the Ray cluster ``address`` names (see ``RayWorkers``); returns where this process is connected.

    Raises:
        ConnectionError: the address does not answer within ``CONNECT_TIMEOUT`` seconds.
    """
    import ray  # an optional dependency (the extra "ray")

    if ray.is_initialized():
        connected = str(ray.get_runtime_context().gcs_address)
        if address is not None and address.removeprefix("ray://") != connected:
            log.warning("connected to the Ray cluster at %s already: address=%r is not used", connected, address)
    else:
        target = address or os.environ.get("RAY_ADDRESS") or None
        if target is not None and target != "auto":
            _probe(target)
        ray.init(address=target, logging_level=logging.WARNING)
    return str(ray.get_runtime_context().gcs_address)


def _check_resources(resources: Mapping[str, float] | None) -> dict[str, float]:
    if resources is None:
        return {"CPU": 1}
    if not isinstance(resources, Mapping):
        raise TypeError(f'resources must be a dict such as {{"CPU": 1}}, got {type(resources).__name__}')
    checked = {}
    for key, value in resources.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"resources must map names to amounts of at least 0, got {key!r}: {value!r}")
        checked[key] = value
    return checked


def _probe(address: str) -> None:
    """Fail unless something answers at ``address`` within ``CONNECT_TIMEOUT`` seconds."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f'a Ray address is "host:port", got {address!r}')
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT):
            return
    except OSError as exc:
        raise ConnectionError(
            f"the Ray cluster at {address} does not answer ({exc}): start it with `ray start --head`, "
            "or check the address and the firewall"
        ) from exc
