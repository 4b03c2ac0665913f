"""Sample lists of WebDataset tar shards: ``webdataset_samples``, and a sample's other members, ``webdataset_fields``.

A WebDataset shard is a tar file whose members are grouped into samples by
*key*. A member's key is its name up to the first dot of its file name; the rest is its
*extension*: ``000123.mp4``, ``000123.txt`` and ``000123.json`` are sample
``000123``'s video, caption and metadata. Each sample of the list is the
member whose extension is ``video``, named ``tar://MEMBER::SHARD`` and read in
place (``_bytes.tar_members``). Labels come from another member of the
sample. The list's ``fields`` name the members that come with each clip in a
batch; ``sample_members`` reads them, as ``webdataset_fields`` does. Shards at
URLs are read in place too (``_bytes.remote_shards``): their member tables are
kept in the index store. So are their small fields (``_indexes.member_bytes``),
read with the member table where it is made from the headers. See :doc:`/video/in_memory`.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
from collections.abc import Sequence

from .._base.keys import is_url
from .._bytes.objects import ObjectChanged, remote_object
from .._bytes.remote_shards import member_key, remote_member_table, shard_changed
from .._bytes.tar_members import MemberTable, SmallMembers, member_table, member_url, split_member_url
from .._indexes.cache import IndexCache, default_index_cache
from .._indexes.member_bytes import KEPT_MEMBER_BYTES, keep_members, read_kept
from .parsing import AnnotationError
from .sample_list import SampleList, VideoSample

__all__ = [
    "batch_value",
    "check_fields",
    "expand_braces",
    "key_and_extension",
    "sample_members",
    "shard_paths",
    "webdataset_fields",
    "webdataset_samples",
]

log = logging.getLogger(__name__)

# Extensions decoded as WebDataset's default decoders do; any other arrives as bytes.
_TEXT = ("txt", "text", "transcript", "caption")
_INT = ("cls", "cls2", "class", "count", "index", "inx", "id")
_JSON = ("json", "jsn")
_BRACES = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"(\d+)\.\.(\d+)")
_NEAR = 64 << 10  # members of a remote shard this close are fetched in one read, the bytes between them included


def webdataset_samples(
    urls: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    video: str | Sequence[str] = "mp4",
    label: str | None = None,
    *,
    fields: Sequence[str] = (),
    classes: Sequence[str] | None = None,
) -> SampleList:
    """Return one sample per member of the shards whose extension is ``video``, read in place.

    A sample's path is ``tar://MEMBER::SHARD``: ``read_clip`` and
    ``VideoDataset`` read its clips from the shard, without unpacking it. Each
    shard's member table comes from a DALI or ``wids`` index beside it, else from
    its tar headers, read once. A remote shard's is kept in the index store.
    Where it is made from the headers, the same reads give the labels and small
    ``fields`` members (kept too). A sample without its video, or without one of
    ``fields``, is left out and counted in a warning. ``VideoDataset`` batches
    carry the ``fields`` members of each clip's sample, last. See :doc:`/video/in_memory`.

    Args:
        urls: shards: a pattern with braces (``"train-{00000..00099}.tar"``),
            a glob (``"train-*.tar"``), a path, or a list of these. Shards at
            URLs (``"s3://bucket/train-{00000..00099}.tar"``) take braces or a list.
        video: the extension of the video member (``"mp4"``, ``"avi"``...), or several
            (``["mp4", "avi"]``) for shards that mix them: a sample's first found is its video.
        label: where the label is: an extension whose member holds a class number
            or name (``"cls"``), or ``"EXTENSION:FIELD"``, a field of a JSON
            member (``"json:label"``). ``None`` gives every sample label 0.
        fields: lists the members returned with each sample: captions (``"txt"``),
            JSON, or other bytes. A ``VideoDataset`` over the list carries them in each batch.
        classes: class names in label order. Without them, number labels name
            their classes ``"0"``, ``"1"``, ...; name labels are sorted.

    Returns:
        The samples, in shard order, then member order; their ``fields`` are ``fields``.

    Raises:
        TypeError: an argument has the wrong type.
        FileNotFoundError: a shard named without a pattern is not there.
        ValueError: no shard matches ``urls``, a URL holds a glob, or no sample has a member of ``video``.
        AnnotationError: a label member is missing, malformed, or names an unknown class.
        VideoDecodeError: a shard is not an uncompressed tar file.
    """
    videos = (video,) if isinstance(video, str) else tuple(video) if isinstance(video, (list, tuple)) else ()
    if not videos or not all(isinstance(v, str) and v for v in videos):
        raise TypeError(f"video must be an extension such as 'mp4', or a list of them, got {video!r}")
    if label is not None and (not isinstance(label, str) or not label):
        raise TypeError(f"label must be an extension such as 'cls', got {label!r}")
    fields = check_fields(fields)
    if isinstance(classes, str):
        raise TypeError(f"classes must be a list of names, got the single string {classes!r}: pass [{classes!r}]")
    label_ext, _, label_field = (label or "").partition(":")
    found: list[tuple[str, int | str, str]] = []  # (path, label as found, origin)
    counts = [0, 0]  # samples without their video, samples lacking a field
    for shard in shard_paths(urls):
        for tries in (1, 2):  # a second time where the kept member table was of an older version of the shard
            table, held = _listing_table(shard, fields, label_ext)
            shard_counts = [0, 0]
            try:
                found += _listed(shard, table, videos, label_ext, label_field, fields, shard_counts, held)
                break
            except ObjectChanged:
                if tries == 2:
                    raise
                log.info("the member table of %s was of an older version: making it again", shard)
                shard_changed(table.key.name, table.key.version)
        counts = [a + b for a, b in zip(counts, shard_counts, strict=True)]
    without_video, lacking = counts
    if without_video:
        log.warning("%d samples of %s have no member of %s and are left out", without_video, urls, list(videos))
    if lacking:
        log.warning("%d samples of %s lack a member of %s and are left out", lacking, urls, list(fields))
    if not found:
        raise ValueError(f"no sample of {urls} has a member with an extension of {list(videos)}")
    names, numbers = _classes(found, classes, label is not None)
    samples = SampleList(names, [VideoSample(p, n, origin=o) for (p, _, o), n in zip(found, numbers, strict=True)])
    samples.fields = fields
    return samples


def webdataset_fields(path: str, fields: Sequence[str]) -> dict[str, object]:
    """The members of a sample's shard beside its video, read in place and decoded.

    ``txt`` (and ``text``, ``transcript``, ``caption``) give a ``str``; ``json``
    gives what it holds; ``cls`` (and ``index``, ``id``, ...) an ``int``; any
    other extension gives ``bytes``. See :doc:`/video/in_memory`.

    Args:
        path: a sample's path from ``webdataset_samples`` (``tar://MEMBER::SHARD``).
        fields: the extensions to read.

    Returns:
        Each extension's member, decoded.

    Raises:
        TypeError: ``fields`` is not a list of extensions.
        ValueError: ``path`` is not a tar member's URL.
        FileNotFoundError: the sample has no member of an extension asked for.
    """
    return {ext: _decoded(ext, data, path) for ext, data in sample_members(path, check_fields(fields)).items()}


def check_fields(fields: object) -> tuple[str, ...]:
    """``fields`` as a tuple of extensions.

    Raises:
        TypeError: ``fields`` is not a list of non-empty strings.
    """
    listed = isinstance(fields, Sequence) and not isinstance(fields, str | bytes)
    if not listed or not all(isinstance(f, str) and f for f in fields):
        raise TypeError(f"fields must be a list of extensions, such as ['txt', 'json'], got {fields!r}")
    return tuple(fields)


def sample_members(
    path: str, fields: Sequence[str], cache: IndexCache | None = None, *, kept: bool = False
) -> dict[str, bytes]:
    """The bytes of the members ``fields`` of a sample's shard (see ``webdataset_fields``), neighbours in one read.

    ``cache`` keeps a remote shard's member table (default: ``default_index_cache()``).
    With ``kept``, a remote shard's small members come from its index store, and
    are kept there after a read (``_indexes.member_bytes``). Only a caller that
    has just read the shard, which checked its version, passes it.

    Raises:
        ValueError: ``path`` is not a tar member's URL.
        FileNotFoundError: the sample has no member of an extension asked for.
    """
    split = split_member_url(path)
    if split is None:
        raise ValueError(f"{path}: not a member of a shard (tar://MEMBER::SHARD, from webdataset_samples)")
    name, shard = split
    key = key_and_extension(name)[0]
    names = [f"{key}.{ext}" for ext in fields]
    table = _table(shard, cache)
    if kept and is_url(shard):
        store = (cache or default_index_cache()).shard_tables
        data = read_kept(store, table, names, lambda missing: _read_members(shard, table, missing))
    else:
        data = _read_members(shard, table, names)
    return {ext: data[n] for ext, n in zip(fields, names, strict=True)}


def batch_value(ext: str, data: bytes) -> str | int | bytes:
    """A member's bytes as a batch carries them: as ``webdataset_fields`` decodes them, but JSON as its text.

    Raises:
        ValueError: a text or JSON member is not UTF-8, or a number member holds no number.
    """
    return _decoded(ext, data, "", parse_json=False)  # type: ignore[return-value]


def shard_paths(urls: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The shards ``urls`` names (see ``webdataset_samples``), in order, each once: absolute paths, or URLs.

    Raises:
        TypeError: ``urls`` is not a path, pattern or list.
        FileNotFoundError: a local shard named without a pattern is not there.
        ValueError: no shard matches, or a URL holds a glob.
    """
    patterns = [urls] if isinstance(urls, str | os.PathLike) else urls
    if not isinstance(patterns, Sequence) or not all(isinstance(p, str | os.PathLike) for p in patterns):
        raise TypeError(f"urls must be a path, a pattern or a list of them, got {urls!r}")
    shards: dict[str, None] = {}
    for pattern in patterns:
        pattern = os.fspath(pattern)
        if is_url(pattern):  # no glob and no check: listing a store costs requests, and a read finds a missing shard
            if glob.has_magic(pattern.partition("?")[0].replace("{", "").replace("}", "")):
                raise ValueError(f"{pattern}: shards at URLs are named by braces or a list, not a glob")
            shards.update(dict.fromkeys(expand_braces(pattern)))
            continue
        for each in expand_braces(pattern):
            matched = sorted(glob.glob(each)) if glob.has_magic(each) else [each]
            for path in matched:
                if not os.path.isfile(path):
                    raise FileNotFoundError(2, "no such shard", path)
                shards[os.path.abspath(path)] = None
    if not shards:
        raise ValueError(f"no shard matches {urls!r}")
    return list(shards)


def expand_braces(pattern: str) -> list[str]:
    """``pattern`` with each ``{a..b}`` range (zero padding kept) and ``{x,y}`` list expanded, in order."""
    found = _BRACES.search(pattern)
    if found is None:
        return [pattern]
    head, tail = pattern[: found.start()], pattern[found.end() :]
    numbers = _RANGE.fullmatch(found[1])
    if numbers is not None:
        first, last = numbers[1], numbers[2]
        width = len(first) if first.startswith("0") else 0
        step = 1 if int(last) >= int(first) else -1
        choices = [f"{i:0{width}d}" for i in range(int(first), int(last) + step, step)]
    else:
        choices = found[1].split(",")
    return [expanded for choice in choices for expanded in expand_braces(head + choice + tail)]


def key_and_extension(name: str) -> tuple[str, str]:
    """A member's sample key and extension: split at the first dot of its file name (WebDataset's rule)."""
    dot = name.find(".", name.rfind("/") + 1)
    return (name, "") if dot < 0 else (name[:dot], name[dot + 1 :])


def _table(shard: str, cache: IndexCache | None = None, small: SmallMembers | None = None) -> MemberTable:
    """The member table of a local shard (``tar_members``) or of one at a URL (``remote_shards``, kept in ``cache``)."""
    if is_url(shard):
        return remote_member_table(remote_object(shard), (cache or default_index_cache()).shard_tables, small)
    return member_table(shard)


def _listing_table(shard: str, fields: Sequence[str], label_ext: str) -> tuple[MemberTable, dict[str, bytes]]:
    """A shard's member table, and the small fields and labels its reads held where it was made now.

    The fields found are kept in the default cache's store: the first epoch reads them no more.
    """
    if not is_url(shard) or not (fields or label_ext):
        return _table(shard), {}
    wanted = {*fields, label_ext} - {""}
    small = SmallMembers(lambda name, size: size <= KEPT_MEMBER_BYTES and key_and_extension(name)[1] in wanted)
    table = _table(shard, None, small)
    store = default_index_cache().shard_tables
    if small.found and store is not None:
        kept = [n for n in small.found if key_and_extension(n)[1] in fields]
        keep_members(store, [(member_key(table, n), small.found[n]) for n in kept])
    return table, small.found


def _read_members(shard: str, table: MemberTable, names: Sequence[str]) -> dict[str, bytes]:
    """The bytes of members ``names`` of a shard: neighbours in one read (``_NEAR`` bytes apart at most).

    Raises:
        FileNotFoundError: the shard has no member of one of those names.
    """
    spans = sorted((*table.find(n), n) for n in names)
    if not is_url(shard):
        with open(table.key.name, "rb") as file:
            return {n: os.pread(file.fileno(), size, offset) for offset, size, n in spans}
    remote = remote_object(shard)
    found: dict[str, bytes] = {}
    while spans:
        group = [spans.pop(0)]
        while spans and spans[0][0] - (group[-1][0] + group[-1][1]) <= _NEAR:
            group.append(spans.pop(0))
        start = group[0][0]
        data = remote.read(table.key, start, group[-1][0] + group[-1][1])
        found.update({n: data[offset - start : offset - start + size] for offset, size, n in group})
    return found


def _samples_of(table: MemberTable) -> dict[str, dict[str, str]]:
    """The shard's samples: key -> {extension: member name}, in member order."""
    samples: dict[str, dict[str, str]] = {}
    for name in table.members:
        key, extension = key_and_extension(name)
        if extension and not os.path.basename(key).startswith("."):  # no extension, or a hidden file: no sample
            samples.setdefault(key, {})[extension] = name
    return samples


def _listed(
    url: str,
    table: MemberTable,
    videos: Sequence[str],
    label_ext: str,
    label_field: str,
    fields: Sequence[str],
    counts: list[int],
    held: dict[str, bytes],
) -> list[tuple[str, int | str, str]]:
    """One shard's samples as ``(path, label as found, origin)``; ``counts`` adds those left out (see the caller).

    A label member in ``held`` is not read again.
    """
    shard = url.rpartition("/")[2]
    listed = []
    for key, members in _samples_of(table).items():
        name = next((members[v] for v in videos if v in members), None)
        if name is None:
            counts[0] += 1
            continue
        if any(f not in members for f in fields):
            counts[1] += 1
            continue
        if label_ext and label_ext not in members:
            raise AnnotationError(f"{shard}, sample {key}", f"has no {label_ext!r} member to take its label from")
        listed.append((key, members, name))
    shard_name = url if is_url(url) else table.key.name
    unread = [m[label_ext] for _, m, _ in listed if m[label_ext] not in held] if label_ext else []
    labels = {**held, **_read_members(url, table, unread)} if unread else held
    found = []
    for key, members, name in listed:
        raw: int | str = 0
        if label_ext:
            raw = _label_of(members[label_ext], labels[members[label_ext]], label_field, f"{shard}, sample {key}")
        found.append((member_url(shard_name, name), raw, f"{shard}, member {name}"))
    return found


def _label_of(name: str, data: bytes, field: str, origin: str) -> int | str:
    """A sample's label as found (a class number or a class name), from its member ``name``'s bytes."""
    text = data.decode("utf-8", "replace").strip()
    if field:
        try:
            value = json.loads(text)[field]
        except (ValueError, KeyError, TypeError, IndexError):
            raise AnnotationError(origin, f"its {name} holds no JSON object with a field {field!r}") from None
    else:
        value = text
    if isinstance(value, bool) or not isinstance(value, int | str) or value == "":
        raise AnnotationError(origin, f"its label in {name} is {value!r}, not a class number or name")
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        value = int(value)
    return value


def _classes(found: list[tuple[str, int | str, str]], classes: Sequence[str] | None, labelled: bool):
    """The class names and each sample's label number (see ``webdataset_samples``)."""
    raw = [r for _, r, _ in found]
    if not labelled:
        return (tuple(classes) if classes else ("",)), [0] * len(raw)
    kinds = {type(r) for r in raw}
    if len(kinds) > 1:
        number = next(o for _, r, o in found if isinstance(r, int))
        name = next(o for _, r, o in found if isinstance(r, str))
        raise AnnotationError(name, f"labels are class numbers ({number}) and class names ({name}) at once")
    if kinds == {int}:
        names = tuple(classes) if classes is not None else tuple(str(i) for i in range(max(raw) + 1))
        for _, r, origin in found:
            if not 0 <= r < len(names):
                raise AnnotationError(origin, f"class number {r} is not one of the {len(names)} classes")
        return names, raw
    names = tuple(classes) if classes is not None else tuple(sorted(set(raw)))
    number = {n: i for i, n in enumerate(names)}
    for _, r, origin in found:
        if r not in number:
            raise AnnotationError(origin, f"class {r!r} is not one of the classes given")
    return names, [number[r] for r in raw]


def _decoded(ext: str, data: bytes, where: str, parse_json: bool = True) -> object:
    """A member's bytes decoded by its extension's last part (see ``webdataset_fields``); JSON as text unless parsed."""
    last, prefix = ext.rsplit(".", 1)[-1].lower(), f"{where}: " if where else ""
    if last in _TEXT or (last in _JSON and not parse_json):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{prefix}its {ext} member is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if last in _JSON:
        return json.loads(data)
    if last in _INT:
        try:
            return int(data.decode("utf-8").strip())
        except ValueError:
            raise ValueError(f"{prefix}its {ext} member holds {data[:40]!r}, not a number") from None
    return data
