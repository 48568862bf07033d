"""Opening the files a model directory holds, and the paths those files name.

Model files come from strangers: a path may be missing, a directory or a FIFO (whose
`open` blocks until a writer appears), a JSON file may nest ten thousand levels deep,
and an index may name `../../etc/passwd`. Everything here turns those into FormatError
naming the file (and the field), never a traceback or a hang.
"""

import json
import os
import stat

from ..errors import FormatError

# config.json, tokenizer_config.json, safetensors indexes: a few MB at most in practice.
MAX_JSON_BYTES = 256 * 1024 * 1024


class MissingFile(FormatError, FileNotFoundError):
    """A model file that does not exist (still a FileNotFoundError for callers that ask)."""


def _kind(mode):
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path, what="file"):
    """`path` opened for binary reading, refused unless it is a regular file.

    The file is opened without blocking and checked with fstat on the open descriptor,
    so a FIFO cannot make this wait and nothing can swap the file between check and
    use."""
    path = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise MissingFile(f"{what} {path!r} does not exist", path=path) from None
    except IsADirectoryError:
        raise FormatError(f"{what} {path!r} is a directory, not a file", path=path) from None
    except OSError as exc:
        raise FormatError(
            f"{what} {path!r} cannot be opened ({exc.strerror or exc})", path=path
        ) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FormatError(f"{what} {path!r} is {_kind(mode)}, not a regular file", path=path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_json(path, what="JSON file", max_bytes=MAX_JSON_BYTES):
    """The parsed JSON of a regular file, or FormatError naming the file and the reason
    (not UTF-8, not JSON, nested too deep for the parser, too large)."""
    with open_regular(path, what) as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise FormatError(f"{what} {path!r} is larger than {max_bytes} bytes", path=path)
    return parse_json(raw, path, what)


def parse_json(raw, path, what="JSON file"):
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
        return json.loads(text)
    except UnicodeDecodeError as exc:
        raise FormatError(
            f"{what} {path!r} is not UTF-8 ({exc.reason} at byte {exc.start})", path=path
        ) from None
    except RecursionError:
        raise FormatError(
            f"{what} {path!r} nests arrays or objects too deeply to parse", path=path
        ) from None
    except ValueError as exc:  # JSONDecodeError, and ints of more than 4300 digits
        raise FormatError(f"{what} {path!r} is not valid JSON ({exc})", path=path) from None


def path_inside(base, name, source, field):
    """`name` (a relative path read from the file `source`) joined to the directory
    `base`; FormatError unless the result, with every symlink resolved, stays inside
    `base` (also resolved). `field` names where in `source` the path was read."""

    def fail(why):
        return FormatError(
            f"{source}: field {field!r} names {name!r}, which {why}",
            path=source,
            field=field,
            name=name,
        )

    if not isinstance(name, str) or not name:
        raise FormatError(
            f"{source}: field {field!r} must be a non-empty file name, got {name!r}",
            path=source,
            field=field,
        )
    if "\0" in name:
        raise fail("contains a NUL byte")
    if os.path.isabs(name) or os.path.splitdrive(name)[0] or name.startswith(("/", "\\")):
        raise fail(f"is an absolute path; paths in a model's files stay inside {base!r}")
    joined = os.path.join(base, name)
    root = os.path.realpath(base)
    real = os.path.realpath(joined)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise fail(f"resolves to {real!r}, outside the model directory {root!r}")
    return joined


__all__ = [
    "MAX_JSON_BYTES",
    "MissingFile",
    "open_regular",
    "parse_json",
    "path_inside",
    "read_json",
]
