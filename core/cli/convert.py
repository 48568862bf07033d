"""`ember convert IN OUT`: weights from one format to another, one tensor at a time.

IN: a PyTorch checkpoint (.pth/.pt/.bin, zip or legacy: read by a restricted unpickler,
so nothing in the file runs), safetensors (a file, or a Hugging Face directory of
shards), GGUF, npz or a CTranslate2 model.bin. OUT: `.safetensors` (sharded with an
index above --max-shard-size) or `.gguf`.

Llama-family models (config.json model_type llama, mistral or qwen2 beside the input)
go to GGUF under llama.cpp's tensor names and metadata keys, with q/k rows permuted for
interleaved rope as llama.cpp's converter does for llama and mistral, and the tokenizer
from tokenizer.json; a GGUF of those architectures comes back under Hugging Face names.
Other inputs keep their tensor names. In a GGUF, 1-D float tensors (norms, biases) are
F32 whatever --dtype says, as llama.cpp writes them (its kernels need them so). Peak memory is about one tensor: inputs are
memory-mapped and outputs written incrementally under temporary names, renamed at the end.

`ember convert --from-ultralytics MODEL.pt OUT_DIR`: a YOLOv8 detect or pose checkpoint
into ember's YOLO model directory (model.safetensors + yolo.json, what `ember detect
--model` reads). It loads the .pt with Ultralytics' weights-only loader, so it needs torch
and ultralytics (install them in an environment of their own); `--inert` reads it with
ember's restricted unpickler instead, without torch, running nothing the file names.
"""

import json
import os
import sys

import numpy as np

DTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
PERMUTED_ARCHS = ("llama", "mistral")  # llama.cpp permutes q/k rows for these
LLAMA_ARCHS = PERMUTED_ARCHS + ("qwen2",)


def add_parser(subparsers):
    p = subparsers.add_parser(
        "convert", help="convert weights between formats", description=__doc__
    )
    p.add_argument(
        "input", help="PyTorch, safetensors (file or directory), GGUF, npz or CTranslate2 weights"
    )
    p.add_argument(
        "output",
        help="the file to write: *.safetensors or *.gguf (a directory with --from-ultralytics)",
    )
    p.add_argument(
        "--from-ultralytics",
        action="store_true",
        help="IN is an Ultralytics YOLOv8 detect/pose .pt; write ember's YOLO model directory "
        "OUT (model.safetensors + yolo.json). Needs torch and ultralytics unless --inert",
    )
    p.add_argument(
        "--inert",
        action="store_true",
        help="with --from-ultralytics: read the .pt with ember's restricted unpickler (no torch)",
    )
    p.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        help="store floating-point tensors as "
        "this type (default: as in the input; quantized GGUF tensors stay quantized "
        "in a GGUF and become f32 in safetensors)",
    )
    add_output_arguments(p)
    p.add_argument(
        "--max-shard-size",
        default="5GB",
        help="split safetensors output above this size (bytes, or with KB/MB/GB)",
    )
    p.set_defaults(func=run)
    return p


def add_output_arguments(p):
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def parse_size(text):
    from ..errors import EmberError

    units = {
        "KB": 10**3,
        "MB": 10**6,
        "GB": 10**9,
        "KIB": 2**10,
        "MIB": 2**20,
        "GIB": 2**30,
        "B": 1,
    }
    t = str(text).strip().upper()
    for unit, scale in sorted(units.items(), key=lambda u: -len(u[0])):
        if t.endswith(unit):
            t, mult = t[: -len(unit)], scale
            break
    else:
        mult = 1
    try:
        value = int(float(t) * mult)
    except ValueError:
        value = 0
    if value <= 0:
        raise EmberError(f"--max-shard-size {text!r} is not a positive size")
    return value


class Progress:
    """A one-line bar over tensors on stderr when it is a terminal (silent otherwise)."""

    def __init__(self, total, enabled=None):
        self.total = total
        self.enabled = sys.stderr.isatty() if enabled is None else enabled

    def __call__(self, i, tensor):
        if self.enabled:
            filled = 30 * i // max(self.total, 1)
            sys.stderr.write(
                f"\r[{'#' * filled}{'.' * (30 - filled)}] {i + 1}/{self.total} "
                f"{tensor.name[:40]:<40}"
            )
            sys.stderr.flush()

    def done(self):
        if self.enabled:
            sys.stderr.write(f"\r[{'#' * 30}] {self.total}/{self.total}{' ' * 41}\n")


# --- values ---------------------------------------------------------------------------------
def cast(entry, array, target):
    """The entry's values as bytes of `target` (a float dtype name); same type: the same bits."""
    from ..io.quantize import quantize
    from ..io.weights import to_f32

    if entry.dtype == target:
        return np.ascontiguousarray(array)
    return quantize(to_f32(entry, array), target)


def permute_rows(array, heads, inverse=False):
    """q/k rows reordered between Hugging Face's half-split rope pairs and llama.cpp's
    interleaved ones; works on raw quantized rows too (a row is whole blocks)."""
    rows = array.shape[0]
    rest = array.shape[1:]
    hd = rows // heads
    if inverse:
        return np.ascontiguousarray(
            array.reshape(heads, hd // 2, 2, *rest).swapaxes(1, 2).reshape(array.shape)
        )
    return np.ascontiguousarray(
        array.reshape(heads, 2, hd // 2, *rest).swapaxes(1, 2).reshape(array.shape)
    )


# --- the Llama family ------------------------------------------------------------------------
def hf_config(path):
    """config.json beside (or inside) the input, or None."""
    base = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    p = os.path.join(base, "config.json")
    if not os.path.isfile(p):
        return None
    with open(p) as fh:
        return json.load(fh)


def llama_metadata(cfg, name):
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or hidden // heads
    arch = cfg["model_type"]
    theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    from ..io.gguf import GGUFValueType as V
    from ..io.gguf_writer import Typed

    md = {
        "general.architecture": arch,
        "general.name": name,
        f"{arch}.context_length": int(cfg.get("max_position_embeddings", 2048)),
        f"{arch}.embedding_length": int(hidden),
        f"{arch}.block_count": int(cfg["num_hidden_layers"]),
        f"{arch}.feed_forward_length": int(cfg["intermediate_size"]),
        f"{arch}.attention.head_count": int(heads),
        f"{arch}.attention.head_count_kv": int(cfg.get("num_key_value_heads") or heads),
        f"{arch}.attention.layer_norm_rms_epsilon": Typed(
            V.FLOAT32, float(cfg.get("rms_norm_eps", 1e-6))
        ),
        f"{arch}.rope.freq_base": Typed(V.FLOAT32, float(theta)),
        f"{arch}.rope.dimension_count": int(hd),
        f"{arch}.attention.key_length": int(hd),
        f"{arch}.attention.value_length": int(hd),
        f"{arch}.vocab_size": int(cfg["vocab_size"]),
    }
    return md


def tokenizer_metadata(path, cfg):
    """llama.cpp's tokenizer.ggml.* keys from a byte-level BPE tokenizer.json (gpt2 model)."""
    base = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    p = os.path.join(base, "tokenizer.json")
    if not os.path.isfile(p):
        return {}
    with open(p, encoding="utf-8") as fh:
        tj = json.load(fh)
    model = tj.get("model", {})
    if model.get("type") != "BPE":
        return {}
    n = int(cfg["vocab_size"])
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [5] * n  # llama.cpp's token types: 1 normal, 3 control, 4 user, 5 unused
    for tok, i in model.get("vocab", {}).items():
        if i < n:
            tokens[i], types[i] = tok, 1
    for a in tj.get("added_tokens", []):
        if a["id"] < n:
            tokens[a["id"]] = a["content"]
            types[a["id"]] = 3 if a.get("special") else 4
    from ..io.gguf import GGUFValueType as V
    from ..io.gguf_writer import Typed

    md = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": Typed(V.ARRAY, types, V.INT32),
        "tokenizer.ggml.merges": [
            m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])
        ],
    }
    for key, field in (
        ("bos_token_id", "bos_token_id"),
        ("eos_token_id", "eos_token_id"),
        ("pad_token_id", "padding_token_id"),
    ):
        if cfg.get(key) is not None and not isinstance(cfg[key], list):
            md[f"tokenizer.ggml.{field}"] = int(cfg[key])
    return md


def _layer_heads(name, heads, kv_heads):
    """Head count to permute this llama.cpp-named tensor's rows by, or None."""
    if name.endswith(("attn_q.weight", "attn_q.bias")):
        return heads
    if name.endswith(("attn_k.weight", "attn_k.bias")):
        return kv_heads
    return None


class Source:
    """An input seen under the names it gets in the output, with a per-tensor row permutation."""

    def __init__(self, weights, names, inverse, metadata, skipped):
        self.weights = weights
        self.items = names  # [(out name, entry, heads to permute by or None)]
        self.inverse = inverse
        self.metadata = metadata
        self.skipped = skipped

    def read(self, entry, heads):
        array = entry.read()
        if heads is not None:
            if entry.dtype in ("F32", "F16", "BF16", "F64") or len(entry.shape) == 1:
                array = permute_rows(np.asarray(array).reshape(entry.shape), heads, self.inverse)
            else:  # quantized: rows of raw blocks
                array = permute_rows(
                    np.asarray(array).reshape(entry.shape[0], -1), heads, self.inverse
                )
        return array


def for_gguf(weights, path):
    """The input under llama.cpp's names when it is a Llama-family Hugging Face model."""
    from ..models.gguf_llama import gguf_name

    cfg = hf_config(path) if weights.format != "gguf" else None
    if weights.format == "gguf":
        meta = dict(weights.metadata)
        types = getattr(weights, "gguf_types", {})
        meta = {
            k: _retyped(k, v, types[k]) if k in types else v
            for k, v in meta.items()
            if k != "general.alignment"
        }
        return Source(weights, [(e.name, e, None) for e in weights.entries], False, meta, [])
    if cfg is None or cfg.get("model_type") not in LLAMA_ARCHS:
        return Source(weights, [(e.name, e, None) for e in weights.entries], False, {}, [])
    arch = cfg["model_type"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    items, skipped = [], []
    for e in weights.entries:
        g = gguf_name(e.name)
        if g is None:
            skipped.append(e.name)
            continue
        items.append((g, e, _layer_heads(g, heads, kv) if arch in PERMUTED_ARCHS else None))
    md = llama_metadata(cfg, os.path.basename(os.path.abspath(path)))
    md.update(tokenizer_metadata(path, cfg))
    return Source(weights, items, False, md, skipped)


# element types of arrays llama.cpp checks (the reader keeps only that a value is an array)
_ARRAY_ELEMENTS = {"tokenizer.ggml.token_type": "INT32", "tokenizer.ggml.scores": "FLOAT32"}


def _retyped(key, value, t):
    from ..io.gguf import GGUFValueType as V
    from ..io.gguf_writer import Typed, infer

    if t != V.ARRAY:
        return Typed(t, value)
    if key in _ARRAY_ELEMENTS:
        return Typed(t, value, V[_ARRAY_ELEMENTS[key]])
    return infer(value)


def for_safetensors(weights):
    """The input under Hugging Face names (a Llama-family GGUF is mapped back)."""
    from ..models.gguf_llama import _GLOBAL_NAMES, _LAYER_NAMES

    md = weights.metadata
    arch = md.get("general.architecture") if weights.format == "gguf" else None
    if arch not in LLAMA_ARCHS:
        return Source(weights, [(e.name, e, None) for e in weights.entries], True, {}, [])
    heads = int(md[f"{arch}.attention.head_count"])
    kv = md.get(f"{arch}.attention.head_count_kv", heads)
    kv = int(kv[0] if isinstance(kv, list) else kv)
    back = {g: hf for hf, g in _GLOBAL_NAMES.items()}
    tails = {}
    for hf_tail, g_tail in _LAYER_NAMES.items():
        tails.setdefault(g_tail, hf_tail)  # first wins: ffn_up is up_proj, not Phi-3's fused one
    items, skipped = [], []
    for e in weights.entries:
        name = back.get(e.name)
        if name is None and e.name.startswith("blk."):
            _, layer, tail = e.name.split(".", 2)
            if tail in tails:
                name = f"model.layers.{layer}.{tails[tail]}"
        if name is None:
            skipped.append(e.name)
            continue
        items.append((name, e, _layer_heads(e.name, heads, kv) if arch in PERMUTED_ARCHS else None))
    return Source(weights, items, True, {}, skipped)


# --- planning and writing ---------------------------------------------------------------------
def safetensors_dtype(entry, want):
    from ..io.weights import FLOAT_DTYPES

    if entry.is_float:
        if want is not None:
            return want
        return entry.dtype if entry.dtype in FLOAT_DTYPES else "F32"
    return entry.dtype


def gguf_type(entry, want):
    from ..errors import UnsupportedDType
    from ..io.quant import GGMLType

    if entry.is_float:
        t = want or entry.dtype
        if len(entry.shape) <= 1 and t in ("F16", "BF16"):
            # 1-D tensors (norms, biases) stay F32, as llama.cpp's converter writes them:
            # its CPU kernels multiply and add f32 rows by f32 ones only, and abort the
            # process on an F16/BF16 norm ("binary_op: unsupported types").
            t = "F32"
        return GGMLType[t]
    if entry.dtype in ("I8", "I16", "I32", "I64"):
        return GGMLType[entry.dtype]
    raise UnsupportedDType(
        f"tensor {entry.name!r}: GGUF has no {entry.dtype} type (it stores "
        "I8, I16, I32, I64 and floats)",
        tensor=entry.name,
    )


def write_gguf_from(source, out_path, outputs, type_for, progress_enabled=None):
    """Plan every tensor's ggml type with `type_for(name, entry)`, then write."""
    from ..io.gguf_writer import PlannedTensor, write_gguf
    from ..io.quantize import quantize

    planned = []
    for name, entry, heads in source.items:
        t = type_for(name, entry)

        def produce(entry=entry, heads=heads, t=t):
            array = source.read(entry, heads)
            if not entry.is_float or entry.dtype == t.name:
                return np.ascontiguousarray(array)
            from ..io.weights import to_f32

            return quantize(to_f32(entry, array).reshape(entry.shape), t)

        planned.append(PlannedTensor(name, tuple(entry.shape), t, produce, entry.release))
    fh = outputs.open(out_path)
    bar = Progress(len(planned), progress_enabled)
    write_gguf(fh, source.metadata, planned, progress=bar)
    bar.done()
    return planned


def run_ultralytics(args):
    from ..errors import EmberError
    from ..models.yolo_convert import convert

    if args.dtype or args.max_shard_size != "5GB":
        raise EmberError("--dtype and --max-shard-size do not apply to --from-ultralytics")
    meta_path, weights_path = convert(args.input, args.output, args.inert, args.force)
    if not args.quiet:
        print(f"wrote {weights_path} and {meta_path}")
    return 0


def run(args):
    from ..errors import EmberError

    if args.from_ultralytics:
        return run_ultralytics(args)
    if args.inert:
        raise EmberError("--inert applies to --from-ultralytics only")
    from ..io.outputs import StagedOutputs, check_target
    from ..io.weights import open_weights

    out = os.fspath(args.output)
    kind = (
        "gguf" if out.endswith(".gguf") else "safetensors" if out.endswith(".safetensors") else None
    )
    if kind is None:
        raise EmberError(f"{out}: the output's extension must be .safetensors or .gguf")
    check_target(out, args.force)
    want = DTYPES.get(args.dtype) if args.dtype else None
    with open_weights(args.input) as weights, StagedOutputs(args.force) as outputs:
        if kind == "gguf":
            source = for_gguf(weights, args.input)
            planned = write_gguf_from(
                source,
                out,
                outputs,
                lambda n, e: gguf_type(e, want),
                None if not args.quiet else False,
            )
            written = [out]
        else:
            from ..io.safetensors_writer import PlannedTensor, write_safetensors

            source = for_safetensors(weights)
            planned = []
            for name, entry, heads in source.items:
                target = safetensors_dtype(entry, want)

                def produce(entry=entry, heads=heads, target=target):
                    array = source.read(entry, heads)
                    return (
                        cast(entry, array, target)
                        if entry.is_float
                        else np.ascontiguousarray(array)
                    )

                planned.append(
                    PlannedTensor(name, target, tuple(entry.shape), produce, entry.release)
                )
            bar = Progress(len(planned), None if not args.quiet else False)
            written = write_safetensors(
                outputs,
                out,
                planned,
                metadata={"format": "pt"},
                max_shard_bytes=parse_size(args.max_shard_size),
                progress=bar,
            )
            bar.done()
    if not args.quiet:
        print(f"wrote {len(planned)} tensors to {', '.join(written)}")
        if source.skipped:
            print(
                f"left out {len(source.skipped)} tensors with no counterpart: "
                f"{', '.join(source.skipped[:8])}{' ...' if len(source.skipped) > 8 else ''}"
            )
    return 0
