"""Bytes of a video object in a store or behind HTTP: its size and version, and ranged reads, over the network as it is.

A URL (``s3://``, ``gs://``, ``az://``/``abfs://``, ``http(s)://``, ``file://``)
names an object that fsspec reaches; each store's backend is an optional extra
(``parallel_loader[s3]``, ``[gcs]``, ``[azure]``, ``[http]``). Credentials and
the endpoint come from the store's standard environment (for S3:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL``) or from ``storage_options`` given to ``configure``.

The two reads:

* ``RemoteObject.tail(n)``: the last ``n`` bytes, with the object's size and
  version (ETag). On S3 and HTTP this is one suffix range read. So a file's
  first touch needs no request of its own to learn its size.
* ``RemoteObject.read(key, start, end)``: bytes ``[start, end)`` of exactly the
  version ``key`` names, in one request. S3 and HTTP send ``If-Match`` and
  compare the ETag of the answer. So the read itself finds an object changed
  since it was indexed, and raises ``ObjectChanged``.

Every request has a timeout. It is retried on 5xx, 429, connection resets and
timeouts, with exponential backoff and full jitter. The retries stop at a total
time budget (``Network``). Other answers, such as 403, 404 and 412, fail at
once, naming the URL. So no call holds a loader thread longer than the budget.
The S3 client's connection pool holds ``Network.pool`` connections (aiohttp's,
for HTTP, 100): make it at least the loader's thread count.

fsspec's asynchronous backends run their requests on one event-loop thread.
fsspec starts it once per process and never stops it. Nothing else here starts
a thread. Nothing here decodes. See :doc:`/video/remote`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._base.errors import VideoDecodeError
from .._base.keys import SCHEMES, SourceKey, is_url

__all__ = [
    "Network",
    "ObjectChanged",
    "RemoteObject",
    "close",
    "configure",
    "forget_settings",
    "remote_object",
]

log = logging.getLogger(__name__)

_EXTRA = {"s3": "s3", "gcs": "gcs", "abfs": "azure", "http": "http", "file": "http"}


@dataclass(frozen=True)
class Network:
    """How remote reads treat the network.

    Attributes:
        timeout_s: the most one request may take (connecting and reading).
        budget_s: the most one read may take, retries included; then it fails.
        first_backoff_s: the first retry's longest wait; each later one doubles it (full jitter).
        max_backoff_s: the longest wait between two tries.
        pool: connections the S3 client keeps (at least the loader's thread count).
    """

    timeout_s: float = 20.0
    budget_s: float = 120.0
    first_backoff_s: float = 0.05
    max_backoff_s: float = 5.0
    pool: int = 64

    def __post_init__(self) -> None:
        for name in ("timeout_s", "budget_s", "first_backoff_s", "max_backoff_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if isinstance(self.pool, bool) or not isinstance(self.pool, int) or self.pool < 1:
            raise ValueError(f"pool must be a positive int, got {self.pool!r}")


class ObjectChanged(VideoDecodeError):
    """The object is no longer the version its index was made from (HTTP 412, or another ETag in the answer)."""


class _Transient(Exception):
    """A failure worth another try (5xx, 429, a reset, a timeout)."""


@dataclass
class _Settings:
    storage_options: dict[str, Any] = field(default_factory=dict)
    network: Network = field(default_factory=Network)


_settings_lock = threading.Lock()
_settings: dict[str, _Settings] = {}  # URL prefix -> settings; the longest matching prefix wins
_filesystems: dict[tuple[str, str], Any] = {}  # (prefix, protocol) -> fsspec filesystem


def configure(prefix: str, storage_options: Mapping[str, Any] | None = None, network: Network | None = None) -> None:
    """Settings for the URLs that start with ``prefix`` (e.g. ``"s3://bucket/"`` or ``"s3://"``).

    Args:
        prefix: a URL or the start of one; the longest prefix that matches a URL counts.
        storage_options: passed to the fsspec filesystem (credentials, ``endpoint_url``,
            ``client_kwargs``...); without them each store's standard environment is used.
        network: timeouts, retry budget and pool size; default ``Network()``.

    Call it before reading starts; reads already under way keep the old settings.
    """
    if not isinstance(prefix, str) or "://" not in prefix:
        raise ValueError(f"prefix must be a URL or the start of one, such as 's3://bucket/', got {prefix!r}")
    if network is not None and not isinstance(network, Network):
        raise TypeError(f"network must be a Network, got {type(network).__name__}")
    with _settings_lock:
        _settings[prefix] = _Settings(dict(storage_options or {}), network or Network())
        for cached in [k for k in _filesystems if k[0].startswith(prefix) or prefix.startswith(k[0])]:
            del _filesystems[cached]


def _settings_for(url: str) -> tuple[str, _Settings]:
    with _settings_lock:
        matches = [p for p in _settings if url.startswith(p)]
        if not matches:
            return "", _Settings()
        best = max(matches, key=len)
        return best, _settings[best]


def remote_object(url: str) -> RemoteObject:
    """The object at ``url``, read with the settings ``configure`` gave its prefix (no request is made)."""
    if not is_url(url):
        raise ValueError(f"not a URL this loader reads: {url!r}")
    prefix, settings = _settings_for(url)
    protocol = SCHEMES[url.partition("://")[0].lower()]
    with _settings_lock:
        fs = _filesystems.get((prefix, protocol))
    if fs is None:
        fs = _filesystem(protocol, settings)
        with _settings_lock:
            fs = _filesystems.setdefault((prefix, protocol), fs)
    return RemoteObject(url, protocol, fs, settings.network)


def _filesystem(protocol: str, settings: _Settings) -> Any:
    try:
        import fsspec
    except ImportError:
        raise ImportError(
            f"reading {protocol} URLs needs fsspec: pip install 'parallel_loader[{_EXTRA[protocol]}]'"
        ) from None
    options = dict(settings.storage_options)
    network = settings.network
    if protocol == "s3":
        config = {
            "connect_timeout": network.timeout_s,
            "read_timeout": network.timeout_s,
            "retries": {"total_max_attempts": 1},  # retries are ours, within the budget
            "max_pool_connections": network.pool,
        }
        config.update(options.pop("config_kwargs", {}))
        options["config_kwargs"] = config
    if protocol in ("s3", "http"):
        options.setdefault("skip_instance_cache", True)  # ours alone: ``close`` closes only its connections
    try:
        return fsspec.filesystem(protocol, **options)
    except ImportError as exc:
        raise ImportError(
            f"reading {protocol} URLs needs its fsspec backend ({exc}): "
            f"pip install 'parallel_loader[{_EXTRA[protocol]}]'"
        ) from None


class RemoteObject:
    """One object behind a URL: ranged reads with retries (see the module docstring). Thread-safe.

    Attributes:
        url: the object's URL, as given.
        requests: how many requests this object has made (tries included).
    """

    def __init__(self, url: str, protocol: str, fs: Any, network: Network) -> None:
        self.url, self.protocol, self.fs, self.network = url, protocol, fs, network
        self.requests = 0
        self._count_lock = threading.Lock()
        if protocol == "s3":
            self._bucket, _, self._key = fs._strip_protocol(url).partition("/")
        self._path = url if protocol == "http" else fs._strip_protocol(url)

    def tail(self, n: int) -> tuple[SourceKey, int, bytes]:
        """``(key, start, bytes)``: the object's last ``n`` bytes (all of it if smaller), from offset ``start``."""
        if self.protocol == "s3":
            return self._retry(lambda t: self._async(self._s3_get(f"bytes=-{n}", None, t), t))
        if self.protocol == "http":
            return self._retry(lambda t: self._async(self._http_get(f"bytes=-{n}", None, t), t))
        key = self.key()
        start = max(0, key.size - n)
        return key, start, self.read(key, start, key.size)

    def key(self) -> SourceKey:
        """The object's name, size and version now (one request)."""
        if self.protocol in ("s3", "http"):
            return self.tail(1)[0]

        def stat(timeout: float) -> SourceKey:
            info = self.fs.info(self._path)
            version = info.get("generation") or info.get("etag") or info.get("ETag") or info.get("mtime") or ""
            return SourceKey(self.url, int(info["size"]), f"e{version}")

        return self._retry(stat)

    def read(self, key: SourceKey, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the version ``key`` names (one request).

        Raises:
            ObjectChanged: the object is another version now (S3 and HTTP; other stores
                are checked when their key is taken).
            FileNotFoundError: there is no object at the URL.
            VideoDecodeError: access is denied, or the read failed within the retry budget.
        """
        if start >= end:
            return b""
        if self.protocol == "s3":
            return self._retry(lambda t: self._async(self._s3_get(f"bytes={start}-{end - 1}", key, t), t))[2]
        if self.protocol == "http":
            return self._retry(lambda t: self._async(self._http_get(f"bytes={start}-{end - 1}", key, t), t))[2]
        return self._retry(lambda t: self.fs.cat_file(self._path, start=start, end=end))

    # --- one request, per protocol ---------------------------------------------------------

    def _async(self, coroutine: Any, timeout: float) -> Any:
        from fsspec.asyn import sync

        async def bounded() -> Any:
            return await asyncio.wait_for(coroutine, timeout)

        try:
            return sync(self.fs.loop, bounded, timeout=timeout + 5)
        except TimeoutError as exc:
            raise _Transient(f"no answer in {timeout:g} s") from exc

    async def _s3_get(self, byte_range: str, key: SourceKey | None, timeout: float) -> tuple[SourceKey, int, bytes]:
        from botocore.exceptions import BotoCoreError, ClientError

        client = await self.fs.set_session()
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Key": self._key, "Range": byte_range}
        if key is not None:
            kwargs["IfMatch"] = key.version[1:]
        try:
            answer = await client.get_object(**kwargs)
            body = answer["Body"]
            try:
                data = await body.read()
            finally:
                body.close()
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            self._status(status, exc.response.get("Error", {}).get("Code", ""))
            raise  # not reached
        except BotoCoreError as exc:  # connection closed or reset, timeouts
            raise _Transient(f"{type(exc).__name__}: {exc}") from exc
        return self._answer(key, answer.get("ETag", ""), answer.get("ContentRange"), len(data), data)

    async def _http_get(self, byte_range: str, key: SourceKey | None, timeout: float) -> tuple[SourceKey, int, bytes]:
        import aiohttp

        session = await self.fs.set_session()
        headers = {"Range": byte_range}
        if key is not None and key.version[1:]:
            headers["If-Match"] = key.version[1:]
        try:
            async with session.get(self.url, headers=headers) as answer:
                if answer.status not in (200, 206):
                    self._status(answer.status, answer.reason or "")
                data = await answer.read()
                etag = answer.headers.get("ETag", "")
                content_range = answer.headers.get("Content-Range") if answer.status == 206 else None
        except aiohttp.ClientError as exc:
            raise _Transient(f"{type(exc).__name__}: {exc}") from exc
        if content_range is None and byte_range.startswith("bytes=") and answer.status == 200:
            data = self._cut(byte_range, data)  # a server that ignores Range sends the whole object
            content_range = None
        return self._answer(key, etag, content_range, len(data), data)

    @staticmethod
    def _cut(byte_range: str, whole: bytes) -> bytes:
        first, _, last = byte_range[6:].partition("-")
        if not first:
            return whole
        return whole[int(first) : int(last) + 1]

    def _answer(
        self, key: SourceKey | None, etag: str, content_range: str | None, length: int, data: bytes
    ) -> tuple[SourceKey, int, bytes]:
        """The key, start and bytes of one answer; the ETag checked against ``key``."""
        if content_range:  # "bytes a-b/total"
            span, _, total = content_range.partition(" ")[2].partition("/")
            start, size = int(span.partition("-")[0]), int(total)
        else:  # the whole object
            start, size = 0, length
        found = SourceKey(self.url, size, f"e{etag}")
        if key is not None and etag and found.version != key.version:
            raise ObjectChanged(self.url, f"changed since it was indexed (ETag {etag}, was {key.version[1:]})")
        if key is not None and content_range and found.size != key.size:  # a server without ETags
            raise ObjectChanged(self.url, f"changed since it was indexed ({found.size} bytes, was {key.size})")
        return found, start, data

    def _status(self, status: int, reason: str) -> None:
        """Raise for an answer of ``status``: a transient failure to retry, or one that ends the read."""
        if status >= 500 or status == 429 or status == 0:
            raise _Transient(f"HTTP {status} {reason}")
        if status == 404:
            raise FileNotFoundError(2, "no such video object", self.url)
        if status == 412:
            raise ObjectChanged(self.url, "changed since it was indexed (HTTP 412: its ETag differs)")
        if status in (401, 403):
            raise VideoDecodeError(
                self.url, f"access denied (HTTP {status} {reason}): check the store's credentials and permissions"
            )
        raise VideoDecodeError(self.url, f"cannot be read (HTTP {status} {reason})")

    def _retry(self, attempt: Callable[[float], Any]) -> Any:
        """``attempt(timeout)`` until it succeeds, fails for good, or the budget is spent."""
        network = self.network
        deadline = time.monotonic() + network.budget_s
        backoff = network.first_backoff_s
        tries = 0
        while True:
            tries += 1
            with self._count_lock:
                self.requests += 1
            timeout = max(0.001, min(network.timeout_s, deadline - time.monotonic()))
            try:
                return attempt(timeout)
            except (VideoDecodeError, FileNotFoundError):
                raise
            except (_Transient, OSError) as exc:  # OSError: resets, timeouts
                failure = exc
            wait = random.uniform(0, backoff)
            if time.monotonic() + wait >= deadline:
                raise VideoDecodeError(
                    self.url, f"cannot be read: {tries} tries in {network.budget_s:g} s failed, the last with {failure}"
                ) from failure
            log.debug("%s: %s; trying again in %.2f s", self.url, failure, wait)
            time.sleep(wait)
            backoff = min(backoff * 2, network.max_backoff_s)


def close() -> None:
    """Close the connections of every remote filesystem opened so far (a later read opens new ones)."""
    from fsspec.asyn import sync

    with _settings_lock:
        opened = list(_filesystems.values())
        _filesystems.clear()
    for fs in opened:
        client = getattr(fs, "_s3", None) or getattr(fs, "_session", None)
        if client is None:
            continue
        try:
            if getattr(fs, "_s3", None) is not None:
                sync(fs.loop, client.__aexit__, None, None, None, timeout=10)
            else:
                sync(fs.loop, client.close, timeout=10)
        except Exception as exc:  # closing is best effort: the connections go with the process anyway
            log.debug("closing a %s connection pool: %s", type(fs).__name__, exc)


def forget_settings() -> None:
    """Close every connection (``close``) and forget every ``configure`` setting."""
    close()
    with _settings_lock:
        _settings.clear()
