"""The quantized matmul (GGUF blocks raw on the device, shaders/qmatmul.wgsl) runs in the
page (Pyodide + SwiftShader WebGPU) and matches numpy's x @ dequantize(W).T, and the
native backend's result where wgpu opens here; also under the 4 KiB-binding backend,
where the weight splits by output rows.

No GGUF model runs in the page (the GGUF loader and QTensor need numpy, which the page
does not have); the raw block bytes travel in the snippet as hex and go through the
backend primitive, which is pure Python."""
import base64

import numpy as np
import pytest

from test_kernels_in_page import capped_page  # noqa: F401  (fixture: the 4 KiB-binding backend)

from ember.io import quant
from ember.io.quant import BLOCK_SIZES, GGMLType

TYPES = [GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q6_K]
# Decoders added later, in the page too (SwiftShader: no shader-f16, so f16 fields decode
# from their bits): SmolLM2's Q4_1, Gemma 3's Q5_0, two K-quants; the other new types run
# natively in tests/test_wgpu_qmatmul_types.py (one WGSL module holds every decoder).
NEWER_TYPES = [GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q3_K, GGMLType.Q5_K]


def _case(t, n_out, n_in, rows, seed):
    rng = np.random.default_rng(seed)
    n_blocks = n_out * n_in // BLOCK_SIZES[t][0]
    raw = rng.integers(0, 256, size=(n_blocks, BLOCK_SIZES[t][1]), dtype=np.uint8)
    view = raw.view(quant._LAYOUTS[t]).reshape(-1)
    for name in quant._LAYOUTS[t].names:
        if quant._LAYOUTS[t][name] == np.dtype("<f2"):
            view[name] = (rng.standard_normal(n_blocks) * 0.01).astype(np.float16)
    raw = raw.reshape(-1)
    x = rng.uniform(-2, 2, size=(rows, n_in)).astype(np.float32)
    code = "\n".join([
        "import base64",
        "import ember",
        "from ember.layout import Layout",
        # hex, not base64: callers replace the word DEV in the snippet, and base64 text
        # can hold those letters (a Q5_1 case had it, corrupting 3 bytes of the weight)
        f"_raw = base64.b16decode({base64.b16encode(raw.tobytes()).decode()!r})",
        f"_x = ember.tensor({x.tolist()!r}, device=DEV)",
        f"_q = DEV.backend.upload_quantized(_raw, {int(t)}, ({n_out}, {n_in}))",
        "_st, _shape = DEV.backend.qmatmul(_x.storage, _x.layout, _q, ember.f32)",
        "ember.Tensor(_st, Layout(_shape), ember.f32, DEV).tolist()",
    ])
    w = quant.dequantize(raw, t, (n_out, n_in)).astype(np.float64)
    return code, x.astype(np.float64) @ w.T, np.abs(x).astype(np.float64) @ np.abs(w).T


def _check(got, ref, scale):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == ref.shape
    err = np.abs(got - ref)
    bound = 1e-4 * scale + 1e-4 * np.abs(ref) + 1e-30
    assert (err <= bound).all(), float((err / bound).max())


@pytest.mark.parametrize("t", TYPES + NEWER_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [3, 9])
def test_qmatmul_in_page_matches_numpy_and_native(t, rows, ember_page, reference_device):
    """3 rows: the tiled kernel; 9: W dequantized into a scratch buffer, f32 matmul."""
    code, ref, scale = _case(t, 70, 512, rows, seed=int(t) + rows)
    got = ember_page.run(code.replace("DEV", "dev"))
    _check(got, ref, scale)
    if rows >= 8:
        assert ember_page.run("any('MODE=dequant' in label and 'QTYPE=%s' in label "
                              "for label in dev.backend.labels.values())" % t.name.lower())
    if hasattr(reference_device.backend, "upload_quantized"):
        from snippets import run_here
        native = run_here(code.replace("DEV", "dev"), reference_device)
        np.testing.assert_allclose(np.asarray(got), np.asarray(native), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("t", [GGMLType.Q8_0, GGMLType.Q6_K], ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [2, 9])
def test_qmatmul_in_page_splits_a_weight_over_the_binding(t, rows, capped_page):
    code, ref, scale = _case(t, 40, 512, rows, seed=int(t) + 9 + rows)
    head, launch, last = code.replace("DEV", "capped").rsplit("\n", 2)
    got = capped_page.run(f"{head}\n_n0 = capped.backend.counters['dispatches']\n{launch}\n"
                          f"_n1 = capped.backend.counters['dispatches']\n[{last}, _n1 - _n0]")
    _check(got[0], ref, scale)
    assert got[1] > 1
