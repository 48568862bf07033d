"""SRT and VTT cues from word timestamps (`--max-words-per-line`, `--highlight-words`), as
openai-whisper's subtitle writers make them: hand-made segments and words with the cues
worked out by hand, the CLI's printing and its refusals, and real tiny.en on jfk.wav,
whose cues are timed exactly by the words the json output gives."""

import io
import json
import re
import subprocess
import sys

import pytest

from ember.cli import main
from ember.cli.transcribe_cues import Cue, segment_cues
from ember.models.whisper_decoding import Segment
from ember.models.whisper_words import Word
from packaged_fixtures import jfk_wav, whisper_tiny_en_dir  # noqa: F401


def _segment():
    """A segment whose own times (0.1 to 2.5) differ from its words' (0.0 to 2.0)."""
    words = [
        Word(0.00, 0.30, " And", 0.9),
        Word(0.30, 0.62, " so,", 0.9),
        Word(0.70, 0.90, " my", 0.9),
        Word(0.90, 1.20, " fellow", 0.9),
        Word(1.20, 2.00, " Americans.", 0.9),
    ]
    seg = Segment(0.1, 2.5, [1], " And so, my fellow Americans.")
    seg.words = words
    return seg


def test_without_a_limit_a_segment_is_one_cue_timed_by_its_words():
    assert list(segment_cues(_segment())) == [Cue(0.0, 2.0, "And so, my fellow Americans.")]


def test_runs_of_at_most_n_words_each_from_first_start_to_last_end():
    assert list(segment_cues(_segment(), max_words=2)) == [
        Cue(0.0, 0.62, "And so,"),
        Cue(0.70, 1.20, "my fellow"),
        Cue(1.20, 2.00, "Americans."),
    ]
    assert list(segment_cues(_segment(), max_words=9)) == list(segment_cues(_segment()))


def test_highlight_gives_one_cue_per_word_underlined_in_its_run():
    assert list(segment_cues(_segment(), max_words=2, highlight=True)) == [
        Cue(0.0, 0.30, "<u>And</u> so,"),
        Cue(0.30, 0.62, "And <u>so,</u>"),
        # 0.62 to 0.70 lies between two runs: no cue fills it
        Cue(0.70, 0.90, "<u>my</u> fellow"),
        Cue(0.90, 1.20, "my <u>fellow</u>"),
        Cue(1.20, 2.00, "<u>Americans.</u>"),
    ]


def test_a_pause_inside_a_run_shows_the_run_without_an_underline():
    seg = Segment(3.0, 4.0, [1], " ask not so")
    seg.words = [
        Word(3.00, 3.20, " ask", 0.9),
        Word(3.50, 3.80, " not", 0.9),
        Word(3.8004, 3.90, " so", 0.9),  # 0.4 ms after "not": the same printed time
    ]
    assert list(segment_cues(seg, highlight=True)) == [
        Cue(3.00, 3.20, "<u>ask</u> not so"),
        Cue(3.20, 3.50, "ask not so"),
        Cue(3.50, 3.80, "ask <u>not</u> so"),
        Cue(3.8004, 3.90, "ask not <u>so</u>"),
    ]


def test_a_segment_without_words_gives_no_cue():
    seg = Segment(0.0, 1.0, [1], " hm")
    assert list(segment_cues(seg)) == []
    seg.words = []
    assert list(segment_cues(seg, max_words=3, highlight=True)) == []


def _printed(fmt, max_words=None, highlight=False):
    from ember.cli.transcribe import _Printer
    from ember.cli.transcribe_progress import AudioProgress
    from ember.models.whisper_windows import FileTranscript

    second = Segment(3.0, 3.9, [2], " ask not")
    second.words = [Word(3.0, 3.2, " ask", 0.9), Word(3.5, 3.8, " not", 0.9)]
    out, err = io.StringIO(), io.StringIO()
    args = type(
        "Args",
        (),
        {
            "output_format": fmt,
            "files": ["a.wav"],
            "language": "en",
            "max_words_per_line": max_words,
            "highlight_words": highlight,
        },
    )
    files = [FileTranscript(5.0, "en", 1.0)]
    printer = _Printer(args, type("T", (), {"files": files}), out, err, AudioProgress(err, 5.0))
    for seg in (_segment(), second):
        files[0].segments.append(seg)
        printer.segment(0, seg)
    files[0].done = True
    printer.advance()
    return out.getvalue()


def test_srt_numbers_the_cues_across_segments():
    assert _printed("srt", max_words=3) == (
        "1\n00:00:00,000 --> 00:00:00,900\nAnd so, my\n\n"
        "2\n00:00:00,900 --> 00:00:02,000\nfellow Americans.\n\n"
        "3\n00:00:03,000 --> 00:00:03,800\nask not\n\n"
    )


def test_vtt_highlights_each_word_and_txt_is_unchanged():
    assert _printed("vtt", max_words=1, highlight=True) == (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:00.300\n<u>And</u>\n\n"
        "00:00:00.300 --> 00:00:00.620\n<u>so,</u>\n\n"
        "00:00:00.700 --> 00:00:00.900\n<u>my</u>\n\n"
        "00:00:00.900 --> 00:00:01.200\n<u>fellow</u>\n\n"
        "00:00:01.200 --> 00:00:02.000\n<u>Americans.</u>\n\n"
        "00:00:03.000 --> 00:00:03.200\n<u>ask</u>\n\n"
        "00:00:03.500 --> 00:00:03.800\n<u>not</u>\n\n"
    )
    # txt prints segments with their own times, whatever the word options
    assert _printed("txt", max_words=1, highlight=True) == (
        "[00:00:00.100 --> 00:00:02.500] And so, my fellow Americans.\n"
        "[00:00:03.000 --> 00:00:03.900] ask not\n"
    )


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "ember.cli", "transcribe", *map(str, args)],
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--highlight-words"], "--highlight-words needs --word-timestamps"),
        (["--max-words-per-line", "3"], "--max-words-per-line needs --word-timestamps"),
        (["--word-timestamps", "--max-words-per-line", "0"], "--max-words-per-line 0: must be 1"),
    ],
)
def test_word_options_are_refused_without_word_timestamps_or_below_one(tmp_path, flags, message):
    done = _cli(tmp_path / "a.wav", "--model", tmp_path, "--output-format", "srt", *flags)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert message in done.stderr


def _ms(clock):
    h, m, s, ms = map(int, re.split(r"[:.,]", clock))
    return ((h * 60 + m) * 60 + s) * 1000 + ms


def _cues(text):
    """(start ms, end ms, text) of each cue of printed SRT or VTT."""
    found = re.findall(r"(\d\d:\d\d:\d\d[.,]\d{3}) --> (\d\d:\d\d:\d\d[.,]\d{3})\n(.*)\n", text)
    return [(_ms(a), _ms(b), t) for a, b, t in found]


def test_tiny_en_cues_are_timed_by_the_json_words(whisper_tiny_en_dir, jfk_wav, capsys):  # noqa: F811
    argv = ["transcribe", jfk_wav, "--model", whisper_tiny_en_dir, "--word-timestamps"]
    assert main([*argv, "--output-format", "json"]) == 0
    segments = json.loads(capsys.readouterr().out)[jfk_wav]["segments"]
    words = [s["words"] for s in segments]
    assert sum(len(w) for w in words) >= 20  # the JFK sentence, word by word

    def ms(seconds):
        return round(seconds * 1000)

    assert main([*argv, "--output-format", "srt", "--max-words-per-line", "3"]) == 0
    want = [
        (ms(run[0]["start"]), ms(run[-1]["end"]), "".join(w["word"] for w in run).strip())
        for seg in words
        for run in (seg[i : i + 3] for i in range(0, len(seg), 3))
    ]
    assert _cues(capsys.readouterr().out) == want

    assert main([*argv, "--output-format", "vtt", "--highlight-words"]) == 0
    cues = [c for c in _cues(capsys.readouterr().out) if "<u>" in c[2]]
    flat = [w for seg in words for w in seg]
    assert [(a, b) for a, b, _ in cues] == [(ms(w["start"]), ms(w["end"])) for w in flat]
    assert [re.search("<u>(.*)</u>", t).group(1) for _, _, t in cues] == [
        w["word"].strip() for w in flat
    ]
