"""The `ember` command. Each subcommand is a small module here with
`add_parser(subparsers)` that registers it and sets `func`; modules not present in this
install are skipped, so adding a command is adding a file and a name below.

Nothing heavy is imported until a command runs, so `ember --help` is instant.
"""
import argparse
import importlib
import sys

COMMANDS = ("embed", "search", "info", "demo", "generate", "chat", "serve", "bench", "inspect",
            "convert", "quantize", "verify")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="ember", description="ember: minimalist ML inference on CPU, WebGPU and CUDA")
    from .. import __version__
    parser.add_argument("--version", action="version", version=f"ember {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue  # this command is not part of this install
            raise
        module.add_parser(subparsers)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    from ..errors import EmberError
    try:
        return args.func(args) or 0
    except EmberError as exc:
        print(f"ember {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `ember embed ... | head`: the reader left; stop quietly, as Unix tools do.
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
