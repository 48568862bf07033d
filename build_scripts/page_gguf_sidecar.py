"""What the generation page needs beside a GGUF file, read from it natively at build time.

ember's GGUF reader and its config and tokenizer converters use numpy, which a Pyodide
page does not have; so build_web reads the header here, once, and writes beside the GGUF
in the bundle:

    page-model.json   {"gguf": file name, "config": LlamaConfig fields,
                       "chat_template", "bos_token", "eos_token",
                       "tensors": {Hugging Face name: {"offset", "nbytes", "shape", "type"}}}
    tokenizer.json    the tokenizer the GGUF metadata describes

The page (ember.web.page_gguf) fetches the GGUF itself into one JS ArrayBuffer and takes
each tensor's bytes from it at these offsets: the weights are the file's own bytes.
"""

import dataclasses
import json
from pathlib import Path

SIDECAR = "page-model.json"
TOKENIZER = "tokenizer.json"


def write(gguf_path, out_dir):
    """Write SIDECAR and TOKENIZER for `gguf_path` into `out_dir`; returns their names."""
    from ember.io.gguf import GGUFFile
    from ember.models.gguf_llama import GGUFSource, config_from_gguf, gguf_name
    from ember.models.gguf_tokenizer import tokenizer_json_from_metadata

    out_dir = Path(out_dir)
    with GGUFFile(gguf_path) as f:
        cfg = config_from_gguf(f)
        config = {
            k: v
            for k, v in dataclasses.asdict(cfg).items()
            if k not in ("extra", "source") and v is not None
        }
        if cfg.extra:  # e.g. llama3's per-frequency rope factors: not carried to the page
            raise SystemExit(
                f"build_web: {gguf_path}: config extras {sorted(cfg.extra)} are not "
                f"supported by the generation page"
            )
        md = f.metadata
        tokens = md.get("tokenizer.ggml.tokens") or []

        def token(key):
            i = md.get(key)
            return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else ""

        tensors = {}
        for hf in sorted(GGUFSource(f).keys()):
            info = f.tensors[gguf_name(hf)]
            tensors[hf] = {
                "offset": info.offset,
                "nbytes": info.nbytes,
                "shape": list(info.shape),
                "type": int(info.ggml_type),
            }
        sidecar = {
            "gguf": Path(gguf_path).name,
            "config": config,
            "chat_template": md.get("tokenizer.chat_template"),
            "bos_token": token("tokenizer.ggml.bos_token_id"),
            "eos_token": token("tokenizer.ggml.eos_token_id"),
            "tensors": tensors,
        }
        tokenizer = tokenizer_json_from_metadata(md, f.path)
        tokenizer.pop("_eos_token_id", None)
    (out_dir / SIDECAR).write_text(json.dumps(sidecar, indent=1) + "\n")
    (out_dir / TOKENIZER).write_text(json.dumps(tokenizer, ensure_ascii=False))
    return [SIDECAR, TOKENIZER]
