"""Seeded mutators and small valid model files for the fuzz tests (tests/test_fuzz_*.py).

Every case is derived from one `random.Random(seed)`, so a failure prints the seed and
the mutation that made it, and rerunning that seed gives the same bytes. Sizes stay
bounded by construction: the valid files are a few KiB, mutations add at most a few
KiB (deep nesting is text, 20,000 brackets), so no case can ask a correct reader for
much memory or time; a reader that loops or allocates without bound is the bug the
suite is looking for.

EMBER_FUZZ_CASES=N runs N cases per format instead of the default few hundred;
EMBER_FUZZ_SEED=S draws another series of cases.
"""
import copy
import json
import math
import os
import struct

import numpy as np

DEEP = "\u0000deep\u0000"       # a placeholder replaced by deeply nested brackets
DEEP_LEVELS = 20000


def case_count(default):
    return int(os.environ.get("EMBER_FUZZ_CASES") or default)


def case_seed(default):
    return int(os.environ.get("EMBER_FUZZ_SEED") or default)


INTERESTING_INTS = [0, 1, -1, 2, 3, 7, 8, 255, 256, 65535, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
                    2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, -2**31, -2**63, 10**30]
WEIRD_VALUES = [None, True, False, 0, -1, 1, 3, 2**31, 2**62, 2**63, 2**64, -10**30, 10**30,
                0.0, -0.0, 1e-300, 1e308, float("nan"), float("inf"), float("-inf"), 0.5, -2.5,
                "", "x", "64", "1e-5", "llama", [], [1], [1, "a"], [[[]]], {}, {"a": 1},
                {"rope_type": "llama3"}, DEEP]


# --- JSON --------------------------------------------------------------------------------------
def _paths(node, prefix=()):
    """Every (path, value) in a JSON tree, the root included."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _set(root, path, value):
    node = root
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def _swap_type(rng, value):
    """The same value in another JSON type, or a nearby odd number."""
    if isinstance(value, bool):
        return rng.choice([int(value), str(value).lower(), None])
    if isinstance(value, int):
        return rng.choice([str(value), float(value), -value, value * 2**rng.randrange(1, 64),
                           value - 1, value + 1, 0, [value], {"value": value}, bool(value)])
    if isinstance(value, float):
        return rng.choice([str(value), int(value) if math.isfinite(value) else 0, -value,
                           value * 1e300, float("nan"), [value]])
    if isinstance(value, str):
        return rng.choice([len(value), value * 3, value[:1], value + "\u0000", [value],
                           value.upper(), "../" * 3 + value, "/" + value])
    return rng.choice(WEIRD_VALUES)


def mutate_json(obj, rng):
    """(text, description): `obj` with one to three structural mutations, serialized; or,
    one time in eight, its text with byte-level damage."""
    root = copy.deepcopy(obj)
    done = []
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(root))
        path, value = rng.choice(paths)
        op = rng.randrange(5)
        if not path or op == 0:
            new = rng.choice(WEIRD_VALUES)
            done.append(f"set {list(path)} = {new!r}")
        elif op == 1:
            new = _swap_type(rng, value)
            done.append(f"swap {list(path)}: {value!r} -> {new!r}")
        elif op == 2 and isinstance(root, dict) and len(path) >= 1:
            parent = root
            for p in path[:-1]:
                parent = parent[p]
            if isinstance(parent, dict):
                del parent[path[-1]]
                done.append(f"delete {list(path)}")
                continue
            new = rng.choice(WEIRD_VALUES)
            done.append(f"set {list(path)} = {new!r}")
        elif op == 3 and isinstance(value, (int, float)) and not isinstance(value, bool):
            new = rng.choice(INTERESTING_INTS + [float("nan"), float("inf"), -value, 0])
            done.append(f"number {list(path)}: {value!r} -> {new!r}")
        else:
            new = DEEP
            done.append(f"deep nesting at {list(path)}")
        if not path:
            root = new
        else:
            _set(root, path, new)
    text = json.dumps(root)
    text = text.replace(json.dumps(DEEP), "[" * DEEP_LEVELS + "]" * DEEP_LEVELS)
    if rng.randrange(8) == 0:
        data, how = mutate_bytes(text.encode("utf-8"), rng)
        return data, "; ".join(done) + "; then " + how
    return text.encode("utf-8"), "; ".join(done)


# --- bytes -------------------------------------------------------------------------------------
def mutate_bytes(data, rng, start=0, stop=None):
    """(bytes, description): one to four byte-level mutations inside [start, stop)."""
    b = bytearray(data)
    stop = len(b) if stop is None else min(stop, len(b))
    done = []
    for _ in range(rng.randint(1, 4)):
        if stop <= start:
            break
        pos = rng.randrange(start, stop)
        op = rng.randrange(7)
        if op == 0:
            b[pos] ^= 1 << rng.randrange(8)
            done.append(f"flip bit at {pos}")
        elif op == 1:
            b[pos] = rng.randrange(256)
            done.append(f"byte {pos} = {b[pos]}")
        elif op == 2:
            n = rng.choice([4, 8])
            v = rng.choice(INTERESTING_INTS) % (1 << (8 * n))
            b[pos:pos + n] = v.to_bytes(n, "little")
            done.append(f"u{8 * n} at {pos} = {v}")
        elif op == 3:
            del b[pos:]
            stop = len(b)
            done.append(f"truncate at {pos}")
        elif op == 4:
            junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            b[pos:pos] = junk
            stop = min(len(b), stop + len(junk))
            done.append(f"insert {len(junk)} bytes at {pos}")
        elif op == 5:
            n = rng.randint(1, 16)
            del b[pos:pos + n]
            stop = min(stop, len(b))
            done.append(f"remove {n} bytes at {pos}")
        else:
            n = rng.randint(1, 32)
            b[pos:pos] = b[pos:pos + n]
            stop = min(len(b), stop + n)
            done.append(f"duplicate {n} bytes at {pos}")
    return bytes(b), "; ".join(done)


# --- safetensors -------------------------------------------------------------------------------
def safetensors_bytes(header, data):
    text = json.dumps(header, allow_nan=True)
    text = text.replace(json.dumps(DEEP), "[" * DEEP_LEVELS + "]" * DEEP_LEVELS)
    raw = text.encode("utf-8")
    raw += b" " * (-(8 + len(raw)) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def split_safetensors(blob):
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


# --- GGUF --------------------------------------------------------------------------------------
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B",
           U64: "Q", I64: "q", F64: "d"}


def gguf_value(vtype, value):
    if vtype in _SCALAR:
        return struct.pack("<" + _SCALAR[vtype], value)
    if vtype == STRING:
        raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
        return struct.pack("<Q", len(raw)) + raw
    etype, items = value
    return struct.pack("<IQ", etype, len(items)) + b"".join(gguf_value(etype, v) for v in items)


def gguf_bytes(kvs, tensors, alignment=32):
    """A GGUF v3 file: kvs [(key, type, value)], tensors [(name, ne, ggml_type, bytes)]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, vtype, value in kvs:
        out += gguf_value(STRING, key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
    offset, offsets = 0, []
    for _, _, _, data in tensors:
        offsets.append(offset)
        offset += -(-len(data) // alignment) * alignment
    for (name, ne, gtype, _), off in zip(tensors, offsets, strict=True):
        out += gguf_value(STRING, name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, gtype, off)
    out += bytes(-len(out) % alignment)
    for i, (_, _, _, data) in enumerate(tensors):
        out += data
        if i + 1 < len(tensors):
            out += bytes(-len(data) % alignment)
    return bytes(out)


# A llama-architecture model small enough to load and run in milliseconds: hidden 32 (one
# Q8_0 block per row), 4 heads of 8 sharing 2 kv heads, one layer, 12 SentencePiece pieces.
GGUF_HIDDEN, GGUF_FFN, GGUF_HEADS, GGUF_KV = 32, 64, 4, 2
GGUF_PIECES = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "c", "\u2581a", "ab", "bc", "abc",
               "\u2581abc"]


def _q8_0(w):
    """Q8_0 blocks of a float matrix whose rows are multiples of 32."""
    blocks = w.reshape(-1, 32)
    scale = np.maximum(np.abs(blocks).max(-1), 1e-8) / 127.0
    q = np.rint(blocks / scale[:, None]).clip(-127, 127).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), np.uint8)
    out[:, :2] = scale.astype(np.float16).reshape(-1, 1).view(np.uint8)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def tiny_llama_gguf(seed=0):
    """(kvs, tensors) of a valid tiny llama GGUF, to mutate and then write with gguf_bytes."""
    rng = np.random.default_rng(seed)
    h, f, nh, nkv = GGUF_HIDDEN, GGUF_FFN, GGUF_HEADS, GGUF_KV
    hd = h // nh
    vocab = len(GGUF_PIECES)

    def f32(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    kvs = [("general.architecture", STRING, "llama"),
           ("general.alignment", U32, 32),
           ("llama.block_count", U32, 1),
           ("llama.context_length", U32, 64),
           ("llama.embedding_length", U32, h),
           ("llama.feed_forward_length", U32, f),
           ("llama.attention.head_count", U32, nh),
           ("llama.attention.head_count_kv", U32, nkv),
           ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
           ("llama.rope.freq_base", F32, 10000.0),
           ("llama.rope.dimension_count", U32, hd),
           ("llama.attention.key_length", U32, hd),
           ("tokenizer.ggml.model", STRING, "llama"),
           ("tokenizer.ggml.tokens", ARRAY, (STRING, GGUF_PIECES)),
           ("tokenizer.ggml.scores", ARRAY, (F32, [-float(i) for i in range(vocab)])),
           ("tokenizer.ggml.token_type", ARRAY, (I32, [2, 3, 3] + [1] * (vocab - 3))),
           ("tokenizer.ggml.bos_token_id", U32, 1),
           ("tokenizer.ggml.eos_token_id", U32, 2),
           ("tokenizer.ggml.add_bos_token", BOOL, 1)]
    # ne is ggml's order: the contiguous axis first.
    tensors = [("token_embd.weight", [h, vocab], 0, f32(vocab, h).tobytes()),
               ("blk.0.attn_norm.weight", [h], 0, (1 + f32(h)).tobytes()),
               ("blk.0.attn_q.weight", [h, nh * hd], 8, _q8_0(f32(nh * hd, h))),
               ("blk.0.attn_k.weight", [h, nkv * hd], 8, _q8_0(f32(nkv * hd, h))),
               ("blk.0.attn_v.weight", [h, nkv * hd], 0, f32(nkv * hd, h).tobytes()),
               ("blk.0.attn_output.weight", [nh * hd, h], 8, _q8_0(f32(h, nh * hd))),
               ("blk.0.ffn_norm.weight", [h], 0, (1 + f32(h)).tobytes()),
               ("blk.0.ffn_gate.weight", [h, f], 8, _q8_0(f32(f, h))),
               ("blk.0.ffn_up.weight", [h, f], 0, f32(f, h).tobytes()),
               ("blk.0.ffn_down.weight", [f, h], 8, _q8_0(f32(h, f))),
               ("output_norm.weight", [h], 0, (1 + f32(h)).tobytes()),
               ("output.weight", [h, vocab], 0, f32(vocab, h).tobytes())]
    return kvs, tensors


_TYPE_SWAPS = [(U8, 7), (I8, -1), (U16, 0), (I16, -300), (U32, 0), (U32, 2**32 - 1), (I32, -1),
               (I32, -2**31), (F32, float("nan")), (F32, float("inf")), (F32, 0.0), (F32, -1.0),
               (F32, 3.5), (BOOL, 1), (STRING, "32"), (STRING, ""), (STRING, b"\xff\xfe"),
               (U64, 2**63), (U64, 2**64 - 1), (I64, -2**63), (F64, float("nan")),
               (F64, 1e300), (ARRAY, (U32, [])), (ARRAY, (U32, [0, 5])),
               (ARRAY, (STRING, ["a", "b"])), (ARRAY, (ARRAY, [(I32, [1])]))]


def mutate_gguf_fields(kvs, tensors, rng):
    """(kvs, tensors, description): one to three metadata or tensor-info mutations."""
    kvs = list(kvs)
    tensors = list(tensors)
    done = []
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(6)
        if op <= 2 and kvs:
            i = rng.randrange(len(kvs))
            key, vtype, value = kvs[i]
            if op == 0:
                new = rng.choice(_TYPE_SWAPS)
            elif op == 1 and vtype in _SCALAR and vtype not in (F32, F64, BOOL):
                bits = 8 * struct.calcsize(_SCALAR[vtype])
                signed = _SCALAR[vtype].islower()
                lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if signed else (0, (1 << bits) - 1)
                new = (vtype, min(hi, max(lo, rng.choice(INTERESTING_INTS))))
            elif op == 1 and vtype == ARRAY:
                etype, items = value
                new = (ARRAY, (etype, items[:rng.randrange(len(items) + 1)]))
            else:
                new = rng.choice(_TYPE_SWAPS)
            kvs[i] = (key, *new)
            done.append(f"{key}: {vtype} {value!r:.40} -> {new[0]} {new[1]!r:.40}")
        elif op == 3 and kvs:
            i = rng.randrange(len(kvs))
            done.append(f"delete {kvs[i][0]}")
            del kvs[i]
        elif op == 4 and tensors:
            i = rng.randrange(len(tensors))
            name, ne, gtype, data = tensors[i]
            ne = list(ne)
            j = rng.randrange(len(ne))
            ne[j] = rng.choice([0, 1, ne[j] * 2, ne[j] // 2, 2**31, 2**62])
            tensors[i] = (name, ne, gtype, data)
            done.append(f"tensor {name} ne -> {ne}")
        else:
            i = rng.randrange(len(tensors))
            name, ne, gtype, data = tensors[i]
            new = rng.choice([0, 1, 8, 24, 26, 30, 39, 99])
            tensors[i] = (name, ne, new, data)
            done.append(f"tensor {name} type {gtype} -> {new}")
    return kvs, tensors, "; ".join(done)


__all__ = ["case_count", "case_seed", "gguf_bytes", "mutate_bytes", "mutate_gguf_fields", "mutate_json",
           "safetensors_bytes", "split_safetensors", "tiny_llama_gguf"]
