"""`ember quantize IN OUT --type T`: a GGUF whose weight matrices are stored as ggml
quantized blocks.

IN: a GGUF (its tensors are dequantized and requantized) or anything `ember convert`
reads (a Llama-family Hugging Face directory gets llama.cpp's names and metadata). Only
matrices are quantized; 1-D tensors (norms, biases) stay F32, as llama.cpp keeps them.
The plain types store every matrix at that type (llama.cpp's `--pure`). The `_M`
presets follow llama.cpp's mixes: output.weight (or the tied token_embd.weight) at Q6_K,
and attn_v and ffn_down at Q6_K in the layers llama.cpp gives more bits (the first and
last eighth, and every third one between), the rest at Q4_K or Q5_K. A matrix whose rows
are not whole blocks of its type falls back, as llama.cpp does, to a type whose block
fits (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0, then F16); the
summary lists each fallback.
"""

import re

from .convert import add_output_arguments

TYPES = (
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q8_0",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "Q4_K_M",
    "Q5_K_M",
)
_MIXES = {"Q4_K_M": "Q4_K", "Q5_K_M": "Q5_K"}
FALLBACK = {
    "Q2_K": "Q4_0",
    "Q3_K": "Q4_0",
    "Q4_K": "Q5_0",
    "Q5_K": "Q5_1",
    "Q6_K": "Q8_0",
    "Q4_0": "F16",
    "Q4_1": "F16",
    "Q5_0": "F16",
    "Q5_1": "F16",
    "Q8_0": "F16",
}
_LAYER = re.compile(r"^blk\.(\d+)\.")


def add_parser(subparsers):
    p = subparsers.add_parser("quantize", help="write a quantized GGUF", description=__doc__)
    p.add_argument("input", help="GGUF, safetensors (file or directory) or PyTorch weights")
    p.add_argument("output", help="the .gguf file to write")
    p.add_argument(
        "--type",
        required=True,
        type=str.upper,
        choices=TYPES,
        help="the ggml type (or llama.cpp preset) to store matrices as",
    )
    add_output_arguments(p)
    p.set_defaults(func=run)
    return p


def more_bits(layer, n_layers):
    """llama.cpp's layers that get a bigger type in the _M mixes."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def planner(preset, names):
    """type_for(name, entry) -> (ggml type name, wanted type name) for one preset."""
    from ..io.quantize import fits

    base = _MIXES.get(preset, preset)
    layers = [int(m.group(1)) for m in map(_LAYER.match, names) if m]
    n_layers = max(layers) + 1 if layers else 0
    has_output = "output.weight" in names

    def wanted(name):
        if preset not in _MIXES:
            return base
        if name == "output.weight" or (not has_output and name == "token_embd.weight"):
            return "Q6_K"
        m = _LAYER.match(name)
        if (
            m
            and name.endswith(("attn_v.weight", "ffn_down.weight"))
            and more_bits(int(m.group(1)), n_layers)
        ):
            return "Q6_K"
        return base

    def type_for(name, entry):
        if not entry.is_float:
            return None, None
        if len(entry.shape) < 2:
            return "F32", None
        want = got = wanted(name)
        while not fits(got, entry.shape):
            got = FALLBACK[got]
        return got, want

    return type_for


def run(args):
    from ..errors import EmberError
    from ..io.outputs import StagedOutputs, check_target
    from ..io.quant import GGMLType
    from ..io.weights import open_weights
    from .convert import for_gguf, gguf_type, write_gguf_from

    if not str(args.output).endswith(".gguf"):
        raise EmberError(f"{args.output}: quantize writes GGUF; the output must end in .gguf")
    check_target(args.output, args.force)
    fallbacks, counts = [], {}
    with open_weights(args.input) as weights, StagedOutputs(args.force) as outputs:
        source = for_gguf(weights, args.input)
        choose = planner(args.type, [name for name, _, _ in source.items])

        def type_for(name, entry):
            got, want = choose(name, entry)
            if got is None:
                return gguf_type(entry, None)
            if want is not None and got != want:
                fallbacks.append((name, list(entry.shape), want, got))
            counts[got] = counts.get(got, 0) + 1
            return GGMLType[got]

        if "general.file_type" in source.metadata:
            del source.metadata["general.file_type"]  # it would describe the input
        # the ggml block-format revision, which llama.cpp's quantizer records
        source.metadata["general.quantization_version"] = 2
        planned = write_gguf_from(
            source, args.output, outputs, type_for, None if not args.quiet else False
        )
    if not args.quiet:
        mix = ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))
        print(f"wrote {len(planned)} tensors to {args.output} ({args.type}: {mix})")
        for name, shape, want, got in fallbacks:
            print(
                f"  {name} {shape}: rows of {shape[-1]} are not whole {want} blocks; "
                f"stored as {got}"
            )
    return 0
