"""Checks for the fields a model reads from config.json or GGUF metadata.

A config comes from a file someone else wrote: `"num_attention_heads": 0` would divide
by zero, a string `hidden_size` would fail deep inside a layer, a negative layer count
would build an empty model and a NaN epsilon would give NaN logits. Each helper checks
one value's type and range and returns it (as the Python type the model uses), or
raises FormatError naming the file and the field.
"""

import math

from ..errors import FormatError

# Counts (sizes, heads, layers, positions) must index 32-bit buffers on every device.
MAX_COUNT = (1 << 31) - 1


def fail(source, name, must, value):
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return FormatError(
        f"{source}: field {name!r} must be {must}, got {shown}",
        path=source,
        field=name,
        value=value,
    )


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def integer(source, name, value, low=None, high=MAX_COUNT):
    """An int (not a bool, not a float) in [low, high]."""
    if not is_int(value):
        raise fail(source, name, "an integer", value)
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            raise fail(source, name, f"an integer >= {low}", value)
        bounds = f"between {low} and {high}" if low is not None else f"at most {high}"
        raise fail(source, name, f"an integer {bounds}", value)
    return value


def positive_int(source, name, value):
    return integer(source, name, value, low=1)


def number(source, name, value, low=None, high=None, low_open=False):
    """A finite int or float in [low, high] ((low, high] with low_open), as a float."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool)):
        raise fail(source, name, "a number", value)
    value = float(value)
    if not math.isfinite(value):
        raise fail(source, name, "a finite number", value)
    below = low is not None and (value <= low if low_open else value < low)
    if below or (high is not None and value > high):
        lo = "" if low is None else (f"> {low}" if low_open else f">= {low}")
        hi = "" if high is None else f"<= {high}"
        raise fail(source, name, "a number " + " and ".join(x for x in (lo, hi) if x), value)
    return value


def positive_number(source, name, value):
    return number(source, name, value, low=0.0, low_open=True)


def boolean(source, name, value):
    if not isinstance(value, bool):
        raise fail(source, name, "true or false", value)
    return value


def string(source, name, value, choices=None):
    if not isinstance(value, str):
        raise fail(source, name, "a string", value)
    if choices is not None and value not in choices:
        raise fail(source, name, "one of " + ", ".join(repr(c) for c in choices), value)
    return value


def optional(check, source, name, value, *args, **kwargs):
    """None, or what `check` accepts."""
    return None if value is None else check(source, name, value, *args, **kwargs)


def token_ids(source, name, value):
    """None, a token id (an int >= 0) or a non-empty list of them."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        if not value:
            raise fail(source, name, "a token id or a non-empty list of token ids", value)
        return [integer(source, f"{name}[{i}]", v, low=0) for i, v in enumerate(value)]
    return integer(source, name, value, low=0)


def mapping(source, name, value):
    if not isinstance(value, dict):
        raise fail(source, name, "a JSON object", value)
    return value


__all__ = [
    "MAX_COUNT",
    "boolean",
    "fail",
    "integer",
    "is_int",
    "mapping",
    "number",
    "optional",
    "positive_int",
    "positive_number",
    "string",
    "token_ids",
]
