"""`ember verify MODEL`: run ember and the PyTorch reference (transformers, torch on the
CPU) on the same inputs and report, block by block, the max absolute and relative
error and the first block that diverges beyond the tolerance.

MODEL is a model directory (BERT / sentence-embedding; a Llama-family or Gemma 2/3
causal LM with safetensors weights; Whisper, Hugging Face or CTranslate2) or a GGUF file
(Llama family, Gemma 2/3); Whisper gets random mel features. A block passes when
max|ember - torch| <= atol + rtol * max|torch|.

Exit status: 0 when every block is within tolerance, 1 when one diverges, 2 for bad
input (a missing or unreadable model, an unknown family, torch/transformers missing).
"""

import json
import sys

from .common import add_device_argument

EXIT_OK, EXIT_DIVERGED, EXIT_BAD_INPUT = 0, 1, 2


def add_parser(subparsers):
    p = subparsers.add_parser(
        "verify",
        help="compare a model layer by layer with transformers",
        description=__doc__,
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "model", help="model directory (config.json + safetensors, or CTranslate2) or GGUF file"
    )
    p.add_argument(
        "--reference",
        default="transformers",
        choices=["transformers"],
        help="what to compare against (default transformers, torch on the CPU)",
    )
    add_device_argument(p, default="cpu")
    p.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (default 1e-4)")
    p.add_argument(
        "--rtol",
        type=float,
        default=1e-4,
        help="tolerance relative to each block's largest reference value (1e-4)",
    )
    p.add_argument(
        "--tokens",
        type=int,
        default=16,
        help="random token ids per row when no --text is given (default 16)",
    )
    p.add_argument("--text", help="tokenize this text with the model's tokenizer instead")
    p.add_argument("--seed", type=int, default=0, help="seed of the random token ids")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)
    return p


def run(args):
    from ..errors import EmberError
    from ..verify import verify_model

    if args.atol < 0 or args.rtol < 0:
        print("verify: --atol and --rtol must be >= 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    _quiet_transformers()
    try:
        report, facts = verify_model(
            args.model,
            device=args.device,
            reference=args.reference,
            atol=args.atol,
            rtol=args.rtol,
            tokens=args.tokens,
            text=args.text,
            seed=args.seed,
        )
    except EmberError as exc:
        message = str(exc)
        print(message if message.startswith("verify:") else f"verify: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(facts | report.to_dict(), indent=2))
    else:
        print(
            f"{facts['model']}: {facts['family']} on {facts['device']} vs "
            f"{facts['reference']} (torch cpu), input ids {facts['input_shape']}"
        )
        print(report)
    return EXIT_OK if report.ok else EXIT_DIVERGED


def _quiet_transformers():
    """transformers prints load reports and progress bars; the report is what matters."""
    try:
        import transformers
    except ImportError:
        return  # verify_model names the missing package
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
