"""The callback's option checks: a wrong value fails at construction, naming the option, what is allowed
and the value given (Lightning's ``MisconfigurationException``, as its own callbacks raise)."""

from __future__ import annotations

import math
import os
from typing import Any, TypeVar

from lightning.pytorch.utilities.exceptions import MisconfigurationException

P = TypeVar("P")


def check_int(name: str, value: Any, minimum: int) -> int:
    """An integer (not a bool) ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MisconfigurationException(
            f"BottleneckCallback(`{name}`) must be an integer >= {minimum}, got {value!r}."
        )
    return value


def check_seconds(name: str, value: Any, what: str, auto: bool = False) -> float | None:
    """A finite number of seconds ``>= 0``; with ``auto``, ``None`` (automatic) too."""
    if auto and value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise MisconfigurationException(
            f"BottleneckCallback(`{name}`) must be a number of seconds >= 0 ({what})"
            + (" or None (automatic)" if auto else "")
            + f", got {value!r}."
        )
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    """``True`` or ``False``, nothing truthy."""
    if not isinstance(value, bool):
        raise MisconfigurationException(f"BottleneckCallback(`{name}`) must be True or False, got {value!r}.")
    return value


def check_verbose(value: Any) -> bool | None:
    """``None`` (the short answer), ``True`` (every line of evidence, note and reason) or ``False`` (print nothing)."""
    if value is not None and not isinstance(value, bool):
        raise MisconfigurationException(
            "BottleneckCallback(`verbose`) must be None (the short answer), True (the full detail) or False "
            f"(print nothing), got {value!r}."
        )
    return value


def check_path(name: str, value: P) -> P:
    """A path (``str`` or ``os.PathLike``) or ``None``; returned as given."""
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise MisconfigurationException(
            f"BottleneckCallback(`{name}`) must be a path (str) or None, got {value!r}."
        )
    return value


def check_timeout(name: str, value: Any) -> float:
    """A positive number of seconds (``0`` would give up before waiting)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise MisconfigurationException(
            f"BottleneckCallback(`{name}`) must be a positive number of seconds, got {value!r}."
        )
    return float(value)
