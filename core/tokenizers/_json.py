"""JSON reading that gives the same floats as the reference.

The reference parses tokenizer.json with serde_json's default (fast, not always
correctly rounded) float parser: the decimal significand is read as a u64 and
then multiplied or divided by a power of ten, two roundings instead of one.
Unigram scores that differ in the last bit can change which of two equally
likely segmentations wins, so ember reads floats the same way.
"""

import json

_U64_MAX = (1 << 64) - 1
_POW10 = [float(10**i) for i in range(309)]


def _from_parts(negative, significand, exponent):
    f = float(significand)
    while True:
        k = -exponent if exponent < 0 else exponent
        if k < len(_POW10):
            if exponent >= 0:
                f *= _POW10[k]
            else:
                f /= _POW10[k]
            break
        if f == 0.0:
            break
        if exponent >= 0:
            f = float("inf")
            break
        f /= 1e308
        exponent += 308
    return -f if negative else f


def _slow(negative, int_digits, frac_digits, exp):
    significand = 0
    exponent = 0
    overflowed = False
    for d in int_digits:
        if overflowed:
            exponent += 1
            continue
        nxt = significand * 10 + (ord(d) - 48)
        if nxt > _U64_MAX:
            overflowed = True
            exponent += 1
            continue
        significand = nxt
    for d in frac_digits:
        nxt = significand * 10 + (ord(d) - 48)
        if nxt > _U64_MAX:
            break  # the remaining fraction digits are ignored
        significand = nxt
        exponent -= 1
    return _from_parts(negative, significand, exponent + exp)


def serde_float(literal):
    """The f64 serde_json (default features) reads for a JSON number literal."""
    s = literal
    negative = s.startswith("-")
    if negative:
        s = s[1:]
    mant, e, exp = s.replace("E", "e").partition("e")
    int_digits, _, frac_digits = mant.partition(".")
    exp = int(exp) if e else 0
    digits = int_digits + frac_digits
    if len(digits.lstrip("0")) <= 19:
        return _from_parts(negative, int(digits), exp - len(frac_digits))
    return _slow(negative, int_digits, frac_digits, exp)


def _no_constant(name):
    raise ValueError("%s is not a JSON number" % name)  # serde_json refuses NaN/Infinity too


def loads(text):
    return json.loads(text, parse_float=serde_float, parse_constant=_no_constant)
