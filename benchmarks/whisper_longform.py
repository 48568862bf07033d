"""Long-form acceptance: a clip of at least 3 minutes (jfk.wav repeated with 2 s of
silence, as benchmarks/whisper.py builds it) through ember and faster-whisper's long-form
mode on the same tiny.en CTranslate2 files, greedy (beam 1, temperature 0 only),
conditioned on the previous text (faster-whisper's default), language "en", no VAD.

    python benchmarks/whisper_longform.py [--minutes 3] [--tolerance 0.2]

Prints each segment side by side with its start/end differences and exits 1 when the
segment texts differ or a start/end differs by more than --tolerance seconds. The timestamps
are tokens 0.02 s apart; faster-whisper's log-mel differs from ember's by design (the
unpadded audio's, padded with zeros in the log domain), which can move a timestamp a step
or two, and the next window starts at the last one, so a shift can carry over: 0.2 s (ten
steps) is the default, well under the 2 s pauses between the segments. A script, not a
test: on the shared 2-core machine the two transcriptions take minutes.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from whisper import read_wav16, write_long_clip


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--tolerance", type=float, default=0.2)
    args = p.parse_args()
    import ember
    import faster_whisper
    from ember import packaged
    from ember.models.whisper_transcriber import WhisperTranscriber

    model_dir = os.path.dirname(packaged.file("whisper-tiny.en"))
    with tempfile.TemporaryDirectory(prefix="ember-longform-") as tmp:
        clip, seconds = write_long_clip(packaged.file("jfk-audio"), args.minutes, tmp)
        assert len(read_wav16(clip)) >= args.minutes * 60 * 16000
        ours = WhisperTranscriber.from_dir(model_dir, device=ember.Device.cpu())
        mine = list(ours.transcribe(clip, fallback=False))
        peer = faster_whisper.WhisperModel(model_dir, device="cpu", compute_type="float32")
        segments, _ = peer.transcribe(
            clip,
            beam_size=1,
            temperature=0.0,
            language="en",
            vad_filter=False,
            condition_on_previous_text=True,
        )
        theirs = list(segments)
    print(f"clip {seconds:.0f} s; ember {len(mine)} segments, faster-whisper {len(theirs)}")
    worst_start = worst_end = 0.0
    same = [a.text.strip() for a in mine] == [b.text.strip() for b in theirs]
    for a, b in zip(mine, theirs, strict=False):
        ds, de = a.start - b.start, a.end - b.end
        worst_start, worst_end = max(worst_start, abs(ds)), max(worst_end, abs(de))
        mark = "" if a.text.strip() == b.text.strip() else "  TEXT DIFFERS: " + b.text.strip()
        print(f"{a.start:7.2f} {a.end:7.2f}  d {ds:+.2f} {de:+.2f}  {a.text.strip()}{mark}")
    print(
        f"same texts: {same}; max |start - start'| {worst_start:.2f} s, "
        f"max |end - end'| {worst_end:.2f} s (tolerance {args.tolerance} s)"
    )
    ok = same and len(mine) == len(theirs) and max(worst_start, worst_end) <= args.tolerance
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
