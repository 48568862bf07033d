"""Word-level timestamps for Whisper segments, as faster-whisper's `word_timestamps=True`
(itself openai-whisper's method): the window's text tokens are decoded once more without
timestamps, the cross-attention of the model's alignment heads is aligned to the audio by
dynamic time warping (whisper_alignment.py), tokens are grouped into words by the
tokenizer (punctuation merged into its neighbours), and each word gets the time of its
first token's step on the path, its end the next word's, and the mean probability of its
tokens. faster-whisper's clean-ups follow: words longer than twice the median are cut at
sentence ends and after pauses, and a segment's start and end move to its words'.

The alignment heads come from the model directory (a CTranslate2 config.json or a Hugging
Face generation_config.json, `alignment_heads`), else the heads of the decoder's last half
of layers (what CTranslate2's converter stores when the checkpoint names none).
"""

import json
import os
import string
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError
from ..tensor import tensor
from .whisper_alignment import MEDIAN_FILTER_WIDTH, attention_matrix, dtw, softmax

# faster-whisper's defaults, CJK full-width marks included
PREPEND_PUNCTUATION = "\"'“¿([{-"
APPEND_PUNCTUATION = "\"'.。,，!！?？:：”)]}、"  # noqa: RUF001
SENTENCE_END = ".。!！?？"  # noqa: RUF001
POSITIONS_PER_SECOND = 50  # encoder positions: 100 mel frames per second, conv stride 2
FRAMES_PER_SECOND = 100
# written without spaces between words: words are split where the text is whole characters
NO_SPACE_LANGUAGES = {"zh", "ja", "th", "lo", "my", "yue"}


@dataclass
class Word:
    start: float
    end: float
    word: str
    probability: float


def alignment_heads(model):
    """(layer, head) pairs of the model's alignment heads, validated against its sizes."""
    cfg = model.cfg
    path, fmt = getattr(model, "path", None), getattr(model, "format", None)
    heads, source = None, path or "model"
    if path:
        source = os.path.join(
            path, "config.json" if fmt == "ctranslate2" else "generation_config.json"
        )
        if os.path.isfile(source):
            with open(source, encoding="utf-8") as fh:
                try:
                    heads = json.load(fh).get("alignment_heads")
                except (ValueError, AttributeError):
                    heads = None
    if heads is None:
        return [
            (layer, head)
            for layer in range(cfg.decoder_layers // 2, cfg.decoder_layers)
            for head in range(cfg.decoder_attention_heads)
        ]
    pairs = []
    for pair in heads if isinstance(heads, list) else [heads]:
        ok = (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
            and 0 <= pair[0] < cfg.decoder_layers
            and 0 <= pair[1] < cfg.decoder_attention_heads
        )
        if not ok:
            raise FormatError(
                f"{source}: alignment_heads holds {pair!r}, not a [layer, head] pair within "
                f"{cfg.decoder_layers} layers of {cfg.decoder_attention_heads} heads",
                path=source,
                field="alignment_heads",
            )
        pairs.append((pair[0], pair[1]))
    if not pairs:
        raise FormatError(
            f"{source}: alignment_heads is empty", path=source, field="alignment_heads"
        )
    return pairs


def _split_on_characters(tokenizer, ids):
    """(pieces, token lists): the shortest runs of tokens that decode to whole characters
    (a character's UTF-8 bytes may span tokens; U+FFFD in the full text stays one)."""
    full = tokenizer.decode(ids)
    pieces, groups, current, at = [], [], [], 0
    for token in ids:
        current.append(token)
        text = tokenizer.decode(current)
        bad = text.find("\ufffd")
        if bad < 0 or (at + bad < len(full) and full[at + bad] == "\ufffd"):
            pieces.append(text)
            groups.append(current)
            current = []
            at += len(text)
    return pieces, groups


def split_words(tokenizer, tokens, ids, language=None):
    """(words, token lists) of `ids` (text tokens, then eot): pieces that start with a
    space, are punctuation, or are special tokens start a new word; the others join the
    word before. Languages written without spaces are split per character."""
    pieces, groups = _split_on_characters(tokenizer, ids)
    if language in NO_SPACE_LANGUAGES:
        return pieces, groups
    words, word_tokens = [], []
    for piece, group in zip(pieces, groups, strict=True):
        if (
            not words
            or group[0] >= tokens.eot
            or piece.startswith(" ")
            or (piece.strip() in string.punctuation)
        ):
            words.append(piece)
            word_tokens.append(list(group))
        else:
            words[-1] += piece
            word_tokens[-1].extend(group)
    return words, word_tokens


def merge_punctuation(alignment, prepended=PREPEND_PUNCTUATION, appended=APPEND_PUNCTUATION):
    """Opening marks (a word that is a space and one of `prepended`) join the word after
    them, closing marks (one of `appended`, no space before) the word before; the emptied
    entries stay, with no text and no tokens, so the token counts still add up."""
    following = len(alignment) - 1
    for i in range(len(alignment) - 2, -1, -1):
        before, after = alignment[i], alignment[following]
        if before["word"].startswith(" ") and before["word"].strip() in prepended:
            after["word"] = before["word"] + after["word"]
            after["tokens"] = before["tokens"] + after["tokens"]
            before["word"], before["tokens"] = "", []
        else:
            following = i
    previous = 0
    for j in range(1, len(alignment)):
        before, after = alignment[previous], alignment[j]
        if not before["word"].endswith(" ") and after["word"] in appended:
            before["word"] += after["word"]
            before["tokens"] = before["tokens"] + after["tokens"]
            after["word"], after["tokens"] = "", []
        else:
            previous = j


def align(
    model,
    tokenizer,
    tokens,
    encoder_out,
    text,
    frames,
    sot_sequence,
    heads,
    language=None,
    width=MEDIAN_FILTER_WIDTH,
):
    """Words of `text` (text tokens of one window, whose audio is its first `frames` mel
    frames) as dicts word, tokens, start, end (seconds from the window's start) and
    probability; the decoder runs on the model's device, the alignment on the host."""
    if not text:
        return []
    ids = [*sot_sequence, tokens.no_timestamps, *text, tokens.eot]
    cache = model.decoder.new_cache(encoder_out)
    logits, scores = model.decoder.forward_aligned(tensor([ids], device=model.device), cache, heads)
    first = len(sot_sequence)  # the row of <|notimestamps|>, which predicts text[0]
    rows = logits.numpy()[0, first : first + len(text), : tokens.eot].astype(np.float32)
    probs = softmax(rows)[np.arange(len(text)), text]
    matrix = attention_matrix(scores.float().numpy()[0], frames // 2, width)
    path = np.array(dtw(-matrix[first : first + len(text) + 1]), dtype=np.int64)
    # each token's time is the first position the path reaches its row at
    row_time = np.zeros(len(text) + 1)
    seen, at = np.unique(path[:, 0], return_index=True)
    row_time[seen] = path[at, 1] / POSITIONS_PER_SECOND
    words, groups = split_words(tokenizer, tokens, text + [tokens.eot], language)
    if len(groups) <= 1:
        return []
    bounds = np.concatenate([[0], np.cumsum([len(g) for g in groups[:-1]])])
    return [
        {
            "word": word,
            "tokens": group,
            "start": float(row_time[a]),
            "end": float(row_time[b]),
            "probability": float(np.mean(probs[a:b])),
        }
        # the last group is eot's: it only bounds the word before
        for word, group, a, b in zip(words[:-1], groups[:-1], bounds[:-1], bounds[1:], strict=True)
    ]


def _cut_long_words(alignment):
    """(median, max) word duration; words longer than twice the median (at most 0.7 s)
    are cut at sentence ends, as faster-whisper does."""
    durations = np.array([w["end"] - w["start"] for w in alignment])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    longest = median * 2
    if len(durations):
        for i in range(1, len(alignment)):
            w, before = alignment[i], alignment[i - 1]
            if w["end"] - w["start"] > longest:
                if w["word"] in SENTENCE_END:
                    w["end"] = w["start"] + longest
                elif before["word"] in SENTENCE_END:
                    w["start"] = w["end"] - longest
    return median, longest


def _fit_segment(seg, words, last_speech, median, longest):
    """faster-whisper's clean-up of one segment's words: a first word long after a pause
    is shortened; the segment's start and end move to its words' unless a word runs
    more than 0.5 s past them."""
    first = words[0]
    second = words[1] if len(words) > 1 else None
    if first.end - last_speech > median * 4 and (
        first.end - first.start > longest
        or (second is not None and second.end - first.start > longest * 2)
    ):
        if second is not None and second.end - second.start > longest:
            boundary = max(second.end / 2, second.end - longest)
            first.end = second.start = boundary
        first.start = max(0, first.end - longest)
    if seg.start < first.end and seg.start - 0.5 > first.start:
        first.start = max(0, min(first.end - median, seg.start))
    else:
        seg.start = first.start
    last = words[-1]
    if seg.end > last.start and seg.end + 0.5 < last.end:
        last.end = max(last.start + median, seg.end)
    else:
        seg.end = last.end


class WordTimestamps:
    """Called by the transcription loop with each window's segments: sets `seg.words`,
    moves the segments' times to their words, and returns the mel frame the next window
    starts at (the last word's end, when the window did not end on a lone timestamp), or
    None to keep the timestamp's."""

    def __init__(self, model, tokenizer, tokens, sot_sequence, language=None):
        self.model, self.tokenizer, self.tokens = model, tokenizer, tokens
        self.sot_sequence = list(sot_sequence)
        self.language = language
        self.heads = alignment_heads(model)
        self.last_speech = 0.0

    def __call__(self, encoder_out, segments, frames, offset, sampled):
        if not segments:
            return None
        eot = self.tokens.eot
        texts = [[t for t in seg.tokens if t < eot] for seg in segments]
        alignment = align(
            self.model,
            self.tokenizer,
            self.tokens,
            encoder_out,
            [t for text in texts for t in text],
            frames,
            self.sot_sequence,
            self.heads,
            self.language,
        )
        median, longest = _cut_long_words(alignment)
        merge_punctuation(alignment)
        last_speech, at = self.last_speech, 0
        for seg, text in zip(segments, texts, strict=True):
            words, taken = [], 0
            while at < len(alignment) and taken < len(text):
                timing = alignment[at]
                if timing["word"]:
                    words.append(
                        Word(
                            round(offset + timing["start"], 2),
                            round(offset + timing["end"], 2),
                            timing["word"],
                            timing["probability"],
                        )
                    )
                taken += len(timing["tokens"])
                at += 1
            if words:
                _fit_segment(seg, words, last_speech, median, longest)
                last_speech = seg.end
            seg.words = words
        ends = [w.end for seg in segments for w in seg.words]
        end = ends[-1] if ends else segments[-1].end
        self.last_speech = end
        tb = self.tokens.timestamp_begin
        lone_final_stamp = len(sampled) >= 2 and sampled[-2] < tb <= sampled[-1]
        moved = round(end * FRAMES_PER_SECOND)
        # never back to (or before) this window's start, which would decode it again
        if lone_final_stamp or moved <= round(offset * FRAMES_PER_SECOND):
            return None
        return moved
