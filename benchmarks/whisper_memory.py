"""Peak RSS of `ember transcribe` on a long WAV next to a 1-minute one: long audio must be
decoded in 30 s windows with flat memory, not read whole.

    python benchmarks/whisper_memory.py [--hours 2] [--python PY ...]

Writes two 16 kHz 16-bit mono WAVs into a temporary directory (deleted at the end): one
minute and --hours long, each jfk.wav (ember.packaged "jfk-audio") at the start and at
the end with digital silence between (the transcriber skips silent windows without running
the model, so the long file costs reading time, not decoding time). Each `python -m
ember.cli transcribe FILE --output-format json` (tiny.en, cpu) runs in its own process;
its peak RSS is the child's ru_maxrss from wait4. --python takes interpreters to compare
(e.g. one whose ember is an older checkout: the "before" figure). Figures, not pass/fail.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import wave

SAMPLE_RATE = 16000


def write_clip(path, speech, seconds):
    """speech, silence, speech: `seconds` long in all, written a minute at a time."""
    total = int(seconds * SAMPLE_RATE)
    silence = total - 2 * len(speech)
    minute = bytes(2 * 60 * SAMPLE_RATE)
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(speech)
        for _ in range(silence // (60 * SAMPLE_RATE)):
            w.writeframes(minute)
        w.writeframes(bytes(2 * (silence % (60 * SAMPLE_RATE))))
        w.writeframes(speech)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hours", type=float, default=2.0)
    p.add_argument("--python", nargs="+", default=[sys.executable])
    args = p.parse_args()
    from ember import packaged

    with wave.open(packaged.file("jfk-audio"), "rb") as w:
        speech = w.readframes(w.getnframes())
    with tempfile.TemporaryDirectory(prefix="ember-whisper-memory-") as tmp:
        clips = [
            ("1 min", write_clip(os.path.join(tmp, "one-minute.wav"), speech, 60)),
            (
                f"{args.hours:g} h",
                write_clip(os.path.join(tmp, "long.wav"), speech, args.hours * 3600),
            ),
        ]
        print(f"{'python':<40} {'clip':>6} {'file MB':>8} {'peak RSS MB':>12} {'s':>7} {'segs':>5}")
        for python in args.python:
            for label, clip in clips:
                rss, seconds, segments = run_one(python, clip)
                size = os.path.getsize(clip) / 2**20
                print(
                    f"{python:<40} {label:>6} {size:8.0f} {rss:12.0f} {seconds:7.1f} {segments:5d}",
                    flush=True,
                )


def run_one(python, clip):
    """(peak RSS MB, seconds, segments) of one transcription in a fresh process: the
    child's own ru_maxrss, reaped with wait4."""
    import json

    cmd = [python, "-m", "ember.cli", "transcribe", clip, "--output-format", "json"]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{err.read().decode()[-2000:]}")
        segments = sum(len(v) for v in json.loads(out.read()).values())
    return usage.ru_maxrss / 1024.0, seconds, segments


if __name__ == "__main__":
    main()
