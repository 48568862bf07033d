"""Integer arithmetic shared across ember (pure Python)."""


def ceil_div(a, b):
    """The smallest integer >= a / b, for ints a and b > 0 (exact at any size)."""
    return -(-a // b)
