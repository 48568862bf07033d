"""glibc's malloc told to keep large freed blocks for reuse instead of handing them back
to the kernel after every op.

By default glibc serves a block above its mmap threshold (128 KiB at first, raised as
blocks are freed, at most 32 MiB) with a fresh mmap, and trims the heap's free top back
to the kernel; the next array of that size then page-faults all of its memory again. An
inference step allocates and frees the same large temporaries over and over (attention
score tiles, GEMM outputs, conv bands), so it paid the kernel every time: a Whisper
tiny.en encoder pass made 12,500 minor page faults (68,000 with numpy's huge pages off),
the first pass in a process 0.1-0.35 s of system time. With a fixed threshold of 32 MiB
and a trim threshold of 128 MiB, steady passes fault no memory at all and the first one
a third of it (encoder, first pass: 930 -> 620-790 ms; SmolLM2 Q4_1 prompt 179 -> 235
tok/s, decode 11.5 -> 13.6), peak RSS within 2% (271 -> 276 MB for a tiny.en transcript;
the same for SmolLM2). Memory a process freed stays in it, up to the trim threshold, for
its next arrays.

Threads share one arena (M_ARENA_MAX 1). glibc gives each thread that allocates an
arena of its own, and a block freed in one arena serves only its own thread's next
arrays: ember's pool threads (a prompt's weight chunks, a convolution's bands) kept
their peak in arenas of their own, which the fixed trim threshold never trims, beside
the main thread's (SmolLM2-135M's peak RSS 141.4 -> 140.6 MiB). The cost is a lock per
large allocation shared by the threads: a few a millisecond here (small blocks go
through each thread's own cache).

Only on glibc, once, when ember's CPU device is first made; a user's own setting wins
(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES in the environment; for
the arenas, MALLOC_ARENA_MAX), and EMBER_MALLOC=system leaves malloc as it is.
"""

import os

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
ARENAS = 1
MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its moving threshold (64-bit)
TRIM_THRESHOLD = 128 << 20
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")

_state = {"done": False, "applied": False}
_libc = []  # glibc's C library, or None on another (looked up once)


def _glibc():
    """The process's C library where it is glibc (musl's mallopt does nothing, and a
    platform without a C library to load by name has none of these), else None."""
    if not _libc:
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            libc.gnu_get_libc_version  # noqa: B018 (glibc only)
            libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            _libc.append(libc)
        except Exception:  # not glibc, or no C library to load (Windows: no CDLL(None))
            _libc.append(None)
    return _libc[0]


def keep_freed_memory():
    """Set the two thresholds and the arenas (see the module docstring); True where
    they were set."""
    if _state["done"]:
        return _state["applied"]
    _state["done"] = True
    if os.environ.get("EMBER_MALLOC", "").strip() == "system":
        return False
    if any(name in os.environ for name in USER_SETTINGS):
        return False
    libc = _glibc()
    if libc is None:  # malloc stays as it is
        return False
    ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    if "MALLOC_ARENA_MAX" not in os.environ:
        ok = libc.mallopt(M_ARENA_MAX, ARENAS) == 1 and ok
    _state["applied"] = ok
    return ok


def trim_heap():
    """Hand the C heap's free pages back to the system (glibc's malloc_trim(0)); True
    where that was done, False (nothing done) on other C libraries. Under the
    thresholds above the heap keeps what was freed in it: a 128-token SmolLM2-135M
    prompt left 5.6 MiB of freed temporaries resident for the rest of the generation.
    The call took 0.2-0.6 ms."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
