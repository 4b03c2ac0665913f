"""Argument checks shared by the modules: one wording for every int and bool argument."""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["check_bool", "check_int"]


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


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` as a bool if it is one (numpy's included).

    A flag given as a string or a number is refused rather than read by its
    truth: ``shuffle="no"`` or ``ordered="False"`` would otherwise mean True.

    Raises:
        TypeError: ``value`` is not a bool.
    """
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)
