"""How far ember's quantized SmolLM2-135M-Instruct (Q4_1 GGUF, weights kept quantized) is
from transformers on the same file dequantized to float: greedy-token agreement and the
largest logit error relative to the logits' spread (max - min of the reference logits).

    python benchmarks/smollm2_parity.py [--device cpu|wgpu] [--tokens 32]

Prints figures; never fails on them. The file comes from ember.packaged (fetched on first
use). Teacher-forced: ember reads transformers' greedy sequence in one forward, so a
position's argmax is compared on the same history; free-running: both decode greedily and
the common prefix is counted.
"""

import argparse
import os
import time

import numpy as np

PROMPTS = ("The capital of France is", "def fibonacci(n):", "Once upon a time, a small robot")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--tokens", type=int, default=32)
    args = p.parse_args(argv)

    import ember
    import torch
    from ember import packaged
    from ember.generation import generate
    from ember.models.gguf_llama import load_gguf_model, tokenizer_from_gguf
    from transformers import AutoModelForCausalLM

    path = packaged.file("smollm2-135m-instruct")
    hf = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32
    ).eval()
    tok = tokenizer_from_gguf(path)
    t0 = time.perf_counter()
    model = load_gguf_model(path, device=args.device)  # quantized
    print(f"ember quantized load on {args.device}: {time.perf_counter() - t0:.1f} s")
    worst, same, total, prefix = 0.0, 0, 0, []
    for text in PROMPTS:
        ids = list(tok.encode(text, add_special_tokens=False).ids)
        with torch.no_grad():
            seq = hf.generate(
                torch.tensor([ids]),
                max_new_tokens=args.tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=2,
            )[0].tolist()
            want = hf(torch.tensor([seq])).logits[0].numpy()
        got = model(ember.tensor([seq], dtype="i32", device=args.device)).to("cpu").numpy()[0]
        rel = float(np.abs(got - want).max() / (want.max() - want.min()))
        worst = max(worst, rel)
        gen = slice(len(ids) - 1, len(seq) - 1)  # positions that predict the new tokens
        same += int((got[gen].argmax(-1) == want[gen].argmax(-1)).sum())
        total += args.tokens
        free = generate(model, ids, max_new_tokens=args.tokens, stop_token_ids=())
        n = next(
            (i for i, (a, b) in enumerate(zip(free, seq[len(ids) :], strict=True)) if a != b),
            len(free),
        )
        prefix.append(n)
        print(
            f"{text!r}: max |logit error| / spread {rel:.2e}; free-running common prefix "
            f"{n}/{args.tokens}"
        )
    print(
        f"teacher-forced greedy agreement {same}/{total} ({100 * same / total:.1f}%); "
        f"largest logit error / spread {worst:.2e}; free-running common prefixes {prefix}"
    )


if __name__ == "__main__":
    main()
