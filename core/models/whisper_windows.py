"""The 30 s windows of one or several audio files, decoded in batches: each round takes
the next window of up to `max_batch` files, runs them through the encoder as one batch,
detects the language of the files that have none yet, decodes them with the batched greedy
decoder (beam search and the temperature fallback row by row), and moves each file on to
where its last complete segment ended (openai-whisper's seeking).

Events come out as they happen: a segment as soon as it is decoded, and progress (each
file's seconds done). A segment is final when its closing timestamp pair is sampled,
unless its window may still be decoded again (temperature fallback, beam search) or
dropped as silence (<|nospeech|> above the threshold); such a window gives its segments
when it ends. A segment given early gets its window's avg_logprob when the window ends.
"""

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ..tensor import cat, tensor
from .whisper_batch import greedy_batch
from .whisper_decoding import Segment, decode_with_fallback, is_silence, split_segments
from .whisper_language import best_language, language_probs

# A window whose samples all stay below this (-80 dBFS) is digital silence: it is not
# decoded, since Whisper invents text there (tiny.en says " you", with a log-probability
# good enough to pass the no-speech test).
SILENCE_PEAK = 1e-4
MAX_BATCH = 8  # windows through the encoder at once: bounds the activations' memory


@dataclass
class FileTranscript:
    """One file's transcript as it is decoded. The language is the one given, or the one
    detected on its first decoded window (probability 1.0 when given or English-only, as
    faster-whisper reports it); None until then, and for a file that is all silence."""

    duration: float
    language: str | None = None
    language_probability: float | None = None
    language_probs: dict | None = None
    segments: list = field(default_factory=list)
    done: bool = False  # every window decoded


@dataclass
class Event:
    file: int  # index into the files
    segment: Segment | None  # a decoded segment, or None for progress alone
    seconds: float  # the file's audio decoded so far


def _audio_constants():
    from ..audio.log_mel import HOP, N_FRAMES, N_SAMPLES, SAMPLE_RATE

    return HOP, N_FRAMES, N_SAMPLES, SAMPLE_RATE


class _File:
    """One file's place in the decoding: its seek, its prompt tokens, its rng."""

    def __init__(self, index, samples, prompt_tokens, transcript, seed):
        hop = _audio_constants()[0]
        self.index = index
        self.samples = samples
        self.content_frames = len(samples) // hop
        self.seek = 0  # in mel frames
        self.previous = list(prompt_tokens)  # the initial prompt, then the text so far
        self._seed, self._rng = seed, None
        self.out = transcript
        self.frames = 0  # the current window's content frames
        self.shown = []  # the current window's segments already given, in split order
        self.reported = 0.0
        self.words = None  # its WordTimestamps, made for its language at its first window

    @property
    def rng(self):
        """Its sampling rng, made at the first temperature-above-0 decode (the same draws as
        one made up front; greedy decoding never needs it, nor numpy.random's 26 ms import
        in a cold start)."""
        if self._rng is None:
            self._rng = np.random.default_rng(self._seed)
        return self._rng

    @property
    def done(self):
        return self.seek >= self.content_frames

    def seconds(self, frames=None):
        hop, _, _, rate = _audio_constants()
        return min(self.seek if frames is None else frames, self.content_frames) * hop / rate

    def next_window(self):
        """The samples of the next window that is not digital silence (None at the end)."""
        hop, n_frames, n_samples, _ = _audio_constants()
        while not self.done:
            window = self.samples[self.seek * hop : self.seek * hop + n_samples]
            self.frames = min(n_frames, self.content_frames - self.seek)
            if np.any(np.abs(window[: self.frames * hop]) > SILENCE_PEAK):
                return window
            self.seek += self.frames
        return None

    def prefix(self, tokens, max_target_positions):
        """<|startofprev|> and the last tokens of the earlier text, as openai-whisper: at
        most max_length // 2 - 1 of them."""
        if not self.previous:
            return []
        return [tokens.sot_prev] + self.previous[-(max_target_positions // 2 - 1) :]

    def progress(self):
        now = self.seconds()
        if now > self.reported or (self.done and not self.out.done):
            self.reported = now
            self.out.done = self.done
            yield Event(self.index, None, now)


class _Window:
    """What one round decodes for one file: its options (its language) and prompt."""

    def __init__(self, f, opts, tokens, cfg):
        self.file = f
        self.opts = dataclasses.replace(opts, language=f.out.language)
        self.prefix = f.prefix(tokens, cfg.max_target_positions)
        self.prompt = self.prefix + tokens.prompt(self.opts.language, opts.task, opts.timestamps)


def _closes_segment(sampled, tb):
    return len(sampled) >= 2 and sampled[-2] >= tb and sampled[-1] >= tb


def _wanted(seg):
    """openai-whisper and faster-whisper drop instantaneous and empty segments."""
    return seg.start != seg.end and seg.text.strip() != ""


class Transcription:
    """The transcription of several files (16 kHz mono samples each), decoded as it is
    iterated: iterating gives Events; `files[i]` is file i's FileTranscript."""

    def __init__(
        self,
        model,
        tokenizer,
        tokens,
        audios,
        log_mel,
        opts,
        prompt_tokens=(),
        max_batch=MAX_BATCH,
        words=None,
    ):
        rate = _audio_constants()[3]
        self.model, self.tokenizer, self.tokens = model, tokenizer, tokens
        self.log_mel, self.opts, self.max_batch = log_mel, opts, max_batch
        # words(language) -> whisper_words.WordTimestamps for one file: it times each
        # window's words, moves its segments' times and may move the next window's start
        self.words = words
        self.files, self._state = [], []
        for i, samples in enumerate(audios):
            out = FileTranscript(duration=len(samples) / rate)
            if opts.language is not None or not tokens.multilingual:
                out.language, out.language_probability = opts.language or "en", 1.0
            self.files.append(out)
            self._state.append(_File(i, samples, prompt_tokens, out, opts.seed))

    def text_of(self, ids):
        return self.tokenizer.decode([t for t in ids if t < self.tokens.eot])

    def __iter__(self):
        try:
            while True:
                batch = []
                for f in self._state:
                    if len(batch) == self.max_batch:
                        break
                    window = f.next_window()
                    if window is not None:
                        batch.append((f, window))
                for f in self._state:  # silence skipped counts as done
                    yield from f.progress()
                if not batch:
                    return
                yield from self._round(batch)
        finally:  # streamed files are closed even when the caller stops early
            for f in self._state:
                if hasattr(f.samples, "close"):
                    f.samples.close()

    def _round(self, batch):
        model = self.model
        mels = []
        for _, window in batch:
            mel = self.log_mel(window).unsqueeze(0)
            mels.append(mel if mel.dtype == model.dtype else mel.to(model.dtype))
        encoder_out = model.encoder(cat(mels, 0) if len(mels) > 1 else mels[0])
        self._detect_languages([f for f, _ in batch], encoder_out)
        windows = [_Window(f, self.opts, self.tokens, model.cfg) for f, _ in batch]
        results = yield from self._decode(windows, encoder_out)
        for i, (w, result) in enumerate(zip(windows, results, strict=True)):
            row = encoder_out.narrow(0, i, 1) if len(windows) > 1 else encoder_out
            yield from self._finish(w, result, row)

    def _detect_languages(self, files, encoder_out):
        rows = [i for i, f in enumerate(files) if f.out.language is None]
        if not rows:
            return
        picked = encoder_out
        if len(rows) < len(files):
            picked = encoder_out.index_select(0, tensor(rows, device=self.model.device))
        for i, probs in zip(rows, language_probs(self.model, picked, self.tokens), strict=True):
            out = files[i].out
            out.language, out.language_probability = best_language(probs)
            out.language_probs = probs

    def _decode(self, windows, encoder_out):
        """One DecodeResult per window: batched greedy at temperature 0, then beam search
        or the fallback to higher temperatures row by row."""
        opts, model, tokens = self.opts, self.model, self.tokens
        results = [None] * len(windows)
        if opts.beam_size == 1 and opts.temperatures[0] == 0:
            # a window decoded once, without word timing (which moves its segments'
            # times), gives each segment as soon as its closing timestamp pair is sampled
            final = len(opts.temperatures) == 1 and self.words is None

            def on_token(row, sampled, no_speech_prob):
                keeps = (
                    opts.no_speech_threshold is None or no_speech_prob <= opts.no_speech_threshold
                )
                if final and keeps and _closes_segment(sampled, tokens.timestamp_begin):
                    segments, _ = self._split(windows[row], sampled)
                    yield from self._give(windows[row], segments)

            prompts = [w.prompt for w in windows]
            sot_at = [len(w.prefix) for w in windows]
            results = yield from greedy_batch(
                model, encoder_out, tokens, opts, prompts, sot_at, on_token
            )
        for i, w in enumerate(windows):
            row = encoder_out.narrow(0, i, 1) if len(windows) > 1 else encoder_out
            rng = w.file.rng if max(w.opts.temperatures) > 0 else None  # only sampling draws
            results[i] = decode_with_fallback(
                model, row, tokens, w.opts, self.text_of, w.prefix, rng, first=results[i]
            )
        return results

    def _split(self, w, sampled):
        hop, _, _, rate = _audio_constants()
        f = w.file
        segments, consumed = split_segments(
            sampled, self.tokens, f.seek * hop / rate, f.frames * hop / rate
        )
        for seg in segments:
            seg.text = self.text_of(seg.tokens)
        return segments, consumed

    def _give(self, w, segments, result=None):
        """Events of the window's segments not given yet; with `result`, the window's
        figures go onto all of its segments (those given early too)."""
        f = w.file
        for k, seg in enumerate(segments):
            if k < len(f.shown):
                seg = f.shown[k]
            else:
                f.shown.append(seg)
                if _wanted(seg):
                    f.out.segments.append(seg)
                    yield Event(f.index, seg, min(seg.end, f.out.duration))
            if result is not None:
                seg.avg_logprob = result.avg_logprob
                seg.extra = {
                    "temperature": result.temperature,
                    "no_speech_prob": result.no_speech_prob,
                }

    def _finish(self, w, result, encoder_out):
        f, opts = w.file, self.opts
        hop, _, _, rate = _audio_constants()
        if is_silence(result, opts):  # skipped, the prompt kept (as faster-whisper)
            f.seek += f.frames
        else:
            segments, consumed = self._split(w, result.tokens)
            seek = f.seek + (
                max(1, math.floor(consumed * rate / hop + 0.5)) if consumed else f.frames
            )
            if self.words is not None:
                if f.words is None:
                    f.words = self.words(f.out.language)
                offset = f.seek * hop / rate
                moved = f.words(encoder_out, segments, f.frames, offset, result.tokens)
                seek = seek if moved is None else moved
            yield from self._give(w, segments, result=result)
            f.previous += [t for seg in f.shown if _wanted(seg) for t in seg.tokens]
            f.seek = seek
            # faster-whisper: no earlier text in the next prompt without
            # condition_on_previous, nor after text sampled at a high temperature
            reset = result.temperature > opts.prompt_reset_on_temperature
            if reset or not opts.condition_on_previous:
                f.previous = []
        f.shown = []
        yield from f.progress()
