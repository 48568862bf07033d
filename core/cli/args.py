"""Argument types for the CLI: each checks one kind of value as argparse reads it, so a
bad value ends in argparse's one-line usage error (exit 2) naming the option, never a
traceback later (`ember serve --port 70000` once raised OverflowError from bind).

    p.add_argument("--port", type=args.port, default=8000)
"""

import argparse
import math


def _integer(text, what):
    try:
        return int(text, 10)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def _number(text, what):
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if not math.isfinite(value):  # float() reads "nan" and "inf" too
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def _checked(parse, what, ok):
    """An argparse type: `parse(text, what)`, then `ok(value)` or the usage error."""

    def check(text):
        value = parse(text, what)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value

    return check


# One line each: the parser, the words of the error, the accepted range.
port = _checked(_integer, "a port number 0..65535", lambda v: 0 <= v <= 65535)
seed = _checked(_integer, "a non-negative integer", lambda v: v >= 0)
positive_int = _checked(_integer, "a positive integer", lambda v: v >= 1)
non_negative_int = _checked(_integer, "a non-negative integer", lambda v: v >= 0)
probability = _checked(_number, "a probability between 0 and 1", lambda v: 0.0 <= v <= 1.0)
non_negative_float = _checked(_number, "a finite number of at least 0", lambda v: v >= 0)
positive_float = _checked(_number, "a finite number greater than 0", lambda v: v > 0)
