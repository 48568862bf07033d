"""The CLI's argument types (ember.cli.args): each accepts its range and refuses the rest
with argparse's one-line error naming the option (`--seed -1` and `--port 70000` once
ended in tracebacks)."""
import argparse

import pytest

from ember.cli import args

CASES = {
    args.port: (["0", "8000", "65535"], ["65536", "70000", "-1", "80.5", "http", ""]),
    args.seed: (["0", "42", str(2 ** 64)], ["-1", "1.5", "seed", ""]),
    args.positive_int: (["1", "128"], ["0", "-3", "2.0", "many"]),
    args.non_negative_int: (["0", "40"], ["-1", "0.5", "none"]),
    args.probability: (["0", "0.9", "1", "1e-3"], ["1.01", "-0.1", "nan", "inf", "p"]),
    args.non_negative_float: (["0", "0.7", "12"], ["-0.5", "nan", "inf", "-inf", "warm"]),
    args.positive_float: (["1", "1.1", "1e-6"], ["0", "-1", "nan", "inf", "x"]),
}


@pytest.mark.parametrize("kind", list(CASES), ids=lambda f: f.__name__)
def test_each_type_accepts_its_range_and_refuses_the_rest(kind):
    good, bad = CASES[kind]
    for text in good:
        assert kind(text) == (int(text) if kind in (args.port, args.seed, args.positive_int,
                                                    args.non_negative_int) else float(text))
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError) as info:
            kind(text)
        msg = str(info.value)
        assert msg.startswith("must be ") and f"got {text}" in msg.replace("'", ""), msg


def test_a_bad_value_is_argparse_s_usage_error_naming_the_option(capsys):
    parser = argparse.ArgumentParser(prog="ember x")
    parser.add_argument("--seed", type=args.seed)
    parser.add_argument("--top-p", type=args.probability)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--seed", "-1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --seed: must be a non-negative integer, got -1" in err
    assert parser.parse_args(["--seed", "7", "--top-p", "0.5"]).top_p == 0.5
