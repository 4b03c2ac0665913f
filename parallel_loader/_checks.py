"""Argument checks shared by the modules: one wording for every int argument."""

from __future__ import annotations

import operator

__all__ = ["check_int"]


def check_int(name: str, value: object, minimum: int) -> int:
    """Return ``value`` as an int (numpy integers included, bools not) if it is at least ``minimum``.

    Raises:
        TypeError: ``value`` is not an integer.
        ValueError: it is below ``minimum``.
    """
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if number < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {number}")
    return number
