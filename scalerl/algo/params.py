"""Checks for registered entries' hyper-parameters.

Every check raises ``ValueError("<field>: <problem>")``; ``scalerl.algo.validate`` prefixes the config path
(``algo.loss.params.``) so the user sees one line naming the exact field.
"""

from __future__ import annotations

import numbers
from typing import Any


def number(field: str, value: Any) -> float:
    """``value`` as a float; bools and strings are refused (YAML ``yes`` or ``"0.2"`` are mistakes)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{field}: must be a number, got {value!r}")
    return float(value)


def integer(field: str, value: Any) -> int:
    """``value`` as an int; a float with a fractional part is refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or float(value) != int(value):
        raise ValueError(f"{field}: must be an integer, got {value!r}")
    return int(value)


def positive(field: str, value: Any) -> float:
    out = number(field, value)
    if not out > 0:
        raise ValueError(f"{field}: must be > 0, got {value!r}")
    return out


def positive_int(field: str, value: Any) -> int:
    out = integer(field, value)
    if out < 1:
        raise ValueError(f"{field}: must be >= 1, got {value!r}")
    return out


def fraction(field: str, value: Any) -> float:
    """A number in (0, 1]."""
    out = number(field, value)
    if not 0 < out <= 1:
        raise ValueError(f"{field}: must be in (0, 1], got {value!r}")
    return out


def coerce(obj: object, field: str, check: Any) -> None:
    """Run ``check(field, value)`` on a frozen dataclass field and store the normalised value."""
    object.__setattr__(obj, field, check(field, getattr(obj, field)))
