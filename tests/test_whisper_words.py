"""Word timestamps: dynamic time warping against a brute force over every path, the median
filter against a direct per-sample median, punctuation merging, and real tiny.en on
jfk.wav against faster-whisper's `word_timestamps=True` on the same files."""

import itertools
import json
import re

import numpy as np
import pytest

import ember
from ember.cli import main
from ember.models import whisper_words
from ember.models.whisper_alignment import dtw, median_filter, softmax
from ember.models.whisper_load import load_whisper
from ember.models.whisper_tokens import WhisperTokens
from ember.models.whisper_transcriber import WhisperTranscriber
from helpers import require
from whisper_random import tiny_whisper_config
from packaged_fixtures import jfk_wav, whisper_tiny_en_dir  # noqa: F401

RNG = np.random.default_rng(7)

# Word start/end tolerance against faster-whisper end to end. Its log-mel differs from
# ember's by design (computed on the unpadded audio, padded with zeros in the log domain),
# so the cross-attention differs slightly and the path may step a few encoder positions
# (0.02 s each) earlier or later; 0.1 s is five positions, a fraction of a short word.
WORD_TIME_TOLERANCE = 0.1
# The same difference moves token probabilities a little (measured up to 0.07 on an
# unlikely word, " ask" at 0.22 against 0.29; most words within 0.02).
WORD_PROBABILITY_TOLERANCE = 0.1


def _paths(n, m):
    """Every monotonic path (down, right or diagonal steps) from (0, 0) to (n-1, m-1)."""
    if (n, m) == (1, 1):
        yield [(0, 0)]
        return
    for di, dj in ((1, 1), (1, 0), (0, 1)):
        if n - di >= 1 and m - dj >= 1:
            for p in _paths(n - di, m - dj):
                yield [*p, (n - 1, m - 1)]


@pytest.mark.parametrize("n,m", [(1, 1), (1, 4), (3, 1), (2, 3), (3, 5), (4, 4), (5, 3)])
def test_dtw_finds_the_cheapest_path_of_a_brute_force(n, m):
    for _ in range(5):
        cost = RNG.standard_normal((n, m)).astype(np.float32)
        costs = {tuple(p): sum(float(cost[i, j]) for i, j in p) for p in _paths(n, m)}
        best = min(costs, key=costs.get)
        assert dtw(cost) == list(best)


def test_dtw_prefers_a_straight_step_when_the_diagonal_is_no_cheaper():
    # all costs equal: every step ties, and CTranslate2 then walks back horizontally first,
    # so the path goes down the first column and then along the last row
    path = dtw(np.zeros((3, 4), np.float32))
    assert path == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (2, 3)]


def _median_direct(x, width):
    half, n = width // 2, x.shape[-1]
    out = np.empty_like(x)
    for j in range(n):
        idx = []
        for k in range(-half, half + 1):
            r = abs(j + k)  # mirrored at both ends, the edge sample not repeated
            idx.append(r if r < n else 2 * (n - 1) - r)
        out[..., j] = np.median(x[..., idx], axis=-1)
    return out


@pytest.mark.parametrize("frames", [4, 7, 30])
def test_median_filter_is_the_median_of_each_mirrored_window(frames):
    x = RNG.standard_normal((2, 3, frames)).astype(np.float32)
    np.testing.assert_array_equal(median_filter(x, 7), _median_direct(x, 7))
    short = x[..., :3]  # no longer than width // 2: left as it is
    np.testing.assert_array_equal(median_filter(short, 7), short)


def _entries(*words):
    return [{"word": w, "tokens": [i]} for i, w in enumerate(words)]


def test_punctuation_joins_the_word_it_belongs_to():
    alignment = _entries(" He", " said", ' "', "yes", '"', ".", " (", "Then", ")", " ok", "?")
    whisper_words.merge_punctuation(alignment)
    kept = [(a["word"], a["tokens"]) for a in alignment if a["word"]]
    assert kept == [
        (" He", [0]),
        (" said", [1]),
        (' "yes".', [2, 3, 4, 5]),
        (" (Then)", [6, 7, 8]),
        (" ok?", [9, 10]),
    ]
    assert len(alignment) == 11  # emptied entries stay, so token counts still add up


def test_alignment_heads_come_from_the_directory_or_the_last_half(tmp_path):
    cfg = type("Cfg", (), {"decoder_layers": 4, "decoder_attention_heads": 3})()
    model = type("Model", (), {"cfg": cfg, "path": str(tmp_path), "format": "huggingface"})()
    assert whisper_words.alignment_heads(model) == [(2, 0), (2, 1), (2, 2), (3, 0), (3, 1), (3, 2)]
    (tmp_path / "generation_config.json").write_text(json.dumps({"alignment_heads": [[1, 2]]}))
    assert whisper_words.alignment_heads(model) == [(1, 2)]
    (tmp_path / "generation_config.json").write_text(json.dumps({"alignment_heads": [[4, 0]]}))
    with pytest.raises(ember.FormatError, match="alignment_heads holds \\[4, 0\\]"):
        whisper_words.alignment_heads(model)


def test_cross_attention_scores_are_transformers_attention_before_softmax(device, tmp_path):
    """forward_aligned on a tiny random checkpoint: the logits of forward, and scores whose
    softmax is transformers' cross-attention of those heads (output_attentions)."""
    torch = require("torch")
    transformers = require("transformers")
    tokens = WhisperTokens.by_layout(100, ("en",), multilingual=False)
    torch.manual_seed(0)
    cfg = tiny_whisper_config(
        transformers, tokens, suppress_tokens=[], begin_suppress_tokens=[tokens.eot]
    )
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    model.set_attn_implementation("eager")  # the only one that returns attention weights
    model.save_pretrained(tmp_path)
    features = torch.randn(1, 80, 60, generator=torch.Generator().manual_seed(1))
    ids = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = model(input_features=features, decoder_input_ids=ids, output_attentions=True)
    heads = [(0, 1), (1, 0), (1, 3)]
    expected = np.stack([out.cross_attentions[layer][0, head].numpy() for layer, head in heads])
    em = load_whisper(tmp_path, device=device)
    enc = em.encoder(ember.tensor(features.numpy(), device=device))
    logits, scores = em.decoder.forward_aligned(
        ember.tensor(ids.numpy(), device=device), em.decoder.new_cache(enc), heads
    )
    tol = 1e-4 if device.kind == "cpu" else 1e-3
    np.testing.assert_allclose(logits.numpy(), out.logits.numpy(), rtol=0, atol=tol)
    assert tuple(scores.shape) == (1, 3, 6, 30)
    np.testing.assert_allclose(softmax(scores.numpy()[0]), expected, rtol=0, atol=tol)


@pytest.fixture(scope="module")
def tiny(whisper_tiny_en_dir):  # noqa: F811
    return WhisperTranscriber.from_dir(whisper_tiny_en_dir, device=ember.Device.cpu())


def test_words_split_on_spaces_and_punctuation(tiny):
    ids = tiny.tokenizer.encode(" And so, my fellow Americans", add_special_tokens=False).ids
    words, groups = whisper_words.split_words(tiny.tokenizer, tiny.tokens, ids + [tiny.tokens.eot])
    assert words == [" And", " so", ",", " my", " fellow", " Americans", ""]
    assert [t for g in groups for t in g] == ids + [tiny.tokens.eot]


def test_alignment_matches_ctranslate2_on_the_same_features(tiny, jfk_wav):  # noqa: F811
    """ember's model and alignment given faster-whisper's very features and text: the same
    DTW path as CTranslate2's `align` and the same token probabilities."""
    fw = require("faster_whisper")
    from faster_whisper.audio import decode_audio, pad_or_trim
    from faster_whisper.feature_extractor import FeatureExtractor

    peer = fw.WhisperModel(tiny.model.path, device="cpu", compute_type="float32")
    feats = FeatureExtractor(feature_size=tiny.model.cfg.num_mel_bins)(decode_audio(jfk_wav))
    frames = feats.shape[-1] - 1
    window = pad_or_trim(feats[:, :frames])[None].astype(np.float32)
    text = tiny.tokenizer.encode(
        " And so my fellow Americans, ask not what your country can do for you.",
        add_special_tokens=False,
    ).ids
    sot = tiny.tokens.prompt(None, "transcribe", timestamps=True)
    theirs = peer.model.align(peer.encode(window), sot, [text], frames, median_filter_width=7)[0]
    heads = whisper_words.alignment_heads(tiny.model)
    words = whisper_words.align(
        tiny.model,
        tiny.tokenizer,
        tiny.tokens,
        tiny.model.encoder(ember.tensor(window)),
        text,
        frames,
        sot,
        heads,
    )
    # the times the path gives each token, from CTranslate2's (token, position) pairs
    pairs = np.array(theirs.alignments)
    first = np.unique(pairs[:, 0], return_index=True)[1]
    their_time = pairs[first, 1] / 50
    starts = [w["start"] for w in words]
    bounds = np.cumsum([0] + [len(w["tokens"]) for w in words[:-1]])
    np.testing.assert_allclose(starts, their_time[bounds], atol=0.021)  # at most one position
    probs = np.array(theirs.text_token_probs)
    np.testing.assert_allclose(
        [w["probability"] for w in words],
        [probs[a:b].mean() for a, b in zip(bounds, [*bounds[1:], len(text)], strict=True)],
        atol=2e-3,
    )


def _bare(word):
    return re.sub(r"[^a-z]", "", word.lower())


def _words_of(segments):
    return [(w.word, w.start, w.end, w.probability) for s in segments for w in s.words]


def test_tiny_en_word_timestamps_match_faster_whisper(tiny, jfk_wav, capsys):  # noqa: F811
    fw = require("faster_whisper")
    mine = list(tiny.transcribe(jfk_wav, fallback=False, word_timestamps=True))
    peer = fw.WhisperModel(tiny.model.path, device="cpu", compute_type="float32")
    theirs, _ = peer.transcribe(
        jfk_wav,
        beam_size=1,
        temperature=0.0,
        language="en",
        vad_filter=False,
        word_timestamps=True,
    )
    theirs = list(theirs)
    a, b = _words_of(mine), _words_of(theirs)
    # the same words; the model's own punctuation may differ with the features (ember's
    # greedy text ends "country.", faster-whisper's "country")
    assert [_bare(w[0]) for w in a] == [_bare(w[0]) for w in b]
    assert len(a) == 22  # "And so my fellow Americans ask not what ..." word by word
    starts = np.array([w[1] for w in a]) - [w[1] for w in b]
    ends = np.array([w[2] for w in a]) - [w[2] for w in b]
    assert np.abs(starts).max() <= WORD_TIME_TOLERANCE + 1e-9, starts
    assert np.abs(ends).max() <= WORD_TIME_TOLERANCE + 1e-9, ends
    np.testing.assert_allclose(
        [w[3] for w in a], [w[3] for w in b], atol=WORD_PROBABILITY_TOLERANCE
    )
    for w in a:  # words follow each other inside their segment
        assert 0 <= w[1] <= w[2] <= 11.0
    assert all(x[2] <= y[1] + 1e-9 for x, y in itertools.pairwise(a))
    # segments take their words' start and end, as faster-whisper's do
    assert abs(mine[0].start - theirs[0].start) <= WORD_TIME_TOLERANCE
    assert abs(mine[-1].end - theirs[-1].end) <= WORD_TIME_TOLERANCE

    # the CLI puts the words in its JSON output
    argv = [
        "transcribe",
        jfk_wav,
        "--model",
        tiny.model.path,
        "--no-fallback",
        "--word-timestamps",
        "--output-format",
        "json",
    ]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)[jfk_wav]["segments"]
    words = [w["word"] for s in printed for w in s["words"]]
    assert words == [w[0] for w in a]
    assert [_bare(w) for w in words[:3]] == ["and", "so", "my"]
