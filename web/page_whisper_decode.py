"""Whisper's greedy decoding on plain Python data, for a page (Pyodide, no numpy).

The same decoding as ember.models.whisper_decoding with `temperatures=(0.0,)` (greedy, no
fallback), which imports numpy: openai-whisper's logit rules (blank suppression at the
start, suppressed tokens, the timestamp rules) on one row of logits per step, read back
asynchronously as an array('f'); the segments a window's tokens make; 30 s windows that
seek on the last timestamp, conditioned on the previous windows' text; digital silence
and no-speech windows skipped. tests/test_page_whisper.py holds its tokens equal to
whisper_decoding's on real tiny.en.

What differs is when segments come out: `on_segment` is called for each one as soon as
it is final, during the window's decoding, not after it. A segment is final once the pair
of timestamps after it is sampled (the rules only let text follow a pair, so the cuts
before it never move); the rest of the window's segments come when it ends. A window
whose <|nospeech|> probability is above the threshold may still be skipped as silence
when it ends, so its segments wait for the end.
"""

import math
from array import array
from dataclasses import dataclass

from ember.models.whisper_tokens import SECONDS_PER_TIMESTAMP
from ember.tensor import tensor

from .page_whisper_mel import HOP, N_FRAMES, N_SAMPLES, SAMPLE_RATE

NEG_INF = float("-inf")
SILENCE_PEAK = 1e-4  # whisper_decoding's: a window below -80 dBFS is not decoded


@dataclass
class PageDecodeOptions:
    """whisper_decoding.DecodeOptions' fields that greedy decoding without fallback reads."""

    language: str | None = None
    task: str = "transcribe"
    timestamps: bool = True
    suppress_tokens: tuple = ()
    suppress_blank: tuple = ()
    max_initial_timestamp: float | None = 1.0
    logprob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    condition_on_previous: bool = True


@dataclass
class PageSegment:
    start: float
    end: float
    tokens: list
    text: str = ""


def _fill(row, start, end):
    end = min(end, len(row))
    if start < end:
        row[start:end] = array("f", [NEG_INF]) * (end - start)


def _logsumexp(values):
    top = max(values)
    if top == NEG_INF:
        return NEG_INF
    return top + math.log(math.fsum([math.exp(v - top) for v in values]))


class PageLogitRules:
    """whisper_decoding.LogitRules on an array('f') row, changed in place."""

    def __init__(self, tokens, opts, vocab):
        self.t, self.opts = tokens, opts
        suppress = {i for i in opts.suppress_tokens if 0 <= i < vocab} | set(tokens.specials())
        if opts.timestamps:
            suppress.add(tokens.no_timestamps)
        self.suppress = sorted(suppress)
        self.blank = [i for i in opts.suppress_blank if 0 <= i < vocab]

    def apply(self, row, sampled):
        if not sampled:
            for i in self.blank:
                row[i] = NEG_INF
        for i in self.suppress:
            row[i] = NEG_INF
        if self.opts.timestamps:
            self._timestamps(row, sampled)
        return row

    def _timestamps(self, row, sampled):
        tb, eot = self.t.timestamp_begin, self.t.eot
        last_ts = len(sampled) >= 1 and sampled[-1] >= tb
        penultimate_ts = len(sampled) < 2 or sampled[-2] >= tb
        if last_ts:
            if penultimate_ts:  # a pair of timestamps closed a segment: text must follow
                _fill(row, tb, len(row))
            else:  # a timestamp after text: another timestamp (or the end) must follow
                _fill(row, 0, eot)
        stamps = [s for s in sampled if s >= tb]
        if stamps:  # timestamps never go back (nor repeat, except to close a segment)
            _fill(row, tb, stamps[-1] if last_ts and not penultimate_ts else stamps[-1] + 1)
        if not sampled:  # the first token is a timestamp, at most max_initial_timestamp
            _fill(row, 0, tb)
            if self.opts.max_initial_timestamp is not None:
                last = tb + round(self.opts.max_initial_timestamp / SECONDS_PER_TIMESTAMP)
                _fill(row, last + 1, len(row))
        # the timestamps' total log-probability against the best text token's: the
        # normalizer of the log-softmax is common to both sides, so it is left out
        if _logsumexp(row[tb:]) > max(row[:tb]):
            _fill(row, 0, tb)


async def _row(t):
    """A [..., 1, vocab] f32 tensor's one row, read back without blocking, as array('f')."""
    raw = await t.backend.to_bytes_async(t.storage, t.layout, t.dtype)
    row = array("f")
    row.frombytes(raw)
    return row


async def greedy(model, encoder_out, tokens, opts, prefix=(), on_pair=None):
    """(sampled tokens without eot, mean log-probability, <|nospeech|> probability) of one
    window; `on_pair(sampled, no_speech_prob)` is called whenever a pair of timestamps
    has just been sampled."""
    cfg = model.cfg
    prompt = list(prefix) + tokens.prompt(opts.language, opts.task, opts.timestamps)
    limit = min(cfg.max_target_positions // 2, cfg.max_target_positions - len(prompt))
    rules = PageLogitRules(tokens, opts, cfg.vocab_size)
    tb = tokens.timestamp_begin
    cache = model.decoder.new_cache(encoder_out)
    first = model.decoder(tensor([prompt], device=model.device), cache, last_only=False)
    # the logits at <|startoftranscript|> give the no-speech probability
    at_sot = await _row(first.narrow(1, len(prefix), 1))
    no_speech = math.exp(at_sot[tokens.no_speech] - _logsumexp(at_sot))
    row = await _row(first.narrow(1, len(prompt) - 1, 1))
    sampled, total = [], 0.0
    while len(sampled) < limit:
        row = rules.apply(row, sampled)
        token = row.index(max(row))  # the first of equal maxima, as numpy's argmax
        total += row[token] - _logsumexp(row)
        if token == tokens.eot:
            break
        sampled.append(token)
        if on_pair is not None and len(sampled) >= 2 and sampled[-2] >= tb and token >= tb:
            on_pair(sampled, no_speech)
        if len(sampled) < limit:
            row = await _row(model.decoder(tensor([[token]], device=model.device), cache))
    return sampled, total / (len(sampled) + 1), no_speech


def split_segments(sampled, tokens, offset, window_seconds):
    """(segments, seconds consumed) of one window's tokens: whisper_decoding.split_segments."""
    tb = tokens.timestamp_begin
    is_ts = [t >= tb for t in sampled]
    single_ending = len(is_ts) >= 2 and not is_ts[-2] and is_ts[-1]
    cuts = [i + 1 for i in range(len(is_ts) - 1) if is_ts[i] and is_ts[i + 1]]
    segments = []
    if cuts:
        if single_ending:
            cuts.append(len(sampled))
        last = 0
        for cut in cuts:
            part = sampled[last:cut]
            start = (part[0] - tb) * SECONDS_PER_TIMESTAMP
            end = (part[-1] - tb) * SECONDS_PER_TIMESTAMP
            segments.append(PageSegment(offset + start, offset + end, part))
            last = cut
        consumed = (
            window_seconds if single_ending else (sampled[last - 1] - tb) * SECONDS_PER_TIMESTAMP
        )
    else:
        duration = window_seconds
        stamps = [t for t in sampled if t >= tb]
        if stamps and stamps[-1] != tb:
            duration = (stamps[-1] - tb) * SECONDS_PER_TIMESTAMP
        if any(t < tokens.eot for t in sampled):
            segments.append(PageSegment(offset, offset + duration, list(sampled)))
        consumed = window_seconds
    return segments, consumed


def _is_silence(no_speech, avg_logprob, opts):
    if opts.no_speech_threshold is None or no_speech <= opts.no_speech_threshold:
        return False
    return not (opts.logprob_threshold is not None and avg_logprob > opts.logprob_threshold)


def _silent(head):
    return not head or (max(head) <= SILENCE_PEAK and min(head) >= -SILENCE_PEAK)


async def transcribe(model, tokenizer, tokens, samples, log_mel, opts, on_segment=None):
    """Every segment of `samples` (array('f'), 16 kHz mono), in order; `on_segment(seg)`
    is called for each one as soon as it is final."""
    out = []

    def emit(seg, kept):
        seg.text = tokenizer.decode([t for t in seg.tokens if t < tokens.eot])
        # faster-whisper (and whisper_windows) drop instantaneous and empty segments
        if seg.start != seg.end and seg.text.strip() != "":
            out.append(seg)
            kept.append(seg)
            if on_segment is not None:
                on_segment(seg)

    content_frames = len(samples) // HOP
    seek = 0  # in mel frames
    previous = []
    while seek < content_frames:
        window = samples[seek * HOP : seek * HOP + N_SAMPLES]
        frames = min(N_FRAMES, content_frames - seek)
        if _silent(window[: frames * HOP]):
            seek += frames
            continue
        mel = log_mel(window).unsqueeze(0)
        if mel.dtype != model.dtype:
            mel = mel.to(model.dtype)
        encoder_out = model.encoder(mel)
        prefix = []
        if opts.condition_on_previous and previous:
            prefix = [tokens.sot_prev] + previous[-(model.cfg.max_target_positions // 2 - 1) :]
        offset, seconds = seek * HOP / SAMPLE_RATE, frames * HOP / SAMPLE_RATE
        early, kept = [], []  # this window's segments given early; those given and kept

        def on_pair(sampled, no_speech, offset=offset, seconds=seconds, early=early, kept=kept):
            threshold = opts.no_speech_threshold
            if threshold is None or no_speech <= threshold:  # it cannot be skipped now
                for seg in split_segments(sampled, tokens, offset, seconds)[0][len(early) :]:
                    early.append(seg)
                    emit(seg, kept)

        sampled, avg_logprob, no_speech = await greedy(
            model, encoder_out, tokens, opts, prefix, on_pair
        )
        if _is_silence(no_speech, avg_logprob, opts):
            seek += frames
            continue
        segments, consumed = split_segments(sampled, tokens, offset, seconds)
        for seg in segments[len(early) :]:
            emit(seg, kept)
        previous = previous + [t for seg in kept for t in seg.tokens]
        seek += max(1, math.floor(consumed * SAMPLE_RATE / HOP + 0.5)) if consumed else frames
    return out
