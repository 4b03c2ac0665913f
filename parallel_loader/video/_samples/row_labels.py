"""The labels of listed rows: class names or indices, one label a row or a tuple of them, one a head.

``row_labels`` turns the labels that rows give into each row's class index, and
names the classes. A row's label is an int (an index into ``classes``) or a
string (a class name). With several labels a sample (a verb and a noun, say),
every row's label is a tuple of one length. Each head follows those rules on
its own. This module knows nothing of files or data sets. See :doc:`/video/datasets`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .parsing import AnnotationError, some_names

__all__ = ["row_labels"]


def row_labels(
    labels: Sequence[object], classes: Sequence[str] | Sequence[Sequence[str]] | None
) -> tuple[list[str] | list[list[str]], list[int] | list[tuple[int, ...]]]:
    """Return the class names and each row's class index (a tuple of them, one a head, for tuple labels).

    Without ``classes``, int labels name their classes ``"0"``, ``"1"``, ... up
    to the largest label, and string labels are sorted.

    Args:
        labels: each row's label: all ints or all strings; or all tuples of one length, two or more.
        classes: class names in label order, or one list of them a head for tuple labels; ``None`` to name them.

    Raises:
        AnnotationError: labels are mixed, tuples differ in length, or a label names a class not in ``classes``.
        ValueError: ``classes`` does not give one list of names a head.
    """
    heads = _heads(labels)
    if not heads:
        return _head_labels(labels, classes, "")  # type: ignore[arg-type]
    head_classes = _classes_per_head(classes, heads)
    columns = [[label[h] for label in labels] for h in range(heads)]  # type: ignore[index]
    per_head = [_head_labels(column, head_classes[h], f"head {h}") for h, column in enumerate(columns)]
    numbers = [tuple(head[i] for _, head in per_head) for i in range(len(labels))]
    return [names for names, _ in per_head], numbers


def _heads(labels: Sequence[object]) -> int:
    """The length of the rows' tuple labels, or 0 when no label is a tuple.

    Raises:
        AnnotationError: some labels are tuples and some not, or tuples differ in length or have fewer than two.
    """
    tuples = [isinstance(label, tuple) for label in labels]
    if not any(tuples):
        return 0
    first = next(i for i, is_tuple in enumerate(tuples) if is_tuple)
    heads = len(labels[first])  # type: ignore[arg-type]
    for i, label in enumerate(labels):
        if not isinstance(label, tuple) or len(label) != heads:
            raise AnnotationError(
                f"sample {i}", f"expected a tuple of {heads} labels as sample {first} has, one a head; got {label!r}"
            )
    if heads < 2:
        raise AnnotationError(f"sample {first}", f"a tuple of labels needs two or more, got {labels[first]!r}")
    return heads


def _classes_per_head(classes: Sequence[str] | Sequence[Sequence[str]] | None, heads: int) -> list:
    """``classes`` as one list of names (or ``None``) a head, for rows of ``heads`` labels.

    Raises:
        ValueError: ``classes`` is not one sequence of names a head.
    """
    if classes is None:
        return [None] * heads
    given = list(classes)
    if len(given) != heads or any(isinstance(head, str) or not isinstance(head, Sequence) for head in given):
        raise ValueError(
            f"rows of {heads} labels need classes as {heads} lists of class names, one a head; got {classes!r:.100}"
        )
    return given


def _head_labels(labels: Sequence[object], classes: Sequence[str] | None, head: str) -> tuple[list[str], list[int]]:
    """One head's class names and each row's class index, from labels that are all ints or all names.

    Raises:
        AnnotationError: the labels are mixed, or one names a class not in ``classes``.
    """
    if all(isinstance(label, str) for label in labels):
        names = sorted(set(labels)) if classes is None else list(classes)  # type: ignore[type-var]
        index = {name: k for k, name in enumerate(names)}
        lookup = {label: index.get(label) for label in labels}
    elif all(isinstance(label, int | np.integer) and not isinstance(label, bool) for label in labels):
        names = [str(k) for k in range(max(labels) + 1)] if classes is None else list(classes)  # type: ignore[call-overload]
        lookup = {label: int(label) if 0 <= label < len(names) else None for label in labels}  # type: ignore[operator]
    else:
        within = f" of {head}" if head else ""
        raise AnnotationError(
            "the sample list", f"labels{within} must be all ints (class indices) or all strings (class names)"
        )
    for i, label in enumerate(labels):
        if lookup[label] is None:
            where = f", {head}" if head else ""
            raise AnnotationError(f"sample {i}{where}", f"unknown class {label!r}: the classes are {some_names(names)}")
    return names, [lookup[label] for label in labels]  # type: ignore[misc]
