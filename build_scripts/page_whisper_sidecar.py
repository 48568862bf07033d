"""What the transcription page needs beside a CTranslate2 Whisper model.bin, read from it
natively at build time.

ember's CTranslate2 reader maps the file onto Hugging Face's names with numpy views, which
a Pyodide page does not have; so build_web reads the file here, once, and writes beside
model.bin in the bundle:

    page-model.json   {"model": "model.bin", "config": WhisperConfig fields,
                       "multilingual": bool,
                       "tensors": {Hugging Face name: {"offset", "nbytes", "shape", "dtype"}}}

Each entry is a contiguous run of the file's bytes (the fused q/k/v and k/v weights of
CTranslate2 are row blocks, so their parts are runs too): the page (ember.web.page_whisper)
fetches model.bin into one JS ArrayBuffer and uploads each tensor from a view of it.
"""

import dataclasses
import json
import os
from pathlib import Path

SIDECAR = "page-model.json"
MODEL = "model.bin"


def _byte_runs(f, tensors):
    """{name: (offset, nbytes)} of each numpy view in `tensors`, which all view `f`'s
    memory map: a view's address minus the map's (found from a variable's known offset)."""
    first = next(iter(f.variables.values()))
    base = f.array(first.name).__array_interface__["data"][0] - first.offset
    runs = {}
    for name, view in tensors.items():
        if not view.flags.c_contiguous:
            raise SystemExit(f"build_web: {f.path}: {name} is not a contiguous run of the file")
        offset = view.__array_interface__["data"][0] - base
        if not 0 <= offset <= f.size - view.nbytes:
            raise SystemExit(f"build_web: {f.path}: {name} does not lie inside the file")
        runs[name] = (offset, view.nbytes)
    return runs


def write(model_dir, out_dir):
    """Write SIDECAR for the CTranslate2 Whisper directory `model_dir` into `out_dir`;
    returns [SIDECAR]."""
    from ember.io.ctranslate2 import DTYPES, CTranslate2File, whisper_hf_tensors
    from ember.models import whisper_config

    path = os.path.join(model_dir, MODEL)
    cfg_path = os.path.join(model_dir, "config.json")
    ct2_config = json.loads(Path(cfg_path).read_text()) if os.path.isfile(cfg_path) else {}
    names = {np_dtype: name for name, np_dtype in DTYPES.values()}
    with CTranslate2File(path) as f:
        tensors = whisper_hf_tensors(f)
        cfg = whisper_config.from_ct2(f, tensors, ct2_config, path)
        table = {}
        for name, (offset, nbytes) in sorted(_byte_runs(f, tensors).items()):
            view = tensors[name]
            table[name] = {
                "offset": offset,
                "nbytes": nbytes,
                "shape": list(view.shape),
                "dtype": names[view.dtype.str.replace("|", "")],
            }
        del tensors, view  # the views must go before the map closes
    config = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "source"}
    sidecar = {
        "model": MODEL,
        "config": config,
        "multilingual": cfg.is_multilingual,
        "tensors": table,
    }
    Path(out_dir, SIDECAR).write_text(json.dumps(sidecar, indent=1) + "\n")
    return [SIDECAR]
