"""Hands LLVM's code pages back to the OS once a JIT kernel is in place.

llvmlite (under numba and llvm_f16) is one 170 MB shared library, and loading it pages
in most of its code: importing ``llvmlite.binding`` alone raised a process's RSS by
95 MB, the same again as Gemma 3 270M's whole working set beyond its 241 MiB file. Those
pages are needed only while LLVM compiles or links machine code; the kernels it made run
from memory of their own. So once a model's kernels are in place (llvm_f16 after its
build, array_qmatmul at the first product after a model's weights were placed), the
library's read-only mappings get ``madvise(MADV_PAGEOUT)`` (Linux 5.4+): their clean
pages leave the process (and, where no one else maps them, the page cache). Nothing is
lost: a page is read back from the file when LLVM next runs, and pages written since
mapping (relocations) are anonymous, which the call leaves be unless the machine has
swap. One call costs 0.5-10 ms (the more resident, the longer). It is called once per
batch of kernel loads, not after each: paging out between two loads made the second read
the pages back from disk (a 16-token SmolLM2 prompt that loaded its kernels one by one
went from 0.49 to 0.64 s).

Measured on Gemma 3 270M Q4_K_M with numba (a 128-token prompt, 8 decode steps): peak
RSS 448 -> 352 MiB. Elsewhere (macOS, Windows, a kernel before 5.4) it does nothing.
EMBER_COMPILER_PAGES=keep turns it off.
"""

import ctypes
import os
import sys
import threading

MADV_PAGEOUT = 21  # linux/mman.h, since Linux 5.4
LIBRARY = "libllvmlite"  # the file name of llvmlite's LLVM build
_state = {"libc": None, "usable": sys.platform.startswith("linux"), "listening": False}
_lock = threading.Lock()


def release():
    """Page out the LLVM library's read-only mappings; returns the bytes advised (0 where
    nothing was done)."""
    if not _state["usable"] or os.environ.get("EMBER_COMPILER_PAGES") == "keep":
        return 0
    ranges = _library_ranges()
    if not ranges:
        return 0
    libc = _libc()
    done = 0
    for start, end in ranges:
        if libc.madvise(start, end - start, MADV_PAGEOUT) != 0:
            _state["usable"] = False  # EINVAL: a kernel before 5.4; never try again
            return done
        done += end - start
    return done


def _library_ranges():
    """(start, end) of each mapping of LIBRARY that is not writable, from /proc/self/maps."""
    ranges = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and LIBRARY in fields[5] and "w" not in fields[1]:
                    start, end = fields[0].split("-")
                    ranges.append((int(start, 16), int(end, 16)))
    except OSError:
        _state["usable"] = False
    return ranges


def _libc():
    if _state["libc"] is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        libc.madvise.restype = ctypes.c_int
        _state["libc"] = libc
    return _state["libc"]


__all__ = ["LIBRARY", "MADV_PAGEOUT", "release"]
