"""Whisper speech to text: ember (cpu, wgpu) next to faster-whisper and transformers on torch.

    python benchmarks/whisper.py [--models tiny.en,base] [--threads 2] [--skip-wgpu]
                                 [--minutes 3] [--skip-torch] [--engines LABEL,...]

Clips: jfk.wav (11 s, from ember.packaged "jfk-audio") and a long clip of at least
--minutes, built by repeating jfk.wav with 2 s of silence between copies and written to a
temporary directory (deleted at the end); it exercises the 30 s windows that seek on the
last timestamp. Models: ember.packaged "whisper-tiny.en" and "whisper-base" (CTranslate2
files, f16 on disk); every engine computes in f32 unless its row says int8.

Each engine and clip runs in a fresh subprocess, so every figure includes what that engine
costs a real program:
  cold start   process start -> first segment of the clip (imports, weights, audio, the
               first 30 s window decoded); transformers' generate returns all segments at
               once, so there it is process start -> whole transcript
  RTF          real-time factor, audio seconds / wall seconds of one transcription after
               the model is loaded (higher is faster); on a clip shorter than 30 s the
               figure is a second pass in the same process (the first one warms up)
  peak RSS     VmHWM from /proc/self/status at the end of the subprocess
The options are the same on every side: greedy (beam 1), temperature 0 only (no fallback),
timestamps on, conditioned on the previous window's text, language "en", no VAD,
compression-ratio 2.4 / log-prob -1.0 / no-speech 0.6 thresholds, and the same thread
count (--threads: faster-whisper's cpu_threads, torch.set_num_threads, ember's
EMBER_CPU_THREADS, and OMP/OpenBLAS for all).

transformers' WhisperForConditionalGeneration needs Hugging Face weights and the models
here exist only as CTranslate2 files, so the parent converts each one once, before any
timing, through ember's own CTranslate2 reader (ember.io.ctranslate2.whisper_hf_tensors,
the mapping ember's tests check against transformers) into a temporary Hugging Face
directory (safetensors f32, config.json, generation_config.json); the transformers worker
then loads it with from_pretrained like any HF checkpoint, so neither the conversion nor
ember's import is in its figures.
The page row ("ember page (WebGPU)") is the transcription page (web/static/transcribe.html)
with the bundle's model in Debian's Chromium on SwiftShader, driven as the browser test
drives it: the clip picked with the page's file input, decoded by the browser. Its cold
start is process start -> the first segment shown in the page (Chromium's launch, the
page's boot and the model's download from the local server included); its RTF is the
worker's seconds for the transcription (a second pass on a short clip); the in-page time
from picking the file to the first segment is printed below the table; its peak RSS is
Chromium's processes', which this one does not see, so it is left out (nan). Only the
models in the bundle have it (tiny.en).
Every worker runs from compiled bytecode, as installed packages do: pip compiles a
package's .pyc files when it installs it, but ember run from a source checkout under
PYTHONDONTWRITEBYTECODE (set on the project's machines) compiled each of its modules
again in every process (0.13 s of CPU, 0.27 s under load, in each cold start of ember
alone). So the workers get PYTHONPYCACHEPREFIX in the run's temporary directory, and
before the timed runs each engine runs once untimed on jfk.wav per model, which fills it
(and puts the model's files in the page cache for every engine alike).
`--engines` runs only the rows named (labels as printed, comma-separated); `--clips`
only jfk or the long clip. `--rounds N` runs every engine N times per clip, the engines
in turn within a round (the order reversed every other round), and prints the median of
each figure, with the cold-start ratio of each round: on a loaded machine one run each
says little, and a ratio taken within one round compares engines under the same load.
Figures, not pass/fail: on a shared machine compare the ratios, measured in one run.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import wave

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE_RATE = 16000
MODELS = {"tiny.en": "whisper-tiny.en", "base": "whisper-base"}
ENGINES = {
    # label: (worker, device or compute type)
    "ember cpu": ("ember", "cpu"),
    "faster-whisper float32": ("faster_whisper", "float32"),
    "faster-whisper int8": ("faster_whisper", "int8"),
    "transformers (torch cpu)": ("torch", "float32"),
    "ember wgpu": ("ember", "wgpu"),
    "ember page (WebGPU)": ("page", "webgpu"),
}
PAGE_MODELS = {"tiny.en"}  # the bundle's (build_web)
THRESHOLDS = {"compression_ratio": 2.4, "logprob": -1.0, "no_speech": 0.6}


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def read_wav16(path):
    """16-bit PCM mono 16 kHz samples as float32 (the clips this script uses and writes)."""
    import numpy as np

    with wave.open(path, "rb") as w:
        if (w.getsampwidth(), w.getnchannels(), w.getframerate()) != (2, 1, SAMPLE_RATE):
            raise ValueError(f"{path}: expected 16-bit mono {SAMPLE_RATE} Hz PCM")
        raw = w.readframes(w.getnframes())
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0


# --- workers (run in their own process) ------------------------------------------------------------
def transcribe_ember(args):
    # the Python API, as a script uses it (the CLI's package would add argparse's import)
    from ember.device import Device
    from ember.models.whisper_transcriber import WhisperTranscriber

    t = WhisperTranscriber.from_dir(args.model, device=Device.parse(args.device))

    def run():
        segs = t.transcribe(args.audio, "en" if t.tokens.multilingual else None, fallback=False)
        return (s.text for s in segs)

    return run


def transcribe_faster_whisper(args):
    from faster_whisper import WhisperModel

    model = WhisperModel(
        args.model, device="cpu", compute_type=args.device, cpu_threads=args.threads
    )

    def run():
        segs, _ = model.transcribe(
            args.audio,
            beam_size=1,
            temperature=0.0,
            language="en",
            vad_filter=False,
            condition_on_previous_text=True,
            compression_ratio_threshold=THRESHOLDS["compression_ratio"],
            log_prob_threshold=THRESHOLDS["logprob"],
            no_speech_threshold=THRESHOLDS["no_speech"],
        )
        return (s.text for s in segs)

    return run


def transcribe_torch(args):
    import torch
    import transformers
    from tokenizers import Tokenizer

    torch.set_num_threads(args.threads)
    model = transformers.WhisperForConditionalGeneration.from_pretrained(args.model).eval()
    extractor = transformers.WhisperFeatureExtractor(feature_size=model.config.num_mel_bins)
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    eot = model.generation_config.eos_token_id
    multilingual = model.generation_config.is_multilingual

    def run():
        samples = read_wav16(args.audio)
        long_form = len(samples) > 30 * SAMPLE_RATE
        # long-form generation takes the whole unpadded log-mel and its attention mask
        feats = extractor(
            samples,
            sampling_rate=SAMPLE_RATE,
            return_tensors="pt",
            return_attention_mask=True,
            **({"truncation": False, "padding": "longest"} if long_form else {}),
        )
        with torch.inference_mode():
            out = model.generate(
                feats.input_features,
                attention_mask=feats.attention_mask,
                return_timestamps=True,
                return_segments=True,
                return_dict_in_generate=True,
                do_sample=False,
                num_beams=1,
                temperature=0.0,
                condition_on_prev_tokens=True,
                compression_ratio_threshold=THRESHOLDS["compression_ratio"],
                logprob_threshold=THRESHOLDS["logprob"],
                no_speech_threshold=THRESHOLDS["no_speech"],
                **({"language": "en", "task": "transcribe"} if multilingual else {}),
            )
        for seg in out["segments"][0]:
            yield tok.decode([int(i) for i in seg["tokens"] if int(i) < eot])

    return run


def run_page_worker(args):
    """The transcription page in a fresh Chromium (benchmarks/browser_common.py): the clip
    picked with its file input; prints what run_worker prints, and the in-page seconds
    from picking the file to the first segment."""
    from browser_common import open_browser

    def transcribe(page):
        def go():
            page.page.evaluate("() => { window.lastRun = null; }")
            page.page.set_input_files("#file", args.audio)
            page.page.wait_for_function("() => window.lastRun !== null")
            return page.page.evaluate("() => window.lastRun")

        picked = time.time()
        out = page.do(go)
        if "error" in out:
            raise SystemExit(f"the page: {out['error']}")
        return picked, out

    with open_browser() as session:
        name = os.path.basename(os.path.normpath(args.model))
        if not session.has_model(name):
            raise SystemExit(f"the bundle has no {name}")
        page = session.page(f"transcribe.html?model={name}").boot()
        page.evaluate("() => window.demoReady")
        picked, out = transcribe(page)
        events = out["page_events"]
        first_at = picked + events[0]["at_ms"] / 1000 if events else time.time()
        seconds = transcribe(page)[1]["seconds"] if args.duration < 30 else out["seconds"]
    print(
        json.dumps(
            {
                "first_segment_at": first_at,
                "seconds": seconds,
                "warm_pass": args.duration < 30,
                "peak_rss_mb": float("nan"),
                "text": " ".join(s["text"].strip() for s in out["segments"]),
                "page_first_segment_s": events[0]["at_ms"] / 1000 if events else None,
            }
        )
    )


def run_worker(args):
    if args.worker == "page":
        return run_page_worker(args)
    os.environ["EMBER_CPU_THREADS"] = str(args.threads)
    make = {
        "ember": transcribe_ember,
        "faster_whisper": transcribe_faster_whisper,
        "torch": transcribe_torch,
    }[args.worker]
    run = make(args)
    start = time.perf_counter()
    texts = run()
    first_text = next(texts, "")
    first_at = time.time()
    texts = [first_text, *texts]
    seconds = time.perf_counter() - start
    warm = args.duration < 30
    if warm:  # a short clip: the first pass warmed up; time a second one
        start = time.perf_counter()
        list(run())
        seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "first_segment_at": first_at,
                "seconds": seconds,
                "warm_pass": warm,
                "peak_rss_mb": peak_rss_mb(),
                "text": " ".join(t.strip() for t in texts),
            }
        )
    )


# --- the parent -----------------------------------------------------------------------------------
def write_long_clip(jfk_path, minutes, folder):
    """jfk.wav repeated with 2 s of silence between copies until at least `minutes` long."""
    import numpy as np

    speech = (read_wav16(jfk_path) * 32768.0).astype("<i2")
    piece = np.concatenate([speech, np.zeros(2 * SAMPLE_RATE, "<i2")])
    copies = -(-int(minutes * 60 * SAMPLE_RATE) // len(piece))
    path = os.path.join(folder, f"jfk-x{copies}.wav")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(np.tile(piece, copies).tobytes())
    return path, copies * len(piece) / SAMPLE_RATE


def convert_to_hf(ct2_dir, out_dir):
    """A Hugging Face Whisper directory with the weights of the CTranslate2 one (see the
    module docstring); raises with the reason when transformers rejects the state dict."""
    import numpy as np
    import torch
    import transformers
    from ember.io.ctranslate2 import CTranslate2File, whisper_hf_tensors
    from ember.models import whisper_config
    from ember.models.whisper_transcriber import WhisperTranscriber

    tokens = WhisperTranscriber.from_dir(ct2_dir).tokens
    f = CTranslate2File(os.path.join(ct2_dir, "model.bin"))
    tensors = whisper_hf_tensors(f)
    with open(os.path.join(ct2_dir, "config.json"), encoding="utf-8") as fh:
        ct2_config = json.load(fh)
    c = whisper_config.from_ct2(f, tensors, ct2_config, ct2_dir)
    cfg = transformers.WhisperConfig(
        vocab_size=c.vocab_size,
        num_mel_bins=c.num_mel_bins,
        d_model=c.d_model,
        encoder_layers=c.encoder_layers,
        encoder_attention_heads=c.encoder_attention_heads,
        encoder_ffn_dim=c.encoder_ffn_dim,
        decoder_layers=c.decoder_layers,
        decoder_attention_heads=c.decoder_attention_heads,
        decoder_ffn_dim=c.decoder_ffn_dim,
        max_source_positions=c.max_source_positions,
        max_target_positions=c.max_target_positions,
        pad_token_id=tokens.eot,
        bos_token_id=tokens.eot,
        eos_token_id=tokens.eot,
        decoder_start_token_id=tokens.sot,
    )
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    state = {k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # proj_out is tied to the decoder embeddings; HF's k_proj has no bias (CT2 stores none)
    missing = [k for k in missing if k != "proj_out.weight"]
    if missing or unexpected:
        raise RuntimeError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    languages = {}
    if tokens.multilingual:
        languages["lang_to_id"] = {f"<|{c}|>": i for c, i in tokens.languages.items()}
        languages["task_to_id"] = {"transcribe": tokens.transcribe, "translate": tokens.translate}
    # ember suppresses the control tokens always, as openai-whisper does; HF checkpoints
    # list them among suppress_tokens
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=tokens.sot,
        eos_token_id=tokens.eot,
        pad_token_id=tokens.eot,
        bos_token_id=tokens.eot,
        no_timestamps_token_id=tokens.no_timestamps,
        is_multilingual=tokens.multilingual,
        **languages,
        suppress_tokens=sorted(set(c.suppress_tokens) | set(tokens.specials())),
        begin_suppress_tokens=list(c.begin_suppress_tokens),
        max_initial_timestamp_index=50,
        max_length=c.max_target_positions,
    )
    model.save_pretrained(out_dir)
    shutil.copyfile(
        os.path.join(ct2_dir, "tokenizer.json"), os.path.join(out_dir, "tokenizer.json")
    )
    return out_dir


def measure(engine, device, model_dir, audio, duration, threads, timeout, pycache):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", engine, "--device", device]
    cmd += ["--model", model_dir, "--audio", audio, "--duration", str(duration)]
    cmd += ["--threads", str(threads)]
    n = str(threads)
    env = dict(os.environ, OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, TOKENIZERS_PARALLELISM="0")
    # every engine from compiled bytecode, as installed packages run (module docstring)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = pycache
    start = time.time()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    r = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "cold_s": r["first_segment_at"] - start,
        "rtf": duration / r["seconds"],
        "rss_mb": r["peak_rss_mb"],
        "text": r["text"],
        "page_first_segment_s": r.get("page_first_segment_s"),
    }


def medians(runs):
    """One row from an engine's runs: the median of each figure (the first run's text and
    page figure); an error if any run failed."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    row = dict(runs[0])
    for key in ("cold_s", "rtf", "rss_mb"):
        row[key] = statistics.median(r[key] for r in runs)
    return row


def per_round(runs):
    """Each engine's cold starts in round order, and ember cpu / transformers per round."""
    for label, rs in runs.items():
        if all("error" not in r for r in rs):
            print(f"  {label} cold start by round: " + ", ".join(f"{r['cold_s']:.2f}" for r in rs))
    e, t = runs.get("ember cpu", []), runs.get("transformers (torch cpu)", [])
    pairs = [(a, b) for a, b in zip(e, t, strict=False) if "error" not in a and "error" not in b]
    if pairs:
        each = [a["cold_s"] / b["cold_s"] for a, b in pairs]
        print(
            "  ember cpu / transformers cold start by round: "
            + ", ".join(f"{x:.3f}" for x in each)
            + f" (median {statistics.median(each):.3f})"
        )


def words(text):
    return "".join(c for c in text.lower() if c.isalpha() or c == " ").split()


def report(results, model, clip, reference):
    print(f"\n{model}, {clip}")
    print(f"{'engine':<26}{'cold start':>12}{'RTF':>9}{'peak RSS':>11}  text vs {reference}")
    ref = results.get(reference, {}).get("text")
    for label, r in results.items():
        if "error" in r:
            print(f"{label:<26}  unavailable: {r['error']}")
            continue
        same = "-" if ref is None else ("same words" if words(r["text"]) == words(ref) else "")
        if not same:
            a, b = words(r["text"]), words(ref)
            diff = sum(x != y for x, y in zip(a, b, strict=False)) + abs(len(a) - len(b))
            same = f"{len(a)} words, {diff} differ"
        print(f"{label:<26}{r['cold_s']:>10.2f} s{r['rtf']:>8.1f}x{r['rss_mb']:>8.0f} MB  {same}")
    page = results.get("ember page (WebGPU)", {})
    if page.get("page_first_segment_s") is not None:
        print(
            f"  the page: file picked -> first segment shown {page['page_first_segment_s']:.2f} s"
        )


def ratios(results, long_form):
    e = results.get("ember cpu", {})
    t = results.get("transformers (torch cpu)", {})
    f = results.get("faster-whisper float32", {})
    lines = []
    if "rtf" in e and "rtf" in t:
        lines.append(
            f"ember cpu / transformers: speed {e['rtf'] / t['rtf']:.2f}x (target >= 1.0), "
            f"peak RSS {e['rss_mb'] / t['rss_mb']:.2f}x (target <= 0.5), "
            f"cold start {e['cold_s'] / t['cold_s']:.2f}x (target <= 0.2"
            + (
                "; on a clip over 30 s transformers' first segment is its whole transcript)"
                if long_form
                else ")"
            )
        )
    if "rtf" in e and "rtf" in f:
        lines.append(
            f"ember cpu / faster-whisper float32: speed {e['rtf'] / f['rtf']:.2f}x "
            f"(target >= 0.5), peak RSS {e['rss_mb'] / f['rss_mb']:.2f}x, "
            f"cold start {e['cold_s'] / f['cold_s']:.2f}x"
        )
    for line in lines:
        print("  " + line)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="tiny.en,base", help="comma-separated: tiny.en, base")
    p.add_argument("--threads", type=int, default=2, help="CPU threads for every engine")
    p.add_argument("--minutes", type=float, default=3.0, help="length of the long clip")
    p.add_argument(
        "--skip-wgpu",
        action="store_true",
        help="leave out the WebGPU rows: ember wgpu and the page",
    )
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per engine and clip")
    p.add_argument("--engines", help="only these rows (comma-separated labels); default all")
    p.add_argument("--clips", default="jfk,long", help="comma-separated: jfk, long")
    p.add_argument("--rounds", type=int, default=1, help="runs of each engine per clip")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--audio", help=argparse.SUPPRESS)
    p.add_argument("--duration", type=float, default=0.0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return run_worker(args)

    sys.path.insert(0, HERE)
    from common import machine_report
    from ember import packaged

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    chosen_clips = {c.strip() for c in args.clips.split(",") if c.strip()}
    if chosen_clips - {"jfk", "long"} or not chosen_clips:
        p.error(f"--clips: choose from jfk, long (got {args.clips!r})")
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1 (got {args.rounds})")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        p.error(f"--models: unknown {', '.join(unknown)} (choose from {', '.join(MODELS)})")
    for line in machine_report():
        print(line)
    jfk = packaged.file("jfk-audio", "jfk.wav", log=lambda msg: None)
    chosen = [e.strip() for e in (args.engines or ",".join(ENGINES)).split(",") if e.strip()]
    if set(chosen) - set(ENGINES):
        p.error(
            f"--engines: unknown {', '.join(set(chosen) - set(ENGINES))} "
            f"(choose from {', '.join(ENGINES)})"
        )
    engines = {
        label: spec
        for label, spec in ENGINES.items()
        if label in chosen
        and not (args.skip_wgpu and spec[1] in ("wgpu", "webgpu"))
        and not (args.skip_torch and spec[0] == "torch")
    }
    with tempfile.TemporaryDirectory(prefix="ember-whisper-bench-") as tmp:
        jfk_s = len(read_wav16(jfk)) / SAMPLE_RATE
        pycache = os.path.join(tmp, "pycache")
        clips = [("jfk.wav", jfk, jfk_s)] if "jfk" in chosen_clips else []
        described = [f"jfk.wav {jfk_s:.1f} s"] if clips else []
        if "long" in chosen_clips:
            long_clip, long_s = write_long_clip(jfk, args.minutes, tmp)
            clips.append((f"{os.path.basename(long_clip)} (in {tmp})", long_clip, long_s))
            described.append(
                f"a long clip of {long_s:.0f} s (jfk.wav repeated with 2 s of silence), "
                f"written to {tmp}"
            )
        print(
            f"clips: {'; '.join(described)}; {args.threads} threads; greedy, temperature 0, "
            "timestamps, language en; each engine and clip in a fresh process"
            + (f"; {args.rounds} rounds, medians" if args.rounds > 1 else "")
        )
        for model in models:
            ct2_dir = os.path.dirname(packaged.file(MODELS[model], log=lambda msg: None))
            hf_dir = None
            if "transformers (torch cpu)" in engines:
                try:
                    hf_dir = convert_to_hf(ct2_dir, os.path.join(tmp, f"hf-{model}"))
                except Exception as exc:  # a benchmark reports, it does not fail
                    hf_dir = f"conversion failed: {type(exc).__name__}: {exc}"
            for worker, device in engines.values():  # untimed: see the docstring
                model_dir = hf_dir if worker == "torch" else ct2_dir
                if os.path.isdir(str(model_dir)) and (worker != "page" or model in PAGE_MODELS):
                    measure(worker, device, model_dir, jfk, jfk_s, args.threads, 600, pycache)
            for clip, path, duration in clips:
                runs = {label: [] for label in engines}
                for r in range(args.rounds):
                    order = list(engines) if r % 2 == 0 else list(engines)[::-1]
                    for label in order:
                        worker, device = engines[label]
                        model_dir = hf_dir if worker == "torch" else ct2_dir
                        if worker == "torch" and not os.path.isdir(str(model_dir)):
                            runs[label].append({"error": model_dir})
                            continue
                        if worker == "page" and model not in PAGE_MODELS:
                            runs[label].append({"error": f"the page's bundle has no {model}"})
                            continue
                        job = (worker, device, model_dir, path, duration, args.threads)
                        runs[label].append(measure(*job, args.timeout, pycache))
                results = {label: medians(rs) for label, rs in runs.items()}
                report(results, model, f"{clip}, {duration:.0f} s", "faster-whisper float32")
                ratios(results, duration > 30)
                if args.rounds > 1:
                    per_round(runs)
    for line in machine_report()[:1]:
        print("after: " + line)


if __name__ == "__main__":
    main()
