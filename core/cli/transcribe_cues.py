"""SRT and VTT cues from word timestamps, as openai-whisper's subtitle writers make them
from words with `--max_words_per_line` and `--highlight_words` (and no line width, so a
cue never spans two segments):

- a segment's words go in runs of at most `max_words` (all its words when None), one cue
  per run, from the run's first word's start to its last word's end; its text is the
  words joined, the first one without its leading space;
- with `highlight`, each run gives one cue per word instead, timed as that word, showing
  the run's text with the word underlined (`<u>word</u>`, its leading space outside the
  tag); where a word starts later than the one before it ended (in printed milliseconds),
  a cue of the run's text, nothing underlined, fills the gap.

A segment without words gives no cue, as in openai-whisper's writer (ember's word timing
leaves no segment with text but without words).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    text: str


def _ms(seconds):
    return round(seconds * 1000)  # what SRT and VTT print: gaps smaller than this vanish


def _underlined(word):
    body = word.lstrip()
    return f"{word[: len(word) - len(body)]}<u>{body}</u>"


def segment_cues(segment, max_words=None, highlight=False):
    """The cues of one segment (its `words`: whisper_words.Word), in order."""
    words = segment.words or []
    if not words:
        return
    size = max_words or len(words)
    for at in range(0, len(words), size):
        run = words[at : at + size]
        texts = [run[0].word.strip()] + [w.word for w in run[1:]]
        plain = "".join(texts)
        if not highlight:
            yield Cue(run[0].start, run[-1].end, plain)
            continue
        last = run[0].start
        for i, word in enumerate(run):
            if _ms(word.start) != _ms(last):
                yield Cue(last, word.start, plain)
            shown = [_underlined(t) if j == i else t for j, t in enumerate(texts)]
            yield Cue(word.start, word.end, "".join(shown))
            last = word.end
