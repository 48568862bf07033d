"""LLVM's name for this process's CPU, kept so that a process with its kernels cached
needs no LLVM at all.

A kernel module's cached machine code is found by a key holding the target triple, the
CPU's name and its feature string, and the modules choose their IR by features (AVX-512's
16 lanes, F16C): all LLVM's answers (llvmlite.binding's host queries), which meant loading
LLVM's 170 MB library in every process only to ask. The first process that asks keeps
the answers in ember's cache (jit/host-<digest>) under what Linux says of the CPU in
/proc/cpuinfo (vendor, family, model, stepping, name and flags: the flags are the
features the kernel enabled) with llvmlite's version; a later process on the same CPU
reads them back. The record holds its fingerprint in full, so a digest's collision can
never give another CPU's answers. Elsewhere (no /proc/cpuinfo), LLVM is asked each time.
"""

import os
import sys

from ..cache_dir import cache_dir

# /proc/cpuinfo's fields of the first processor that name the CPU and what it may run
FIELDS = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags")
_answer = []  # the process's (triple, cpu, feature string, features), once known


def host():
    """(triple, cpu name, feature string, {feature: enabled}) of this process's CPU."""
    if not _answer:
        fingerprint = _fingerprint()
        answer = _read(fingerprint) if fingerprint else None
        if answer is None:
            answer = _ask_llvm()
            if fingerprint:
                _keep(fingerprint, answer)
        _answer.append((*answer, features_of(answer[2])))
    return _answer[0]


def features_of(flat):
    """{name: enabled} of an LLVM feature string ("+avx2,-avx512f,...")."""
    return {f[1:]: f[0] == "+" for f in flat.split(",") if f[:1] in "+-" and len(f) > 1}


def _ask_llvm():
    from .llvm_build import llvm

    binding = llvm()
    return (
        binding.get_process_triple(),
        binding.get_host_cpu_name(),
        binding.get_host_cpu_features().flatten(),
    )


def _fingerprint():
    """What identifies this CPU to the kernel and to llvmlite, as text; None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    import llvmlite

    lines = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break  # the first processor's block ends
                name, _, value = line.partition(":")
                lines[name.strip()] = value.strip()
    except OSError:
        return None
    if "flags" not in lines:
        return None
    return "\n".join(
        [f"llvmlite {llvmlite.__version__}", sys.platform]
        + [f"{k}: {lines.get(k, '')}" for k in FIELDS]
    )


def _path(fingerprint):
    import zlib

    digest = zlib.crc32(fingerprint.encode()) ^ (zlib.adler32(fingerprint.encode()) << 32)
    return os.path.join(cache_dir(), "jit", f"host-{digest:016x}")


def _read(fingerprint):
    """The kept (triple, cpu, feature string) for this fingerprint, or None."""
    try:
        with open(_path(fingerprint), encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    kept, sep, answer = text.rpartition("\n\n")
    fields = answer.split("\n")
    if not sep or kept != fingerprint or len(fields) != 3 or not all(fields):
        return None  # another CPU's record, or one that is not whole: ask LLVM
    return tuple(fields)


def _keep(fingerprint, answer):
    """Write the record where none is (never over a file: it may not be ember's)."""
    from .. import owned

    path = _path(fingerprint)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        owned.write_new(path, (fingerprint + "\n\n" + "\n".join(answer)).encode())
    except OSError:  # unwritable, or written meanwhile (NotOurs): asked again next time
        pass
