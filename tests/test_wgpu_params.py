"""Kernel parameters are declared once (core/backends/webgpu/params.py): no WGSL reads a
parameter by a bare slot number, every slot a kernel reads is one its block declares, and
the Python packing refuses names the block does not have. No device is needed: these read
the sources and the declarations."""
import re
from importlib import resources
from pathlib import Path

import pytest

from ember.backends.webgpu import epilogue, kernels, matmul, params
from ember.backends.webgpu.params import BLOCKS, ParamBlock, ParamBlockError

# A parameter read by number: p(3u), pf(3u), pi(0), {{PARAM}}(1u), p(16u + ...) ...
BY_NUMBER = re.compile(r"(?:\bp|\bpf|\bpi|\{\{PARAM\}\})\(\s*\d+u?\s*[+)]")
SLOT_NAME = re.compile(r"\bP_[A-Z0-9_]+\b")
WEBGPU = Path(params.__file__).parent
MATMULS = ("matmul", "matmul_nn", "matmul_nt", "matmul_nt_sg")


def shader_names():
    return sorted(p.name[:-5] for p in resources.files("ember.shaders").iterdir()
                  if p.name.endswith(".wgsl") and p.name != "prelude.wgsl")


def test_the_scan_catches_reads_by_number():
    for text in ("p(3u)", "pf(10u)", "pi(0)", "{{PARAM}}(1u)", "p(16u + 4u * {{NB}}u)"):
        assert BY_NUMBER.search(text), text
    for text in ("p(P_ROWS)", "p(P_SHAPE + d)", "p(shp + d)", "pf(P_EPS)", "wrap_u8(3u)"):
        assert not BY_NUMBER.search(text), text


@pytest.mark.parametrize("path", sorted(resources.files("ember.shaders").iterdir(),
                                        key=lambda p: p.name), ids=lambda p: p.name)
def test_no_shader_reads_a_parameter_by_number(path):
    if not path.name.endswith(".wgsl"):
        return
    hits = [line for line in path.read_text().splitlines() if BY_NUMBER.search(line)]
    assert not hits, f"{path.name} reads parameters by slot number: {hits}"


def test_no_wgsl_fragment_in_python_reads_a_parameter_by_number():
    # Fragments pasted into templates (matmul's STORE_TILE, the epilogue, binary's LOAD_B,
    # reduce's RESULT) live in the op modules.
    for py in sorted(WEBGPU.glob("*.py")):
        hits = [line for line in py.read_text().splitlines() if BY_NUMBER.search(line)]
        assert not hits, f"{py.name} has WGSL reading parameters by number: {hits}"


def test_every_kernel_has_a_block():
    assert set(BLOCKS) == set(shader_names())
    assert set(BLOCKS) == set(kernels.BINDINGS)


@pytest.mark.parametrize("name", shader_names())
def test_every_slot_a_kernel_reads_is_declared(name):
    text = kernels.source(name)
    if name in MATMULS:
        epi = epilogue.Epilogue((None, 0, 1), "gelu", (None, 0, 1, 1))
        text += matmul.STORE_TILE + epi.wgsl()
    if name == "binary":
        text += "T(B[strided(i, {{ND}}u, P_SHAPE, P_B_STRIDES, p(P_B_OFF))])"
    if name == "reduce":
        text += "p(P_INDEX_BASE) pf(P_SCALE)"
    declared = {f"P_{n.upper()}" for n, _ in BLOCKS[name].fields}
    used = set(SLOT_NAME.findall(text))
    assert used <= declared, f"{name} reads undeclared slots {sorted(used - declared)}"


def test_rendered_consts_and_packing_agree():
    spec = {"NK": 2}
    slots = BLOCKS["norm"].slots(spec)
    consts = dict(re.findall(r"const P_([A-Z0-9_]+): u32 = (\d+)u;", slots.wgsl()))
    names = [n for n, _ in BLOCKS["norm"].fields]
    values = {n: 100 + i for i, n in enumerate(names)}
    values["kept_shape"] = [7, 8]
    values["kept_x_strides"] = [9, 10]
    packed = slots.pack(values)
    for n in names:
        first = packed[int(consts[n.upper()])]
        assert first == (values[n][0] if isinstance(values[n], list) else values[n]), n
    assert packed[int(consts["KEPT_SHAPE"]) + 1] == 8
    assert packed[int(consts["KEPT_X_STRIDES"]) + 1] == 10
    assert len(packed) == len(names) - 2 + 4


def test_kernels_render_their_slots():
    code = kernels.render("fill", "f32", {"S": "f32", "PARAM": "pf", "WG": 256, "EPT": 8})
    assert "const P_VALUE: u32 = 1u;" in code
    assert "{{" not in code


def _norm_values():
    return {n: ([1, 1] if size else 0) for n, size in BLOCKS["norm"].fields}


def test_packing_refuses_a_missing_parameter_naming_the_kernel():
    values = _norm_values()
    del values["eps"]
    with pytest.raises(ParamBlockError, match=r"kernel norm: parameters missing \['eps'\]"):
        BLOCKS["norm"].slots({"NK": 2}).pack(values)


def test_packing_refuses_an_unknown_parameter_naming_the_kernel():
    values = dict(_norm_values(), epsilon=1)
    with pytest.raises(ParamBlockError, match=r"kernel norm: .*unknown \['epsilon'\]"):
        BLOCKS["norm"].slots({"NK": 2}).pack(values)


def test_packing_refuses_an_array_of_the_wrong_length():
    values = dict(_norm_values(), kept_shape=[1, 2, 3])
    with pytest.raises(ParamBlockError, match="kernel norm: parameter kept_shape has 3"):
        BLOCKS["norm"].slots({"NK": 2}).pack(values)


def test_a_name_declared_twice_is_refused():
    with pytest.raises(ParamBlockError, match="kernel k: a parameter is declared twice"):
        ParamBlock("k", "n", ("n", "ND"))


def test_a_fragment_is_filled_before_it_is_pasted():
    # LOAD_B names {{ND}}: filled from the spec first, so the template needs one pass.
    spec = {"S": "f32", "SO": "f32", "RESULT": "a + b", "ND": 3, "WG": 256, "EPT": 8,
            "LOAD_B": "T(B[strided(i, {{ND}}u, P_SHAPE, P_B_STRIDES, p(P_B_OFF))])",
            "OVERFLOW": ""}
    code = kernels.render("binary", "f32", spec)
    assert "strided(i, 3u, P_SHAPE, P_B_STRIDES" in code
    # A fragment naming a fragment with placeholders is refused, not pasted half filled.
    with pytest.raises(KeyError, match="LOAD_B"):
        kernels.render("binary", "f32", dict(spec, LOAD_B="T({{MORE}})", MORE="{{ND}}u"))
