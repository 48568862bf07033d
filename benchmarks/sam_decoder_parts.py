"""Where a SAM decoder pass (prompt encoder + mask decoder, as benchmarks/sam.py times it)
spends its time: ember cpu and transformers' SamModel on torch CPU in ONE process,
interleaved, with a per-part breakdown of both and ember's backend calls per prompt.

    python benchmarks/sam_decoder_parts.py --model DIR [--rounds 5] [--threads 2]
                                           [--only torch|ember] [--no-parts]

DIR is a model benchmarks/sam.py built (its --work folder's vit-b-1024). The image
embedding is random (the decoder's cost does not depend on its values); ember gets it
prepared once (SamModel.prepare_image, as sam.py and the predictor use it;
SAM_PARTS_UNPREPARED=1: the plain embedding). Figures are the
median over rounds of process CPU time (time.process_time: all threads), the calling
thread's CPU time (time.thread_time) and wall time;
parts are timed by wrapping the modules' forwards and functions (ember) and forward hooks
(torch), so a part's figure includes its children (ember's attentions are also inside
its two-way blocks).
Under load, prefer the main-thread CPU column: on a quiet machine the wall time is about
it, while process CPU adds what the other threads spent, spinning included.
"""

import argparse
import collections
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def now():
    """(process CPU time, this thread's CPU time, wall time) in seconds."""
    return time.process_time(), time.thread_time(), time.perf_counter()


class Clock:
    """Per-label CPU and wall seconds, summed within a pass."""

    def __init__(self):
        self.cpu, self.main, self.wall = (collections.Counter() for _ in range(3))
        self.stack = []

    def start(self, label):
        self.stack.append((label, *now()))

    def stop(self):
        label, c, m, w = self.stack.pop()
        c1, m1, w1 = now()
        self.cpu[label] += c1 - c
        self.main[label] += m1 - m
        self.wall[label] += w1 - w

    def wrap(self, label, fn):
        def timed(*a, **k):
            self.start(label)
            try:
                return fn(*a, **k)
            finally:
                self.stop()

        return timed


def ember_parts(model, clock):
    """Wrap ember's decoder parts (instance forwards, module functions) with the clock."""
    from ember.models import sam_mask_decoder as smd

    md = model.mask_decoder
    pairs = [("prompt encoder", model.prompt_encoder)]
    pairs += [(f"two-way block {i}", layer) for i, layer in enumerate(md.layers)]
    pairs += [
        ("final layer norm", md.layer_norm_final_attn),
        ("upscale layer norm", md.upscale_layer_norm),
        ("iou head", md.iou_prediction_head),
    ]
    pairs += [("hypernetwork mlps", mlp) for mlp in md.output_hypernetworks_mlps]
    for label, mod in pairs:
        mod.forward = clock.wrap(label, mod.forward)
    final = md.final_attn_token_to_image
    final.attend_to_image = clock.wrap("final attention", final.attend_to_image)
    for layer in md.layers:  # inside the blocks' figures
        to_image, to_token = layer.cross_attn_token_to_image, layer.cross_attn_image_to_token
        to_image.attend_to_image = clock.wrap("token-to-image attention", to_image.attend_to_image)
        to_token.attend_from_image = clock.wrap(
            "image-to-token attention", to_token.attend_from_image
        )
    smd.upscale2x = clock.wrap("upscale convtranspose (+gelu 2)", smd.upscale2x)
    smd.interleave = clock.wrap("interleave", smd.interleave)


def torch_parts(model, clock):
    md = model.mask_decoder
    pairs = [
        ("prompt encoder", model.prompt_encoder),
        ("image pe grid", model.shared_image_embedding),
    ]
    pairs += [(f"two-way block {i}", layer) for i, layer in enumerate(md.transformer.layers)]
    pairs += [
        ("final attention", md.transformer.final_attn_token_to_image),
        ("final layer norm", md.transformer.layer_norm_final_attn),
        ("upscale convtranspose 1", md.upscale_conv1),
        ("upscale convtranspose 2", md.upscale_conv2),
        ("upscale layer norm", md.upscale_layer_norm),
        ("gelu", md.activation),
        ("iou head", md.iou_prediction_head),
    ]
    pairs += [("hypernetwork mlps", mlp) for mlp in md.output_hypernetworks_mlps]
    for label, mod in pairs:
        mod.register_forward_pre_hook(lambda m, a, label=label: clock.start(label))
        mod.register_forward_hook(lambda m, a, o: clock.stop())


def count_backend_calls(backend):
    """Wrap the backend's public methods: a Counter of calls by method name."""
    calls = collections.Counter()
    for name in dir(type(backend)):
        if name.startswith("_"):
            continue
        fn = getattr(backend, name)
        if not callable(fn):
            continue

        def counted(*a, _fn=fn, _name=name, **k):
            calls[_name] += 1
            return _fn(*a, **k)

        setattr(backend, name, counted)
    return calls


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-parts", action="store_true", help="totals only (no wrappers)")
    p.add_argument("--only", choices=("torch", "ember"), help="time one engine alone")
    args = p.parse_args()
    os.environ.setdefault("EMBER_CPU_THREADS", str(args.threads))
    import ember
    import numpy as np
    import torch
    import transformers
    from ember.models.sam import SamModel

    sys.path.insert(0, HERE)
    from sam import prompts

    torch.set_num_threads(args.threads)
    tmodel = transformers.SamModel.from_pretrained(args.model).eval()
    emodel = SamModel.from_pretrained(args.model)
    size = tmodel.config.vision_config.image_size
    rng = np.random.default_rng(0)
    emb_host = rng.standard_normal((1, 256, 64, 64), dtype=np.float32)
    temb, eemb = torch.from_numpy(emb_host), ember.tensor(emb_host)
    if os.environ.get("SAM_PARTS_UNPREPARED") != "1":  # as the predictor and sam.py run it
        eemb = emodel.prepare_image(eemb)

    def run_torch(prompt):
        with torch.inference_mode():
            out = tmodel(image_embeddings=temb, **{k: torch.tensor(v) for k, v in prompt.items()})
        return out.pred_masks.numpy(), out.iou_scores.numpy()

    def run_ember(prompt):
        masks, iou = emodel.predict_masks(eemb, **prompt)
        return masks.numpy(), iou.numpy()

    clocks = {"torch": Clock(), "ember": Clock()}
    if not args.no_parts:
        torch_parts(tmodel, clocks["torch"])
        ember_parts(emodel, clocks["ember"])
    runs = {"torch": run_torch, "ember": run_ember}
    if args.only:
        runs = {args.only: runs[args.only]}
    for name, prompt in prompts(size).items():
        mt, it = run_torch(prompt)
        me, ie = run_ember(prompt)
        for fn in runs.values():  # a second warm-up pass of what is timed
            fn(prompt)
        print(
            f"{name}: max |masks diff| {np.abs(mt - me).max():.1e}, |iou diff| "
            f"{np.abs(it - ie).max():.1e}"
        )
        backend = emodel.device.backend
        calls = count_backend_calls(backend) if name == "point" else None
        if calls is not None:
            run_ember(prompt)
            total = sum(calls.values())
            top = ", ".join(f"{k} {v}" for k, v in calls.most_common(8))
            print(f"  ember backend calls per {name} prompt: {total} ({top})")
        totals = {e: ([], [], []) for e in runs}
        parts = {e: collections.defaultdict(lambda: ([], [], [])) for e in runs}
        for _ in range(args.rounds):
            for engine, fn in runs.items():
                clock = clocks[engine]
                for counter in (clock.cpu, clock.main, clock.wall):
                    counter.clear()
                before = now()
                fn(prompt)
                for i, (a, b) in enumerate(zip(before, now(), strict=True)):
                    totals[engine][i].append(b - a)
                for label in clock.cpu:
                    for i, counter in enumerate((clock.cpu, clock.main, clock.wall)):
                        parts[engine][label][i].append(counter[label])
        med = statistics.median
        head = "".join(f"{e + ' cpu':>11}{'main':>7}{'wall':>7}" for e in runs)
        print(f"  {'part (ms, median)':<34}{head}")
        labels = list(dict.fromkeys(label for e in runs for label in parts[e]))
        for label in labels + ["whole pass"]:
            cells = ""
            for engine in runs:
                cw = totals[engine] if label == "whole pass" else parts[engine].get(label)
                cells += (
                    "".join(f"{med(v) * 1e3:>{w}.1f}" for v, w in zip(cw, (11, 7, 7), strict=True))
                    if cw
                    else f"{'-':>11}{'-':>7}{'-':>7}"
                )
            print(f"  {label:<34}{cells}")
        if len(runs) == 2:
            r = [med(t) / med(e) for t, e in zip(totals["torch"], totals["ember"], strict=True)]
            print(
                f"  speed torch/ember: process cpu {r[0]:.2f}x, main thread cpu {r[1]:.2f}x, "
                f"wall {r[2]:.2f}x"
            )


if __name__ == "__main__":
    main()
