"""An all-MiniLM-L6-v2-shaped model with random weights, for minilm.py on the lent machine.

    python benchmarks/gpu_check_minilm.py DEST [--source DIR]

The real weights (87 MiB) do not fit the 64 MiB a device call carries, and a throughput
figure does not depend on the weights' values: DEST gets the real model's config, tokenizer
and sentence-transformers files from --source (default: .gpucheck/minilm, which
benchmarks/gpu_check_prepare.sh fills, else ember's cached model) and a model.safetensors
of transformers' BertModel initialised with seed 0. DEST must not exist yet.
"""

import argparse
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARRIED = os.path.join(ROOT, ".gpucheck", "minilm")
# Everything but the weights: what ember's embedder and transformers' tokenizer read.
FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
)


def default_source():
    if os.path.isfile(os.path.join(CARRIED, "config.json")):
        return CARRIED
    from ember.hub import default_model_dir

    return default_model_dir()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest")
    ap.add_argument("--source", default=None)
    args = ap.parse_args()
    source = args.source or default_source()
    missing = [f for f in FILES if not os.path.isfile(os.path.join(source, f))]
    if missing:
        sys.exit(f"gpu_check_minilm: {source} lacks {', '.join(missing)}")
    if os.path.exists(args.dest):
        sys.exit(f"gpu_check_minilm: {args.dest} exists already; give a new folder")

    import torch
    import transformers
    from safetensors.torch import save_file

    staging = args.dest + ".partial"
    for name in FILES:
        os.makedirs(os.path.dirname(os.path.join(staging, name)), exist_ok=True)
        shutil.copyfile(os.path.join(source, name), os.path.join(staging, name))
    torch.manual_seed(0)
    config = transformers.BertConfig.from_pretrained(staging)
    model = transformers.BertModel(config).eval()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(staging, "model.safetensors"), metadata={"format": "pt"})
    os.rename(staging, args.dest)
    n = sum(v.numel() for v in state.values())
    print(f"{args.dest}: random MiniLM-shaped BERT, {n / 1e6:.1f}M parameters, from {source}")


if __name__ == "__main__":
    main()
