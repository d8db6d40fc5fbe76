"""Typed reads of a Responses request's parameters; every refusal names its parameter.

The messages follow OpenAI's own 400s ("Invalid type for 'input[2].content': ..."), so a client
that handles OpenAI's errors handles the proxy's.
"""

from __future__ import annotations

from typing import Any

from proxy.core.errors import InvalidRequest


def wrong_type(param: str, expected: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid type for '{param}': expected {expected}", param=param, code="invalid_type"
    )


def invalid_value(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for '{param}': {why}", param=param, code="invalid_value")


def missing(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Missing required parameter: '{param}'", param=param, code="missing_required_parameter"
    )


def unsupported(param: str, message: str) -> InvalidRequest:
    """What the proxy cannot do with a parameter that OpenAI's API accepts."""
    return InvalidRequest(message, param=param, code="unsupported_parameter")


def text(value: object, param: str, *, required: bool = False) -> str | None:
    if value is None:
        if required:
            raise missing(param)
        return None
    if not isinstance(value, str):
        raise wrong_type(param, "a string")
    return value


def flag(value: object, param: str) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise wrong_type(param, "a boolean")
    return value


def number(value: object, param: str, low: float, high: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise wrong_type(param, "a number")
    if not low <= value <= high:
        raise invalid_value(param, f"must be between {low:g} and {high:g}")
    return value


def integer(value: object, param: str, low: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(param, "an integer")
    if value < low:
        raise invalid_value(param, f"must be at least {low}")
    return value


def mapping(value: object, param: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise wrong_type(param, "an object")
    return value


def array(value: object, param: str) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise wrong_type(param, "an array")
    return value


def choice(value: object, param: str, allowed: tuple[str, ...]) -> str | None:
    found = text(value, param)
    if found is not None and found not in allowed:
        raise invalid_value(param, "must be one of " + ", ".join(repr(a) for a in allowed))
    return found
