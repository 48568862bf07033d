"""Whisper's decoding of one window: greedy search and beam search with openai-whisper's
logit rules (suppressed tokens, blank suppression at the start, the timestamp rules), the
temperature fallback, and the segments a window's tokens make (the windows of whole files
are in whisper_windows.py).

The rules run on the host, on one row of logits per step (the vocabulary, ~52k floats);
the model runs wherever its weights are.
"""

from dataclasses import dataclass, field

import numpy as np

from ..tensor import tensor
from .whisper_tokens import SECONDS_PER_TIMESTAMP

NEG_INF = -np.inf
MAX_INITIAL_TIMESTAMP = 1.0  # seconds: the first timestamp is at most <|1.00|>


@dataclass
class DecodeOptions:
    language: str | None = None
    task: str = "transcribe"
    timestamps: bool = True
    suppress_tokens: tuple = ()  # besides the special tokens, which are always suppressed
    suppress_blank: tuple = ()  # suppressed at the first sampled position (" ", eot)
    max_new_tokens: int | None = None
    max_initial_timestamp: float | None = MAX_INITIAL_TIMESTAMP
    # openai-whisper's fallback: decode again at the next temperature while the text
    # compresses too well (repetition) or its mean log-probability is too low; a window
    # whose <|nospeech|> probability is high and whose text is unlikely is silence
    temperatures: tuple = (0.0,)
    compression_ratio_threshold: float | None = 2.4
    logprob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    # faster-whisper's defaults: the previous windows' text is the next one's prompt,
    # reset after a window decoded above this temperature
    condition_on_previous: bool = True
    prompt_reset_on_temperature: float = 0.5
    beam_size: int = 1  # > 1: beam search at temperature 0 (openai-whisper's, patience 1)
    seed: int = 0


@dataclass
class DecodeResult:
    tokens: list  # sampled tokens, without the prompt and without the final eot
    avg_logprob: float
    ended: bool  # eot was sampled (else the length limit stopped it)
    no_speech_prob: float = 0.0
    temperature: float = 0.0


def _logsumexp(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


def _log_softmax(x):
    return x - _logsumexp(x)


class LogitRules:
    """openai-whisper's SuppressBlank, SuppressTokens and ApplyTimestampRules, in that order,
    for one sequence; `sampled` are the tokens after the prompt."""

    def __init__(self, tokens, opts, vocab):
        self.t = tokens
        self.opts = opts
        suppress = {i for i in opts.suppress_tokens if 0 <= i < vocab} | set(tokens.specials())
        if opts.timestamps:
            suppress.add(tokens.no_timestamps)
        self.suppress = np.array(sorted(suppress), dtype=np.int64)
        self.blank = np.array([i for i in opts.suppress_blank if 0 <= i < vocab], dtype=np.int64)

    def apply(self, logits, sampled):
        logits = np.array(logits, dtype=np.float32)
        if not sampled and len(self.blank):
            logits[self.blank] = NEG_INF
        logits[self.suppress] = NEG_INF
        if self.opts.timestamps:
            self._timestamps(logits, sampled)
        return logits

    def _timestamps(self, logits, sampled):
        tb, eot = self.t.timestamp_begin, self.t.eot
        last_ts = len(sampled) >= 1 and sampled[-1] >= tb
        penultimate_ts = len(sampled) < 2 or sampled[-2] >= tb
        if last_ts:
            if penultimate_ts:  # a pair of timestamps closed a segment: text must follow
                logits[tb:] = NEG_INF
            else:  # a timestamp after text: another timestamp (or the end) must follow
                logits[:eot] = NEG_INF
        stamps = [s for s in sampled if s >= tb]
        if stamps:  # timestamps never go back (nor repeat, except to close a segment)
            last = stamps[-1] if last_ts and not penultimate_ts else stamps[-1] + 1
            logits[tb:last] = NEG_INF
        if not sampled:  # the first token is a timestamp, at most max_initial_timestamp
            logits[:tb] = NEG_INF
            if self.opts.max_initial_timestamp is not None:
                last_allowed = tb + round(self.opts.max_initial_timestamp / SECONDS_PER_TIMESTAMP)
                logits[last_allowed + 1 :] = NEG_INF
        # timestamps together outweigh any text token: openai-whisper compares their
        # log-probabilities, which is comparing the logits' (both sides less the same
        # normalizer), without a log-softmax over the whole vocabulary each step
        ts = logits[tb:].astype(np.float64)
        ts_total = _logsumexp(ts) if np.isfinite(np.max(ts)) else NEG_INF
        if ts_total > np.max(logits[:tb]):
            logits[:tb] = NEG_INF


def greedy(model, encoder_out, tokens, opts, prefix=(), temperature=0.0, rng=None):
    """Greedy decoding of one window (encoder_out [1, positions, d]), or sampling at
    `temperature` > 0 from `rng`. `prefix` tokens (<|startofprev|> and earlier text) come
    before the start-of-transcript sequence."""
    cfg = model.cfg
    prompt = list(prefix) + tokens.prompt(opts.language, opts.task, opts.timestamps)
    limit = cfg.max_target_positions // 2 if opts.max_new_tokens is None else opts.max_new_tokens
    limit = min(limit, cfg.max_target_positions - len(prompt))
    rules = LogitRules(tokens, opts, cfg.vocab_size)
    cache = model.decoder.new_cache(encoder_out)
    # the whole prompt's logits once: the one at <|startoftranscript|> gives no_speech_prob
    first = model.decoder(tensor([prompt], device=model.device), cache, last_only=False)
    first = first.numpy()[0]
    no_speech = float(np.exp(_log_softmax(first[len(prefix)].astype(np.float64))[tokens.no_speech]))
    logits = first[-1]
    sampled, total = [], 0.0
    ended = False
    while len(sampled) < limit:
        logits = rules.apply(logits, sampled)
        logprobs = _log_softmax(logits.astype(np.float64))  # all of it: sampling reads it
        if temperature > 0:
            p = np.exp(logprobs / temperature - np.max(logprobs / temperature))
            token = int(rng.choice(len(p), p=p / p.sum()))
        else:
            token = int(np.argmax(logits))
        total += float(logprobs[token])
        if token == tokens.eot:
            ended = True
            break
        sampled.append(token)
        if len(sampled) < limit:
            step = tensor([[token]], device=model.device)
            logits = model.decoder(step, cache).numpy()[0, -1]
    return DecodeResult(sampled, total / (len(sampled) + 1), ended, no_speech, temperature)


def _reorder(cache, rows, device):
    """Keep the cache rows `rows` (beam i continues from beam rows[i])."""
    ids = tensor(rows, device=device)
    kv = cache.self_kv
    kv.keys = [k.index_select(0, ids) for k in kv.keys]
    kv.values = [v.index_select(0, ids) for v in kv.values]


def beam_search(model, encoder_out, tokens, opts, prefix=()):
    """openai-whisper's beam search over one window: each beam proposes its beam_size + 1
    best tokens, the beam_size best unfinished sequences go on, sequences ending in eot
    are kept until beam_size of them are; the best by mean log-probability per token wins.
    The cross-attention keys and values stay one batch row, broadcast over the beams."""
    cfg, n = model.cfg, opts.beam_size
    prompt = list(prefix) + tokens.prompt(opts.language, opts.task, opts.timestamps)
    limit = cfg.max_target_positions // 2 if opts.max_new_tokens is None else opts.max_new_tokens
    limit = min(limit, cfg.max_target_positions - len(prompt))
    rules = LogitRules(tokens, opts, cfg.vocab_size)
    cache = model.decoder.new_cache(encoder_out)
    first = model.decoder(tensor([prompt], device=model.device), cache, last_only=False)
    first = first.numpy()[0]
    no_speech = float(np.exp(_log_softmax(first[len(prefix)].astype(np.float64))[tokens.no_speech]))
    _reorder(cache, [0] * n, model.device)
    beams, sums = [[]] * n, [0.0] * n
    logits = np.repeat(first[-1:], n, axis=0)
    finished = {}
    for _ in range(limit):
        scores, sources = {}, {}
        for i, seq in enumerate(beams):
            logprobs = _log_softmax(rules.apply(logits[i], seq).astype(np.float64))
            for token in np.argsort(-logprobs, kind="stable")[: n + 1]:
                key = (*seq, int(token))
                if key not in scores:  # identical beams (the first step) count once
                    scores[key], sources[key] = sums[i] + float(logprobs[token]), i
        new_beams, new_sums, rows, ended = [], [], [], {}
        for key in sorted(scores, key=scores.get, reverse=True):
            if key[-1] == tokens.eot:
                ended[key] = scores[key]
            else:
                new_beams.append(list(key))
                new_sums.append(scores[key])
                rows.append(sources[key])
                if len(new_beams) == n:
                    break
        for key in sorted(ended, key=ended.get, reverse=True):
            if len(finished) >= n:
                break
            finished[key] = ended[key]
        if len(finished) >= n:
            break
        beams, sums = new_beams, new_sums
        _reorder(cache, rows, model.device)
        step = tensor([[b[-1]] for b in beams], device=model.device)
        logits = model.decoder(step, cache).numpy()[:, -1]
    ended_any = bool(finished)
    if len(finished) < n:  # the length limit: unfinished beams compete too
        for seq, score in zip(beams, sums, strict=True):
            finished.setdefault((*seq, tokens.eot), score)
            if len(finished) >= n:
                break
    # openai-whisper ranks by the sum of log-probabilities over the length without eot
    best = max(finished, key=lambda k: finished[k] / max(1, len(k) - 1))
    sampled = [t for t in best if t != tokens.eot]
    return DecodeResult(sampled, finished[best] / (len(sampled) + 1), ended_any, no_speech, 0.0)


def compression_ratio(text):
    """Bytes of the text over bytes of its zlib compression: high for repeated text."""
    import zlib

    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


def accepted(result, opts, text_of):
    """openai-whisper's test of one decoding: kept unless its text compresses too well
    (repetition) or is too unlikely, except that an unlikely window whose <|nospeech|> is
    likely is kept too (it is silence, skipped afterwards)."""
    bad_ratio = (
        opts.compression_ratio_threshold is not None
        and compression_ratio(text_of(result.tokens)) > opts.compression_ratio_threshold
    )
    unlikely = opts.logprob_threshold is not None and result.avg_logprob < opts.logprob_threshold
    silent = (
        opts.no_speech_threshold is not None
        and result.no_speech_prob > opts.no_speech_threshold
        and unlikely
    )
    return silent or not (bad_ratio or unlikely)


def decode_with_fallback(
    model, encoder_out, tokens, opts, text_of, prefix=(), rng=None, first=None
):
    """openai-whisper's temperature fallback over opts.temperatures; the last result is
    kept when every temperature fails the thresholds. `first`: the result of the first
    temperature, already decoded (by the batched decoder)."""
    result, temperatures = first, opts.temperatures
    if first is not None:
        if accepted(first, opts, text_of):
            return first
        temperatures = temperatures[1:]
    for temperature in temperatures:
        if opts.beam_size > 1 and temperature == 0:
            result = beam_search(model, encoder_out, tokens, opts, prefix)
        else:
            result = greedy(model, encoder_out, tokens, opts, prefix, temperature, rng)
        if accepted(result, opts, text_of):
            break
    return result


def is_silence(result, opts):
    """openai-whisper's no-speech skip: <|nospeech|> likely and the text not."""
    if opts.no_speech_threshold is None or result.no_speech_prob <= opts.no_speech_threshold:
        return False
    return not (opts.logprob_threshold is not None and result.avg_logprob > opts.logprob_threshold)


@dataclass
class Segment:
    start: float
    end: float
    tokens: list
    text: str = ""
    avg_logprob: float = 0.0
    extra: dict = field(default_factory=dict)
    words: list | None = None  # whisper_words.Word, with word timestamps


def split_segments(sampled, tokens, offset, window_seconds):
    """(segments, seconds consumed) of one window's sampled tokens, as openai-whisper:
    consecutive timestamp pairs close segments; a window that ends on a single timestamp
    was fully consumed, otherwise the next window starts at the last closing timestamp."""
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
            segments.append(Segment(offset + start, offset + end, part))
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
            segments.append(Segment(offset, offset + duration, list(sampled)))
        consumed = window_seconds
    return segments, consumed
