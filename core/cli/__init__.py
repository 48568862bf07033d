"""The `ember` command. Each subcommand is a small module here with
`add_parser(subparsers)` that registers it and sets `func`; modules not present in this
install are skipped, so adding a command is adding a file and a name below.

Every subcommand also takes `--profile` (the per-op / per-kernel table on stderr when it
ends) and `--profile-trace FILE` (a Chrome trace JSON), added here so that no verb needs to
know about them; `ember profile VERB ...` is the same as a verb of its own (profile.py).

Nothing heavy is imported until a command runs, so `ember --help` is instant.
"""

import argparse
import importlib
import sys

COMMANDS = (
    "embed",
    "search",
    "detect",
    "segment",
    "info",
    "demo",
    "generate",
    "chat",
    "transcribe",
    "serve",
    "bench",
    "inspect",
    "convert",
    "quantize",
    "verify",
    "profile",
)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="ember", description="ember: minimalist ML inference on CPU, WebGPU and CUDA"
    )
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
    for name, sub in subparsers.choices.items():
        if name != "profile":
            add_profile_options(sub)
    return parser


def add_profile_options(parser):
    group = parser.add_argument_group("profiling")
    group.add_argument(
        "--profile",
        action="store_true",
        help="print time, calls and bytes per op (and per GPU kernel on WebGPU "
        "adapters with timestamp queries) to stderr when done",
    )
    group.add_argument(
        "--profile-trace",
        metavar="FILE",
        default=None,
        help="also write a Chrome trace JSON (open it in ui.perfetto.dev); "
        "an existing FILE is refused",
    )


def run(args):
    """Run the parsed command, under a profiler when it asked for one."""
    if not (getattr(args, "profile", False) or getattr(args, "profile_trace", None)):
        return args.func(args) or 0
    import os

    from ..errors import InvalidArgument
    from ..profiler import Profiler

    if args.profile_trace and os.path.exists(args.profile_trace):
        raise InvalidArgument(
            f"--profile-trace: {args.profile_trace} exists; choose another "
            f"path (ember does not overwrite it)"
        )
    profiler = Profiler().start()
    try:
        status = args.func(args) or 0
    finally:
        result = profiler.stop()
        print(result.table(), file=sys.stderr)
        if args.profile_trace:
            result.save_trace(args.profile_trace)
            print(f"trace written to {args.profile_trace}", file=sys.stderr)
    return status


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    from ..errors import EmberError

    try:
        return run(args)
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
