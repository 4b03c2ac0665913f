"""Something-Something v2's annotations: videos ``<id>.webm``, labelled by their template in ``labels.json``.

``ssv2_samples`` reads ``train.json`` or ``validation.json``, a JSON list of
``{"id", "label", "template", "placeholders"}``, and ``labels.json``, which maps
each template to its class number. An entry's template reads ``Putting
[something] on [something]``; ``labels.json`` names it ``Putting something on
something``. So templates are matched with their brackets removed. No video is
opened. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .._base.keys import is_url
from .annotations import VIDEO_EXTENSIONS
from .exclude import Exclude, excluding
from .finding import VideoFinder, report_missing
from .parsing import AnnotationError, root_path
from .sample_list import SampleList, VideoSample

__all__ = ["ssv2_samples"]


def ssv2_samples(
    annotations_json: str | os.PathLike[str],
    labels_json: str | os.PathLike[str],
    root: str | os.PathLike[str],
    *,
    exclude: Exclude = None,
) -> SampleList:
    """Return the videos of Something-Something v2's ``train.json`` or ``validation.json``, labelled by template.

    The classes are ``labels.json``'s templates, in the order of their numbers.
    Each entry's file is ``root/<id>.webm``, or the same name with another of
    ``VIDEO_EXTENSIONS``. The folder is listed once to find them. Entries with no
    file are left out, with one warning that counts them and names the first.
    A URL root is kept as it is, and its files are found at their first read.
    An entry's origin is ``"<file>, entry N"``, counting from 1.
    See :doc:`/video/datasets`.

    Args:
        annotations_json: ``train.json`` or ``validation.json``.
        labels_json: ``labels.json``: ``{template: class number}``, numbers as strings or ints.
        root: the folder holding the videos, or a URL.
        exclude: files to leave out (see ``excluding``).

    Raises:
        FileNotFoundError: a JSON file is missing.
        AnnotationError: a file is not the JSON expected; an entry has no id or
            template (``test.json`` has none); or a template is not in ``labels.json``.
            The error names the file and the entry.
        ValueError: no entry has a file.
    """
    classes, number_of = _templates(Path(labels_json))
    entries = _json(Path(annotations_json))
    if not isinstance(entries, list) or not entries:
        raise AnnotationError(str(annotations_json), "expected a non-empty JSON list of entries with id and template")
    root = root_path(root)
    finder = None if is_url(root) else VideoFinder(root, VIDEO_EXTENSIONS)
    samples: list[VideoSample] = []
    missing: list[tuple[int, str]] = []
    for number, entry in enumerate(entries, 1):
        origin = f"{annotations_json}, entry {number}"
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str | int) or "template" not in entry:
            raise AnnotationError(
                origin, f"expected an object with an 'id' and a 'template' (test.json has none), got {entry!r:.100}"
            )
        template = entry["template"]
        label = number_of.get(_plain(template)) if isinstance(template, str) else None
        if label is None:
            raise AnnotationError(origin, f"template {template!r} is not in {labels_json}, brackets removed or not")
        name = f"{entry['id']}.webm"
        if finder is not None:
            found = finder.find(name)
            if found is None:
                missing.append((number, name))
                continue
            name = found
        samples.append(VideoSample(str(root / name), label, origin=origin))
    report_missing(str(annotations_json), missing, len(entries), len(samples), root, unit="entry")
    return excluding(SampleList(classes, samples), exclude)


def _templates(labels_json: Path) -> tuple[tuple[str, ...], dict[str, int]]:
    """Return ``labels.json``'s templates in class order, and each template's class, brackets removed.

    Raises:
        AnnotationError: the file is not ``{template: number}``, or the numbers do not run from 0 without gaps.
    """
    mapping = _json(labels_json)
    if not isinstance(mapping, dict) or not mapping:
        raise AnnotationError(str(labels_json), "expected a JSON object {template: class number}")
    numbered: dict[int, str] = {}
    for template, value in mapping.items():
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = -1
        if number < 0 or isinstance(value, bool) or number in numbered:
            what = f"gives {number} to {numbered[number]!r} too" if number in numbered else "is not a class number"
            raise AnnotationError(str(labels_json), f"{value!r} for template {template!r} {what}")
        numbered[number] = template
    if sorted(numbered) != list(range(len(numbered))):
        gaps = sorted(set(range(max(numbered) + 1)) - set(numbered))
        raise AnnotationError(str(labels_json), f"class numbers must run from 0 without gaps; missing {gaps[:10]}")
    classes = tuple(numbered[k] for k in range(len(numbered)))
    number_of: dict[str, int] = {}
    for number, template in enumerate(classes):
        plain = _plain(template)
        if number_of.setdefault(plain, number) != number:
            raise AnnotationError(str(labels_json), f"two classes are the template {plain!r} without brackets")
    return classes, number_of


def _plain(template: str) -> str:
    """A template as ``labels.json`` names it: ``[something]`` becomes ``something``."""
    return template.replace("[", "").replace("]", "")


def _json(path: Path) -> object:
    """Return a JSON file's content.

    Raises:
        FileNotFoundError: there is no such file.
        AnnotationError: it is not JSON.
    """
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as exc:
            raise AnnotationError(f"{path}, line {exc.lineno}", f"not JSON: {exc.msg}") from None
