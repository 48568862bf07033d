"""Does llama.cpp read the GGUF files ember writes? Greedy tokens of llama.cpp next to ember's.

    python benchmarks/llamacpp_roundtrip.py [--gguf SRC.gguf] [--types f32,f16,Q8_0,Q4_K_M]
                                            [--tokens 32] [--random] [--keep DIR] [--verbose]

The Hugging Face directory is built without ember, by transformers:
  - with --gguf (a Llama-family llama.cpp file, e.g. SmolLM2-135M-Instruct.Q4_1.gguf):
    transformers dequantizes its weights and writes config.json, model.safetensors (f32)
    and tokenizer.json, i.e. a real model's weights as a Hugging Face checkpoint;
  - with --random: a small random LlamaForCausalLM (seeded) with a BPE tokenizer trained
    by the `tokenizers` package (greedy ties are likelier on random weights; the margin
    printed for each step says how close they came).
Then, as a user would, the `ember` CLI writes one GGUF per type (`ember convert --dtype`
for f32/f16/bf16, `ember quantize --type` for the ggml types), and each file is run by
ember (load_gguf_model + greedy generate) and by llama.cpp (llama-cpp-python's Llama:
the prompt evaluated, then the argmax of its logits fed back, N times) on the same
prompt ids. Prints both token lists and a verdict per type; exit status 1 if any is
DIFFERENT.

On quantized files llama.cpp does not compute what ember does: its quantized matmuls round
the activations to 8 bits (ember and transformers multiply by the dequantized weights in
f32), so greedy tokens part ways after a few steps on a real model. For those files the
check is then whether llama.cpp treats ember's file as its own: llama.cpp's quantizer
(llama_model_quantize) writes the same type from the f32 file, the tensors are compared
byte for byte, and llama.cpp's tokens on both files must be equal ("same as llama.cpp's
own"). Found this way: ember's Q4_K and Q6_K blocks are llama.cpp's but for a few blocks
in a thousand, so Q4_K_M is reported DIFFERENT.

llama-cpp-python is too heavy for `make test`: `make peers` installs it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

FLOAT_TYPES = {"f32", "f16", "bf16"}
PROMPT = "The three primary colors are"


def hf_dir_from_gguf(gguf_path, out):
    """transformers' own GGUF reader (no ember) -> a Hugging Face directory."""
    import transformers
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = os.path.split(os.path.abspath(gguf_path))
    parsed = load_gguf_checkpoint(gguf_path, return_tensors=False)
    config = transformers.AutoConfig.for_model(**parsed["config"])
    model = transformers.AutoModelForCausalLM.from_config(config)
    tensors = load_gguf_checkpoint(gguf_path, return_tensors=True, model_to_load=model)["tensors"]
    result = model.load_state_dict(tensors, strict=False)
    missing = [
        k for k in result.missing_keys if not (k == "lm_head.weight" and config.tie_word_embeddings)
    ]
    if missing or result.unexpected_keys:
        raise SystemExit(
            f"{gguf_path}: transformers left {missing} unset, {result.unexpected_keys} unused"
        )
    model.save_pretrained(out)
    transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)
    return out


def random_hf_dir(out):
    """A seeded random Llama (GQA, untied head) and a small byte-level BPE tokenizer."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = [PROMPT, "red green blue yellow", "the quick brown fox jumps over the lazy dog"] * 20
    tok.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=["<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=fast.vocab_size if hasattr(fast, "vocab_size") else len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        initializer_range=0.2,  # wider logits than the default 0.02: fewer near-ties
    )
    transformers.LlamaForCausalLM(config).eval().save_pretrained(out)
    return out


def ember_cli(*args):
    cmd = [sys.executable, "-m", "ember.cli", *args]
    print("$ ember " + " ".join(args), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    out = (done.stdout + done.stderr).strip()
    if out:
        print("  " + out.replace("\n", "\n  "))
    if done.returncode != 0:
        raise SystemExit(f"ember {args[0]} failed (exit {done.returncode})")


def write_gguf(hf_dir, kind, path):
    if kind in FLOAT_TYPES:
        ember_cli("convert", hf_dir, path, "--dtype", kind, "--quiet", "--force")
    else:
        ember_cli("quantize", hf_dir, path, "--type", kind, "--quiet", "--force")


def prompt_ids(hf_dir):
    from ember.tokenizers import Tokenizer

    return Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json")).encode(PROMPT).ids


def ember_greedy(path, ids, n):
    from ember.generation import generate
    from ember.models.gguf_llama import load_gguf_model

    model = load_gguf_model(path)
    return generate(model, ids, max_new_tokens=n, stop_token_ids=())


def llamacpp_greedy(path, ids, n, verbose):
    """The argmax of llama.cpp's logits, fed back n times; the top-2 margin of each step."""
    from llama_cpp import Llama

    # logits_all: Llama.eval keeps each position's logits in .scores only then (otherwise
    # the logits stay inside its sampler).
    llm = Llama(
        model_path=path,
        n_ctx=len(ids) + n + 8,
        n_threads=2,
        n_batch=64,
        logits_all=True,
        verbose=verbose,
    )
    llm.eval(ids)
    tokens, margins = [], []
    for _ in range(n):
        logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        top2 = np.argsort(logits)[-2:]
        tokens.append(int(top2[1]))
        margins.append(float(logits[top2[1]] - logits[top2[0]]))
        llm.eval([tokens[-1]])
    llm.close()
    return tokens, margins


# ember's quantize types as llama.cpp's ftypes (pure: every matrix at that type, as ember's
# plain types store them; the _M presets are llama.cpp's mixes).
LLAMACPP_FTYPES = {
    "Q4_0": ("Q4_0", True),
    "Q4_1": ("Q4_1", True),
    "Q5_0": ("Q5_0", True),
    "Q5_1": ("Q5_1", True),
    "Q8_0": ("Q8_0", True),
    "Q2_K": ("Q2_K", True),
    "Q3_K": ("Q3_K_M", True),
    "Q4_K": ("Q4_K_M", True),
    "Q5_K": ("Q5_K_M", True),
    "Q6_K": ("Q6_K", True),
    "Q4_K_M": ("Q4_K_M", False),
    "Q5_K_M": ("Q5_K_M", False),
}


def llamacpp_quantize(src, out, kind):
    """llama.cpp's own quantizer (llama_model_quantize) on src; 0 when it succeeded."""
    import ctypes

    import llama_cpp

    ftype, pure = LLAMACPP_FTYPES[kind]
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.pure = pure
    params.nthread = 2
    return llama_cpp.llama_model_quantize(src.encode(), out.encode(), ctypes.byref(params))


def in_child(job, *args):
    """A llama.cpp job (WORKERS) in a fresh interpreter: llama.cpp aborts the process on a
    file it cannot run, and that must end in a verdict, not take this script down. Its
    result, or None and the reason."""
    done = subprocess.run(
        [sys.executable, __file__, "--worker", job, json.dumps(args)],
        capture_output=True,
        text=True,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1]), None
    log = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("#")]
    return None, f"exit {done.returncode}: " + " | ".join(log[:3])


WORKERS = {"greedy": llamacpp_greedy, "quantize": llamacpp_quantize}


def same_tensors(a, b):
    """How many tensors of GGUF a have the same name, type, shape and bytes in b; of how many."""
    import gguf

    theirs = {t.name: t for t in gguf.GGUFReader(b).tensors}
    ours = gguf.GGUFReader(a).tensors
    equal = 0
    for t in ours:
        u = theirs.get(t.name)
        equal += bool(
            u is not None
            and u.tensor_type == t.tensor_type
            and list(u.shape) == list(t.shape)
            and np.array_equal(np.asarray(u.data).view(np.uint8), np.asarray(t.data).view(np.uint8))
        )
    return equal, len(ours)


def compare(path, kind, ids, n, verbose, f32_path):
    """The verdict for one file: "equal" (ember's greedy tokens are llama.cpp's), "same as
    llama.cpp's own" (a quantized file whose tensors are byte for byte those llama.cpp's
    quantizer writes from the f32 file, on which llama.cpp gives the same tokens as on
    ember's: the tokens then differ by llama.cpp's arithmetic, which rounds activations to
    8 bits for quantized matmuls, not by the file), or "DIFFERENT"."""
    ours = ember_greedy(path, ids, n)
    print(f"[{kind}] {os.path.basename(path)} ({os.path.getsize(path) / 2**20:.1f} MiB)")
    print(f"  ember    : {ours}")
    result, failure = in_child("greedy", path, ids, n, verbose)
    if result is None:
        print(f"  llama.cpp FAILED on this file ({failure})")
        return "DIFFERENT"
    theirs, margins = result
    print(f"  llama.cpp: {theirs}")
    if ours == theirs:
        print(
            f"  equal: {n}/{n} tokens (llama.cpp's smallest top-2 logit margin {min(margins):.3f})"
        )
        return "equal"
    pairs = enumerate(zip(ours, theirs, strict=False))
    first = next((i for i, (a, b) in pairs if a != b), min(len(ours), len(theirs)))
    print(
        f"  tokens differ from step {first} (llama.cpp's top-2 margin there {margins[first]:.3f})"
    )
    if kind not in LLAMACPP_FTYPES:
        return "DIFFERENT"
    own = os.path.join(os.path.dirname(path), f"llamacpp-{kind}.gguf")
    rc, failure = in_child("quantize", f32_path, own, kind)
    if rc != 0:
        print(f"  llama.cpp's quantizer failed ({failure or rc})")
        return "DIFFERENT"
    equal, total = same_tensors(path, own)
    own_tokens, _ = in_child("greedy", own, ids, n, verbose)
    same_run = own_tokens is not None and own_tokens[0] == theirs
    print(
        f"  llama.cpp's own quantizer on the f32 file: {equal}/{total} tensors byte-identical; "
        f"llama.cpp's tokens on its own file {'the same' if same_run else 'DIFFERENT'}"
    )
    return "same as llama.cpp's own" if equal == total and same_run else "DIFFERENT"


def main():
    if sys.argv[1:2] == ["--worker"]:  # the child of in_child
        print(json.dumps(WORKERS[sys.argv[2]](*json.loads(sys.argv[3]))))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--gguf", help="a Llama-family llama.cpp GGUF to build the HF directory from")
    src.add_argument("--random", action="store_true", help="a small random Llama instead")
    p.add_argument(
        "--types", default="f32,f16,bf16,Q8_0,Q4_K_M", help="comma-separated output types"
    )
    p.add_argument("--tokens", type=int, default=32, help="greedy tokens to compare")
    p.add_argument(
        "--keep",
        help="write the HF directory and GGUFs here (default: a temp dir); "
        "an HF directory already there is reused",
    )
    p.add_argument("--verbose", action="store_true", help="show llama.cpp's loading log")
    args = p.parse_args()
    try:
        import llama_cpp
    except ImportError:
        raise SystemExit("llama-cpp-python is not installed: run `make peers`") from None

    work = args.keep or tempfile.mkdtemp(prefix="ember-llamacpp-")
    hf = os.path.join(work, "hf")
    if not os.path.isfile(os.path.join(hf, "config.json")):  # --keep DIR from an earlier run
        (random_hf_dir if args.random else lambda out: hf_dir_from_gguf(args.gguf, out))(hf)
    with open(os.path.join(hf, "config.json")) as fh:
        cfg = json.load(fh)
    ids = prompt_ids(hf)
    print(
        f"HF directory {hf}: {cfg['model_type']}, {cfg['num_hidden_layers']} layers, "
        f"hidden {cfg['hidden_size']}, vocab {cfg['vocab_size']}; llama-cpp-python "
        f"{llama_cpp.__version__}\nprompt {PROMPT!r} -> ids {ids}"
    )
    kinds = sorted(args.types.split(","), key=lambda k: k != "f32")  # f32 first
    f32_path = os.path.join(work, "model-f32.gguf")
    if "f32" not in kinds and any(k not in FLOAT_TYPES for k in kinds):
        write_gguf(hf, "f32", f32_path)  # what llama.cpp's quantizer starts from
    verdicts = {}
    for kind in kinds:
        path = os.path.join(work, f"model-{kind}.gguf")
        write_gguf(hf, kind, path)
        verdicts[kind] = compare(path, kind, ids, args.tokens, args.verbose, f32_path)
    print("verdict: " + ", ".join(f"{k} {v}" for k, v in verdicts.items()))
    return 0 if "DIFFERENT" not in verdicts.values() else 1


if __name__ == "__main__":
    sys.exit(main())
