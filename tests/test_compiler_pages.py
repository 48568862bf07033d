"""LLVM's pages leave the process once the kernels are in place (backends/compiler_pages),
and the kernels a quantized model needs are built as its weights are placed, before any
is read (array_qmatmul.prepare)."""

import os
import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import missing
from test_qmatmul_cpu import assert_matmul_to_f32_rounding, jit, weight  # noqa: F401

from ember.backends import array_qmatmul as aq
from ember.backends import compiler_pages
from ember.io import quant
from ember.io.quant import GGMLType, StackedQTensor


def _kernel_version():
    return tuple(int(p) for p in platform.release().split(".")[:2] if p.isdigit())


@pytest.fixture
def linux_pageout():
    if not sys.platform.startswith("linux") or _kernel_version() < (5, 4):
        pytest.skip("MADV_PAGEOUT needs Linux 5.4 or newer; elsewhere release() does nothing")
    try:
        import llvmlite.binding  # noqa: F401
    except ImportError as exc:
        missing("llvmlite (the ember[jit] extra)", str(exc))


def _run(code, *args, **env):
    """Runs code in a fresh interpreter and returns its last printed line, split."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    )
    return out.stdout.strip().splitlines()[-1].split()


RESIDENT = """
    import ctypes, sys
    from ember.backends import compiler_pages

    ctypes.CDLL(sys.argv[1])  # its constructors page much of it in, as importing llvmlite does

    def resident_kib():
        total, mine = 0, False
        for line in open("/proc/self/smaps"):
            head = line.split()
            if not head[0].endswith(":"):
                mine = len(head) >= 6 and head[5] == sys.argv[1] and "w" not in head[1]
            elif mine and head[0] == "Rss:":
                total += int(head[1])
        return total

    before = resident_kib()
    advised = compiler_pages.release()
    print(before, resident_kib(), advised)
"""


@pytest.fixture
def own_llvm(tmp_path, linux_pageout):
    """A copy of llvmlite's library for one process: the page cache's pages of the
    installed one are shared with every process mapping it (this test run's own), and
    MADV_PAGEOUT leaves shared pages be."""
    import shutil
    from pathlib import Path

    import llvmlite.binding as llvm

    installed = Path(llvm.__file__).parent / llvm.ffi.get_library_name()
    copy = tmp_path / "libllvmlite-own.so"
    shutil.copyfile(installed, copy)
    return str(copy)


def test_release_hands_the_llvm_librarys_pages_back(own_llvm):
    before, after, advised = map(int, _run(RESIDENT, own_llvm))
    assert before > 10_000, f"loading the library paged in only {before} KiB of it"
    assert advised > before * 1024, "release() advised less than the library's mappings"
    assert after < before / 4, f"resident {before} KiB -> {after} KiB after release()"


def test_keep_turns_release_off(own_llvm):
    before, after, advised = map(int, _run(RESIDENT, own_llvm, EMBER_COMPILER_PAGES="keep"))
    assert advised == 0
    assert after > before * 0.9, f"resident {before} KiB -> {after} KiB with keep"


def test_kernels_compute_after_the_pages_went(linux_pageout, jit):
    """The compiled kernels built before a release still run after it, with their bits."""
    rng = np.random.default_rng(0)
    w = weight(rng, GGMLType.Q3_K, 6, 2)
    x = rng.standard_normal((2, w.shape[1])).astype(np.float32)
    before = aq.qmatmul_rows(x, w, np.empty((2, 6), np.float32), path="fused")
    compiler_pages.release()
    again = aq.qmatmul_rows(x, w, np.empty((2, 6), np.float32), path="fused")
    np.testing.assert_array_equal(before, again)
    assert_matmul_to_f32_rounding(again, x, quant.dequantize(w.raw, w.ggml_type, w.shape))


def test_release_elsewhere_does_nothing(monkeypatch):
    monkeypatch.setitem(compiler_pages._state, "usable", False)
    assert compiler_pages.release() == 0


class _Unreadable:
    """A weight whose bytes must not be read."""

    def __init__(self, ggml_type):
        self.ggml_type, self.shape = ggml_type, (4, 256)

    @property
    def raw(self):
        raise AssertionError("prepare() read the weight")


def test_prepare_builds_the_types_kernels_without_reading_the_weight(jit):
    from ember.backends import llvm_build

    aq.prepare(_Unreadable(GGMLType.Q2_K))
    assert llvm_build.is_built("llvm_quant")


def test_f16_weights_never_import_numba():
    """F16 is llvm_f16's: placing such weights (a Whisper checkpoint) must not import
    numba, a fifth of a second of a cold start and ~48 MB (the block types: tests/
    test_qmatmul_llvm_quant.py)."""
    out = _run(
        """
        import sys
        import numpy as np
        import ember
        from ember.io.quant import GGMLType, QTensor

        h = np.ones((4, 32), np.float16)
        ember.Device.cpu().backend.place_quantized(QTensor(h.view(np.uint8), GGMLType.F16, h.shape))
        print("numba" in sys.modules)
        """
    )
    assert out == ["False"]
