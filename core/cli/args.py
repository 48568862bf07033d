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


def port(text):
    """A TCP port, 0..65535 (0: the system picks a free one)."""
    value = _integer(text, "a port number 0..65535")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0..65535, got {value}")
    return value


def seed(text):
    """A random seed: a non-negative integer (what ember.manual_seed accepts)."""
    value = _integer(text, "a non-negative integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {value}")
    return value


def positive_int(text):
    """An integer of at least 1 (a count, a size)."""
    value = _integer(text, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_int(text):
    """An integer of at least 0 (a count where 0 means none or off)."""
    value = _integer(text, "a non-negative integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {value}")
    return value


def probability(text):
    """A finite number in [0, 1]."""
    value = _number(text, "a probability between 0 and 1")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a probability between 0 and 1, got {value}")
    return value


def non_negative_float(text):
    """A finite number of at least 0 (NaN and inf are refused)."""
    value = _number(text, "a finite number of at least 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 0, got {value}")
    return value


def positive_float(text):
    """A finite number greater than 0 (NaN and inf are refused)."""
    value = _number(text, "a finite number greater than 0")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number greater than 0, got {value}")
    return value
