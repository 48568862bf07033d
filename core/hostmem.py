"""The host's memory, for refusing a request larger than it before numpy tries (with
overcommit the kernel would kill the process instead), and byte counts for people.

Its own module so that the tensor core (random.py) and the array backend share it without
the core naming a runtime."""

import os


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
