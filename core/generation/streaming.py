"""Turning a growing list of token ids into text deltas, and watching for stop strings.

Byte-level tokenizers split multi-byte characters across tokens, and SentencePiece-style
decoders drop a leading space when decoding from the middle of a sequence. So the
decoder re-decodes a short window that starts a few tokens back and emits only what
is new, holding back text while it ends in U+FFFD (an incomplete character).
"""


class IncrementalDecoder:
    def __init__(self, tokenizer, skip_special_tokens=True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids = []
        self._prefix = 0  # window start: decoding from here reproduces earlier text's end
        self._read = 0  # ids before this have been emitted as text

    def _decode(self, ids):
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_id):
        """Add one id; the text it completes ('' while a character is still partial)."""
        self.ids.append(int(token_id))
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            delta = after[len(before) :]
            self._prefix, self._read = self._read, len(self.ids)
            return delta
        return ""

    def flush(self):
        """Whatever is still held back (an incomplete character decodes as U+FFFD)."""
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        self._prefix = self._read = len(self.ids)
        return after[len(before) :] if len(after) > len(before) else ""


class StopStrings:
    """Holds back text that could be the start of a stop string; reports a match.

    feed(delta) returns (text safe to emit, stopped). After a stop, the text up to
    (not including) the stop string has been emitted and nothing more should be.
    """

    def __init__(self, stop_strings):
        self.stops = tuple(s for s in stop_strings if s)
        self.pending = ""
        self.stopped = False

    def feed(self, delta):
        if self.stopped:
            return "", True
        if not self.stops:
            return delta, False
        text = self.pending + delta
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.pending = ""
            self.stopped = True
            return text[:cut], True
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        self.pending = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold], False

    def flush(self):
        out, self.pending = self.pending, ""
        return "" if self.stopped else out
