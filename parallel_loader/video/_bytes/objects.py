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
import contextlib
import logging
import random
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .._base.errors import VideoDecodeError
from .._base.keys import SCHEMES, SourceKey, is_url, shown_url, url_name

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


class _RangeRefused(VideoDecodeError):
    """HTTP 400 or 416 for a range: a server that refuses suffix ranges, or ranges past a small object's end."""


# An S3 error code with one of these words denies access, whatever the status (an expired URL: 400 or 403).
_DENIED = ("AccessDenied", "Expired", "Signature", "Credential", "Token", "TimeTooSkewed")
_suffix_refused: set[tuple[int, str]] = set()  # (filesystem id, host) of servers that refuse suffix ranges


class RemoteObject:
    """One object behind a URL: ranged reads with retries (see the module docstring). Thread-safe.

    Attributes:
        url: the object's URL, as given.
        name: its URL without a signature (``url_name``): what its index is kept by.
        shown: its URL without a query string: what errors and logs name.
        requests: how many requests this object has made (tries included).
    """

    def __init__(self, url: str, protocol: str, fs: Any, network: Network) -> None:
        self.url, self.protocol, self.fs, self.network = url, protocol, fs, network
        self.name, self.shown = url_name(url), shown_url(url)
        self.requests = 0
        self._count_lock = threading.Lock()
        if protocol == "s3":
            self._bucket, _, self._key = fs._strip_protocol(url).partition("/")
        self._path = url if protocol == "http" else fs._strip_protocol(url)
        self._server = (id(fs), urlsplit(url).netloc if protocol == "http" else "")

    def first_read(self, n: int) -> tuple[SourceKey, int, bytes]:
        """``(key, start, bytes)``: the object's last ``n`` bytes (all of it if smaller), from offset ``start``.

        On S3 and HTTP this is one suffix range read. A server that refuses those
        (400 or 416) is then read with explicit ranges. This call then returns
        the first ``n`` bytes (``start`` 0), and costs one more request once per server.
        """
        if self.protocol not in ("s3", "http"):
            key = self.key()
            start = max(0, key.size - n)
            return key, start, self.read(key, start, key.size)
        if self._server not in _suffix_refused:
            try:
                return self._request(f"bytes=-{n}", None)
            except _RangeRefused as exc:
                log.info("%s; reading this server with explicit ranges", exc)
                with _settings_lock:
                    _suffix_refused.add(self._server)
        try:
            return self._request(f"bytes=0-{n - 1}", None)
        except _RangeRefused:  # a server that refuses a range past a small object's end: ask its size
            key = self._retry(lambda t: self._async(self._head(t), t))
            return key, 0, self.read(key, 0, min(n, key.size))

    def key(self) -> SourceKey:
        """The object's name, size and version now (one request)."""
        if self.protocol in ("s3", "http"):
            return self.first_read(1)[0]

        def stat(timeout: float) -> SourceKey:
            info = self.fs.info(self._path)
            version = info.get("generation") or info.get("etag") or info.get("ETag") or info.get("mtime") or ""
            return SourceKey(self.name, int(info["size"]), f"e{version}")

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
        if self.protocol in ("s3", "http"):
            return self._request(f"bytes={start}-{end - 1}", key)[2]
        return self._retry(lambda t: self.fs.cat_file(self._path, start=start, end=end))

    # --- one request, per protocol ---------------------------------------------------------

    def _request(self, byte_range: str, key: SourceKey | None) -> tuple[SourceKey, int, bytes]:
        get = self._s3_get if self.protocol == "s3" else self._http_get
        return self._retry(lambda t: self._async(get(byte_range, key, t), t))

    def _async(self, coroutine: Any, timeout: float) -> Any:
        from fsspec.asyn import sync

        async def bounded() -> Any:
            return await asyncio.wait_for(coroutine, timeout)

        try:
            return sync(self.fs.loop, bounded, timeout=timeout + 5)
        except TimeoutError as exc:
            raise _Transient(f"no answer in {timeout:g} s") from exc

    async def _s3_get(self, byte_range: str, key: SourceKey | None, timeout: float) -> tuple[SourceKey, int, bytes]:
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Key": self._key, "Range": byte_range}
        if key is not None and key.version.startswith("e") and key.version[1:]:
            kwargs["IfMatch"] = key.version[1:]

        async def call(client: Any) -> tuple[dict, bytes]:
            answer = await client.get_object(**kwargs)
            body = answer["Body"]
            try:
                return answer, await body.read()
            finally:
                body.close()

        answer, data = await self._s3_call(call)
        version = _version(answer.get("ETag", ""), str(answer.get("LastModified") or ""))
        return self._answer(key, version, answer.get("ContentRange"), len(data), data)

    async def _s3_call(self, call: Callable[[Any], Any]) -> Any:
        """``call(client)``, its S3 errors turned into ours."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = await self.fs.set_session()
        try:
            return await call(client)
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            self._status(status, exc.response.get("Error", {}).get("Code", ""))
            raise  # not reached
        except BotoCoreError as exc:  # connection closed or reset, timeouts
            raise _Transient(f"{type(exc).__name__}: {exc}") from exc

    async def _http_get(self, byte_range: str, key: SourceKey | None, timeout: float) -> tuple[SourceKey, int, bytes]:
        session = await self.fs.set_session()
        headers = {"Range": byte_range}
        if key is not None and key.version.startswith("e") and key.version[1:]:
            headers["If-Match"] = key.version[1:]
        async with self._http_errors(), session.get(self.url, headers=headers) as answer:
            if answer.status not in (200, 206):
                code = re.search(r"<Code>([^<]+)</Code>", (await answer.content.read(4096)).decode("utf-8", "replace"))
                self._status(answer.status, f"{answer.reason or ''} {code[1] if code else ''}".strip())
            data = await answer.read()
            version = _version(answer.headers.get("ETag", ""), answer.headers.get("Last-Modified", ""))
            content_range = answer.headers.get("Content-Range")
        if content_range is None and key is not None:  # a server that ignores Range sends the whole object
            first, _, last = byte_range[6:].partition("-")
            start, end = int(first), min(len(data), int(last) + 1)
            content_range, data = f"bytes {start}-{end - 1}/{len(data)}", data[start:end]
        return self._answer(key, version, content_range, len(data), data)

    async def _head(self, timeout: float) -> SourceKey:
        """The object's key from a HEAD request (for a server that refuses every range of a small object)."""
        if self.protocol == "s3":
            answer = await self._s3_call(lambda client: client.head_object(Bucket=self._bucket, Key=self._key))
            version = _version(answer.get("ETag", ""), str(answer.get("LastModified") or ""))
            return SourceKey(self.name, int(answer["ContentLength"]), version)
        session = await self.fs.set_session()
        async with self._http_errors(), session.head(self.url, allow_redirects=True) as answer:
            if answer.status != 200:
                self._status(answer.status, answer.reason or "")
            version = _version(answer.headers.get("ETag", ""), answer.headers.get("Last-Modified", ""))
            return SourceKey(self.name, int(answer.headers["Content-Length"]), version)

    @contextlib.asynccontextmanager
    async def _http_errors(self) -> AsyncIterator[None]:
        """aiohttp's errors as transient failures, their messages without the URL's query string."""
        import aiohttp

        try:
            yield
        except aiohttp.ClientError as exc:
            raise _Transient(re.sub(r"\?[^\s'\")]*", "", f"{type(exc).__name__}: {exc}")) from None

    def _answer(
        self, key: SourceKey | None, version: str, content_range: str | None, length: int, data: bytes
    ) -> tuple[SourceKey, int, bytes]:
        """The key, start and bytes of one answer; its version checked against ``key``."""
        if content_range:  # "bytes a-b/total"
            span, _, total = content_range.partition(" ")[2].partition("/")
            start, size = int(span.partition("-")[0]), int(total)
        else:  # the whole object
            start, size = 0, length
        found = SourceKey(self.name, size, version)
        if key is not None and version[1:] and found.version != key.version:
            raise ObjectChanged(
                self.shown, f"changed since it was indexed (version {version[1:]}, was {key.version[1:]})"
            )
        if key is not None and content_range and found.size != key.size:  # a server without versions
            raise ObjectChanged(self.shown, f"changed since it was indexed ({found.size} bytes, was {key.size})")
        return found, start, data

    def _status(self, status: int, reason: str) -> None:
        """Raise for an answer of ``status``: a transient failure to retry, or one that ends the read."""
        if status >= 500 or status == 429 or status == 0:
            raise _Transient(f"HTTP {status} {reason}")
        if status == 404:
            raise FileNotFoundError(2, "no such video object", self.shown)
        if status == 412:
            raise ObjectChanged(self.shown, "changed since it was indexed (HTTP 412: its ETag differs)")
        if status in (401, 403) or any(word in reason for word in _DENIED):  # rclone: 400 AccessDenied
            why = "its signature may have expired" if "?" in self.url else "check the store's credentials"
            raise VideoDecodeError(self.shown, f"access denied (HTTP {status} {reason}): {why}")
        if status in (400, 416):
            raise _RangeRefused(self.shown, f"cannot be read (HTTP {status} {reason})")
        raise VideoDecodeError(self.shown, f"cannot be read (HTTP {status} {reason})")

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
                    self.shown,
                    f"cannot be read: {tries} tries in {network.budget_s:g} s failed, the last with {failure}",
                ) from failure
            log.debug("%s: %s; trying again in %.2f s", self.shown, failure, wait)
            time.sleep(wait)
            backoff = min(backoff * 2, network.max_backoff_s)


def _version(etag: str, modified: str) -> str:
    """An object's version: ``"e"`` and its ETag, else ``"l"`` and its Last-Modified, else ``"e"`` alone."""
    return f"e{etag}" if etag or not modified else f"l{modified}"


def close() -> None:
    """Close the connections of every remote filesystem opened so far (a later read opens new ones)."""
    from fsspec.asyn import sync

    with _settings_lock:
        opened = list(_filesystems.values())
        _filesystems.clear()
        _suffix_refused.clear()
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
