"""A one-line progress bar on a terminal: rows done, rows/s, ETA. Quiet when the stream
is not a terminal (a log file, a pipe, a test)."""

import time

WIDTH = 24
EVERY_S = 0.25  # redraw at most this often: a redraw per window would flood a slow tty


class Progress:
    def __init__(self, stream, total=None, done=0, enabled=None):
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.total = total
        self.done = done
        self.start_done = done
        self.t0 = time.monotonic()
        self.shown = 0.0

    def update(self, rows):
        self.done += rows
        now = time.monotonic()
        if self.enabled and now - self.shown >= EVERY_S:
            self.shown = now
            self.stream.write("\r" + self.line(now) + "\x1b[K")
            self.stream.flush()

    def line(self, now):
        elapsed = max(now - self.t0, 1e-9)
        rate = (self.done - self.start_done) / elapsed
        text = f"{self.done:,} rows  {rate:,.0f} rows/s"
        if self.total:
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(frac * WIDTH)
            left = (self.total - self.done) / rate if rate > 0 else float("inf")
            eta = "--:--" if left == float("inf") else f"{int(left) // 60:02d}:{int(left) % 60:02d}"
            text = (
                f"[{bar:<{WIDTH}}] {self.done:,}/{self.total:,} rows  {rate:,.0f} rows/s  ETA {eta}"
            )
        return text

    def close(self):
        if self.enabled:
            self.stream.write("\r" + self.line(time.monotonic()) + "\x1b[K\n")
            self.stream.flush()
