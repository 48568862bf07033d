"""`ember detect` on a 10,000 x 10,000 JPEG or PNG is bounded by the letterbox, not the
image (ember.vision.images.read_for_size: the JPEG decoded at reduced scale, the PNG
resized row by row as it is inflated), so the process's peak RSS (its VmHWM) grows over
its peak on a small image by less than a quarter of the image's 300 MB as RGB. A whole
decode could not pass: its pixels alone are the image's size."""

import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from helpers import missing, require
from test_yolo_cli import files  # noqa: F401  (the tiny model: a fixture)

SIDE = 10_000


# `ember ARGS` in a child that reports its own peak RSS (VmHWM) as it ends: the child's
# own high-water mark, since wait4's ru_maxrss counts the pages the child shared with
# this (large) process before it exec'd
LAUNCH = """import sys
from ember.cli import main
try:
    code = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as fh:
        peak = next(line for line in fh if line.startswith("VmHWM:")).split()[1]
    sys.stderr.write(f"\\nVmHWM {peak}\\n")
sys.exit(code)
"""


def _peak_rss(*args):
    """(exit status, peak RSS in bytes, stdout, stderr) of `ember ARGS`."""
    if not os.path.exists("/proc/self/status"):
        missing("/proc/self/status (a process's own peak RSS)", "not Linux")
    r = subprocess.run(
        [sys.executable, "-c", LAUNCH, *args], capture_output=True, text=True, timeout=600
    )
    *rest, last = r.stderr.rstrip().splitlines()
    assert last.startswith("VmHWM "), r.stderr
    return r.returncode, int(last.split()[1]) * 1024, r.stdout, "\n".join(rest)


def _huge_png(path):
    """A SIDE x SIDE 8-bit RGB PNG of a smooth gradient, written a band of rows at a time."""
    from png_encode import SIG, chunk

    ramp = (np.arange(SIDE) * 255 // (SIDE - 1)).astype(np.uint8)
    deflate, idat = zlib.compressobj(1), []
    for top in range(0, SIDE, 500):
        band = np.empty((500, 1 + SIDE * 3), np.uint8)
        band[:, 0] = 0  # no row filter
        band[:, 1:] = np.repeat(ramp, 3)[None, :]
        band[:, 2::3] = ramp[top : top + 500, None]  # green follows the row
        idat.append(deflate.compress(band.tobytes()))
    idat.append(deflate.flush())
    ihdr = SIDE.to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])
    path.write_bytes(
        SIG + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"".join(idat)) + chunk(b"IEND", b"")
    )


@pytest.fixture(scope="module")
def huge(tmp_path_factory):
    Image = require("PIL.Image")
    tmp = tmp_path_factory.mktemp("huge")
    ramp = Image.linear_gradient("L")  # smooth: the files stay small, encoding quick
    big = Image.merge("RGB", [ramp.resize((SIDE, SIDE))] * 3)
    big.save(tmp / "big.jpg", quality=75)
    del big
    _huge_png(tmp / "big.png")
    ramp.convert("RGB").save(tmp / "small.jpg", quality=75)
    return tmp


@pytest.mark.parametrize("name", ["big.jpg", "big.png"])
def test_a_huge_image_costs_less_than_a_quarter_of_its_size(files, huge, name):  # noqa: F811
    _, model_dir, _, _ = files
    big, small = huge / name, huge / "small.jpg"
    code, base, _, err = _peak_rss("detect", str(small), "--model", model_dir)
    assert code == 0, err
    code, peak, out, err = _peak_rss("detect", str(big), "--model", model_dir, "--json")
    assert code == 0, err
    (result,) = json.loads(out)
    assert (result["width"], result["height"]) == (SIDE, SIDE)  # boxes are in its pixels
    image_bytes = SIDE * SIDE * 3
    assert peak - base < image_bytes / 4, (peak - base) / image_bytes
