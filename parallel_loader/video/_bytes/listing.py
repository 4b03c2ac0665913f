"""A data set's folder in a store, listed like a local one: ``RemotePath``, the part of ``pathlib.Path`` readers use."""

from __future__ import annotations

import os

from .._base.keys import UrlPath, is_url
from .objects import remote_object

__all__ = ["RemotePath"]


class RemotePath(UrlPath):
    """A folder or object in a store, with the part of ``pathlib.Path`` that listing a data set uses.

    ``exists``, ``is_dir`` and ``is_file`` ask the store once (then remember);
    ``iterdir`` lists a folder (a prefix) in one listing, whose entries know their kind.
    ``str()`` and ``os.fspath()`` give the URL.
    """

    def __init__(self, url: str, kind: str | None = None) -> None:
        if not is_url(url):
            raise ValueError(f"not a URL this loader reads: {url!r}")
        self.url = url.rstrip("/") if not url.endswith("://") else url
        self._kind = kind  # "directory", "file", "" (nothing there), or None (not asked yet)

    def __fspath__(self) -> str:
        return self.url

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RemotePath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __lt__(self, other: RemotePath) -> bool:
        return self.url < other.url

    def __truediv__(self, name: str | os.PathLike[str]) -> RemotePath:
        return RemotePath(f"{self.url}/{os.fspath(name).lstrip('/')}")

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    @property
    def suffix(self) -> str:
        name = self.name
        dot = name.rfind(".")
        return name[dot:] if 0 < dot < len(name) - 1 else ""

    def exists(self) -> bool:
        return self._kind_now() != ""

    def is_dir(self) -> bool:
        return self._kind_now() == "directory"

    def is_file(self) -> bool:
        return self._kind_now() == "file"

    def iterdir(self) -> list[RemotePath]:
        """The folder's entries (one listing request)."""
        remote = remote_object(self.url)
        entries = remote._retry(lambda timeout: remote.fs.ls(remote._path, detail=True))
        scheme = self.url.partition("://")[0]
        found = []
        for entry in entries:
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            url = entry["name"] if remote.protocol == "http" else f"{self.url}/{name}"
            kind = "directory" if entry.get("type") == "directory" else "file"
            if url.partition("://")[0] != scheme:
                url = f"{scheme}://{url.partition('://')[2]}"
            found.append(RemotePath(url, kind))
        return found

    def files(self) -> list[RemotePath]:
        """Every object under this folder, at any depth (one recursive listing)."""
        remote = remote_object(self.url)
        names = remote._retry(lambda timeout: remote.fs.find(remote._path))
        base = remote._path.rstrip("/")
        return [RemotePath(f"{self.url}{name[len(base) :]}", "file") for name in names if name.startswith(base)]

    def _kind_now(self) -> str:
        if self._kind is None:
            remote = remote_object(self.url)
            try:
                info = remote._retry(lambda timeout: remote.fs.info(remote._path))
                self._kind = "directory" if info.get("type") == "directory" else "file"
            except FileNotFoundError:
                self._kind = ""
        return self._kind
