"""A one-line bar over the audio's duration for `ember transcribe`, on stderr when it is a
terminal (quiet otherwise: a pipe, a log file, a test), drawn like the corpus embedder's.
Segments go to stdout meanwhile: `clear()` before printing one and `draw()` after keeps
the bar below the text instead of through it."""

import time

WIDTH = 24
EVERY_S = 0.25  # redraw at most this often


class AudioProgress:
    def __init__(self, stream, total_seconds, enabled=None):
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.total = total_seconds
        self.done = {}  # file -> seconds of it decoded
        self.t0 = time.monotonic()
        self.shown = 0.0
        self.drawn = False

    def update(self, file, seconds):
        self.done[file] = max(seconds, self.done.get(file, 0.0))
        if time.monotonic() - self.shown >= EVERY_S:
            self.draw()

    def line(self):
        done = sum(self.done.values())
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        frac = min(done / self.total, 1.0) if self.total > 0 else 1.0
        speed = done / elapsed
        left = (self.total - done) / speed if speed > 0 else None
        eta = "--:--" if left is None else f"{int(left) // 60:02d}:{int(left) % 60:02d}"
        bar = "#" * int(frac * WIDTH)
        return (
            f"[{bar:<{WIDTH}}] {done:,.1f}/{self.total:,.1f} s of audio  "
            f"{speed:,.1f}x real time  ETA {eta}"
        )

    def draw(self):
        if self.enabled:
            self.shown = time.monotonic()
            self.stream.write("\r" + self.line() + "\x1b[K")
            self.stream.flush()
            self.drawn = True

    def clear(self):
        if self.enabled and self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = False

    def close(self):
        if self.enabled:
            self.draw()
            self.stream.write("\n")
            self.stream.flush()
