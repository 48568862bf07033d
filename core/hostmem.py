"""The host's memory, for refusing a request larger than it before numpy tries (with
overcommit the kernel would kill the process instead), and byte counts for people.

Its own module so that the tensor core (random.py) and the array backend share it without
the core naming a runtime."""

import os

_trim = []  # glibc's malloc_trim, or None where the C library has none (looked up once)


def host_memory_bytes():
    """Physical memory of this host, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def human_bytes(nbytes):
    """`nbytes` in the largest binary unit under 1024 of it: "12 bytes", "1.5 GiB"."""
    value = float(nbytes)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "bytes" else f"{int(value)} bytes"
        value /= 1024
    return f"{nbytes} bytes"


def trim_heap():
    """Hand the C heap's free pages back to the system (glibc's malloc_trim(0)); True
    where that was done. After a large free, glibc serves allocations of that size from
    its heap instead of fresh mappings (its mmap threshold follows the largest chunk
    freed), and a heap keeps what was freed in it: a 128-token SmolLM2-135M prompt left
    5.6 MiB of freed temporaries resident for the rest of the generation. The call took
    0.2-0.6 ms. False (nothing done) on other C libraries."""
    if not _trim:
        import ctypes

        try:
            _trim.append(ctypes.CDLL(None).malloc_trim)
        except (AttributeError, OSError, TypeError):  # no malloc_trim; Windows: no CDLL(None)
            _trim.append(None)
    if _trim[0] is None:
        return False
    _trim[0](0)
    return True
