"""`ember profile VERB ...`: run any other command under the profiler.

    ember profile embed --device wgpu "a cat" "a dog"
    ember profile --trace run.json generate --prompt "Once" --max-new-tokens 8

The table (time, calls and bytes per op; per GPU kernel where the WebGPU adapter has
timestamp queries) goes to stderr, so the command's own output stays as it was. The same as
`ember VERB ... --profile [--profile-trace FILE]`.
"""

import argparse


def add_parser(subparsers):
    p = subparsers.add_parser(
        "profile",
        help="run another command and print where its time went",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--trace",
        metavar="FILE",
        default=None,
        help="also write a Chrome trace JSON (open it in ui.perfetto.dev)",
    )
    p.add_argument("verb", metavar="VERB", help="the command to profile (embed, generate...)")
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="ARGS", help="its arguments")
    p.set_defaults(func=run)
    return p


def run(args):
    from ..errors import InvalidArgument
    from . import build_parser
    from . import run as run_command

    if args.verb == "profile":
        raise InvalidArgument("profile: give the command to profile, not `profile` again")
    inner = build_parser().parse_args([args.verb, *args.rest])
    inner.profile = True
    inner.profile_trace = args.trace or inner.profile_trace
    return run_command(inner)
