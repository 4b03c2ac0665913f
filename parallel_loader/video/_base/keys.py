"""What names a video's bytes: a file's or a URL's identity (``SourceKey``), and which paths are URLs.

A file's index is valid for one version of its bytes. Whatever keeps an index
keys it by ``SourceKey``: a name, a size and a version. For a local
file these are its absolute path, its size and its modification time. A URL's
key is its URL (without a signature: ``url_name``), size and ETag or Last-Modified.
``Fetched`` holds a video's bytes in memory, named by its key. They are a remote file fetched whole, or a video
given in memory (keyed by its content, see ``_bytes.memory``). Nothing here opens a network connection or decodes.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .errors import require_file

__all__ = [
    "SCHEMES",
    "Fetched",
    "SourceKey",
    "UrlPath",
    "is_url",
    "local_key",
    "shown_url",
    "stream_slot",
    "url_name",
    "url_scheme",
]

# A URL's scheme -> the fsspec protocol that reads it.
SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "abfs",
    "abfs": "abfs",
    "abfss": "abfs",
    "http": "http",
    "https": "http",
    "file": "file",
}


# Query parameters that sign a URL (S3, GCS and CloudFront presigned URLs, Azure SAS tokens), lower-cased.
_SIGNING = frozenset(
    {"signature", "expires", "awsaccesskeyid", "key-pair-id", "policy", "sig", "se", "st", "sp", "sv", "sr"}
    | {"spr", "sip", "ss", "srt", "skoid", "sktid", "skt", "ske", "sks", "skv", "x-amz-security-token"}
)


def url_name(url: str) -> str:
    """A URL as an index keys it: an HTTP URL without the query parameters that sign it.

    So a presigned URL signed again, with a new expiry, names the same object.
    Other query parameters stay: they may choose the object.
    """
    member, shard = _member_and_shard(url)
    if shard:
        return member + url_name(shard)
    if url_scheme(url) not in ("http", "https"):
        return url
    parts = urlsplit(url)
    kept = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k.lower() not in _SIGNING and not k.lower().startswith(("x-amz-", "x-goog-"))
    ]
    return urlunsplit(parts._replace(query=urlencode(kept), fragment=""))


def shown_url(url: str | os.PathLike[str]) -> str:
    """A URL as errors and logs name it: without its query string, which may hold a signature."""
    url = os.fspath(url)
    member, shard = _member_and_shard(url)
    if shard:
        return member + shown_url(shard)
    return url.partition("?")[0] if url_scheme(url) in ("http", "https") else url


def _member_and_shard(url: str) -> tuple[str, str]:
    """``("tar://MEMBER::", SHARD)`` of a member of a shard at a URL; ``("", "")`` for anything else."""
    if not url.startswith("tar://"):
        return "", ""
    member, sep, shard = url.partition("::")
    return (member + sep, shard) if sep and url_scheme(shard) else ("", "")


class UrlPath(os.PathLike):
    """The base of path-like objects that name a URL (``RemotePath``): ``os.fspath`` gives the URL."""

    __slots__ = ()


def url_scheme(path: object) -> str | None:
    """The scheme of a URL this package reads (``"s3"``, ``"https"``...), lower-cased, or None for anything else."""
    if isinstance(path, UrlPath):
        path = os.fspath(path)
    if not isinstance(path, str):
        return None
    if path.startswith("tar://"):  # a member of a shard (tar://MEMBER::SHARD): a URL where its shard is one
        path = path.partition("::")[2]
    scheme, sep, _ = path.partition("://")
    scheme = scheme.lower()
    return scheme if sep and scheme in SCHEMES else None


def is_url(path: object) -> bool:
    """Whether ``path`` is a URL (``s3://``, ``gs://``, ``az://``, ``abfs://``, ``http(s)://``, ``file://``).

    A member of a shard at such a URL (``tar://MEMBER::s3://bucket/shard.tar``) is one too.
    """
    return url_scheme(path) is not None


class SourceKey(NamedTuple):
    """Which bytes an index describes: ``name`` at ``size`` bytes, in version ``version``, and which stream.

    For a local file, ``version`` is ``"m<hex>"``: its modification time in
    nanoseconds. Other sources use another first letter: ``"e"`` and an ETag,
    ``"h"`` and a content hash (a video in memory), ``"t"`` and a shard's time and
    a member's offset. So versions from two schemes never compare equal. ``stream`` is the
    stream's number, or None for the one FFmpeg picks as best.
    """

    name: str
    size: int
    version: str
    stream: int | None = None

    @property
    def slot(self) -> str:
        """The name the index is kept under, with the stream's number when one is named."""
        return stream_slot(self.name, self.stream)

    def of_stream(self, stream: int | None) -> SourceKey:
        """This key for stream ``stream``."""
        return self if stream == self.stream else self._replace(stream=stream)


def stream_slot(name: str, stream: int | None) -> str:
    """What the index of ``name``'s stream ``stream`` is kept under (a NUL, in no path or URL, marks the stream)."""
    return name if stream is None else f"{name}\x00stream {stream}"


def local_key(path: str | os.PathLike[str]) -> SourceKey:
    """The key of the local file at ``path`` now (one ``stat``).

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: ``path`` is not a file.
    """
    name = os.path.abspath(path)
    try:
        info = os.stat(name)
    except FileNotFoundError:
        raise FileNotFoundError(2, "no such video file", os.fspath(path)) from None
    if not stat.S_ISREG(info.st_mode):
        require_file(path)
    return SourceKey(name, info.st_size, f"m{info.st_mtime_ns:x}")


class Fetched(os.PathLike):
    """A video's bytes, held whole: opened from memory, named (in errors, in the index) by its key's name.

    A remote object fetched whole is named by its URL; a video given in memory by its content's hash.

    Attributes:
        key: the object's name, size and version.
        data: all its bytes.
    """

    def __init__(self, key: SourceKey, data: bytes) -> None:
        if len(data) != key.size:
            raise ValueError(f"{key.name}: {len(data)} bytes fetched, but the object has {key.size}")
        self.key, self.data = key, data

    def __fspath__(self) -> str:
        return self.key.name

    def __repr__(self) -> str:
        return f"Fetched({self.key.name!r}, {self.key.size} bytes)"
