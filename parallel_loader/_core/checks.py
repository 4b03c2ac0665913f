"""Argument checks shared by the modules: one wording for every kind of argument."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

__all__ = ["check_bool", "check_callable", "check_int", "check_threads", "check_timeout"]


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


def check_threads(name: str, value: object) -> int | str:
    """Return a thread count: an int of at least 1, or ``"auto"``.

    Raises:
        TypeError: ``value`` is neither an int nor ``"auto"``.
        ValueError: it is below 1.
    """
    if value == "auto":
        return "auto"
    if isinstance(value, str):
        raise TypeError(f'{name} must be an int or "auto", got {value!r}')
    return check_int(name, value, minimum=1)


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool (numpy's included); a string such as ``"no"`` is refused.

    Raises:
        TypeError: ``value`` is not a bool.
    """
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def check_timeout(value: object, name: str = "timeout") -> float | None:
    """Return a timeout in seconds as a float, or ``None`` for "wait for ever" (``None`` or infinity).

    Raises:
        TypeError: ``value`` is not a real number (a string, say).
        ValueError: it is negative or NaN.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(value, "__float__"):
        raise TypeError(f"{name} must be a number of seconds or None, got {type(value).__name__} {value!r}")
    seconds = float(value)  # type: ignore[arg-type]
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"{name} must be a non-negative number of seconds or None, got {value!r}")
    return None if math.isinf(seconds) else seconds


def check_callable(name: str, value: Any, optional: bool = True) -> Any:
    """Return ``value`` if it is callable (or ``None`` when ``optional``).

    Raises:
        TypeError: it is not callable.
    """
    if value is None and optional:
        return None
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} {value!r}")
    return value
