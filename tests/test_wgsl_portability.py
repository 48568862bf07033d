"""WGSL that every WebGPU implementation accepts, not only naga (wgpu-py).

Chromium's Tint is stricter than naga in two ways that broke kernels in the page: a float
literal just past f32's range (`-3.4028235e38`, which naga rounds to -FLT_MAX) is an error,
and words the WGSL spec reserves (`target`, `filter`, `module`, ...) cannot name variables.
These checks read the shader sources, so they fail here, before a browser ever sees them.
"""
import re
import struct
from importlib import resources

import pytest

F32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
F16_MAX = 65504.0

# From the WGSL specification's list of reserved words (the ones a kernel might plausibly
# pick as a name; keywords such as `let` or `loop` fail everywhere anyway).
RESERVED = set("""
NULL Self abstract active alignas alignof as asm asm_fragment async attribute auto await
become cast catch class co_await co_return co_yield coherent column_major common compile
compile_fragment concept const_cast consteval constexpr constinit crate debugger decltype
delete demote demote_to_helper do dynamic_cast enum explicit export extends extern external
fallthrough filter final finally friend from fxgroup get goto groupshared highp impl
implements import inline instanceof interface layout lowp macro macro_rules match mediump
meta mod module move mut mutable namespace new nil noexcept noinline nointerpolation
noperspective null nullptr of operator package packoffset partition pass patch
pixelfragment precise precision premerge priv protected pub public readonly ref regardless
register reinterpret_cast require resource restrict self set shared sizeof smooth snorm
static static_assert static_cast std subroutine super target template this thread_local
throw trait try type typedef typeid typename typeof union unless unorm unsafe unsized use
using varying virtual volatile wgsl where with writeonly yield
""".split())

FLOAT_LITERAL = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+|\d+)[eE][+-]?\d+|\d+\.\d*|\.\d+)([fh]?)")
DECLARED = re.compile(r"\b(?:var(?:<[^>]*>)?|let|const|override|fn|alias|struct)\s+([A-Za-z_]\w*)")
PARAM_OR_MEMBER = re.compile(r"([A-Za-z_]\w*)\s*:(?!:)")


def shader_sources():
    files = sorted(p for p in resources.files("ember.shaders").iterdir()
                   if p.name.endswith(".wgsl"))
    return [(p.name, p.read_text()) for p in files]


def without_comments(text):
    return re.sub(r"//[^\n]*", "", text)


@pytest.mark.parametrize("name, text", shader_sources(), ids=[n for n, _ in shader_sources()])
def test_float_literals_fit_their_type(name, text):
    for match in FLOAT_LITERAL.finditer(without_comments(text)):
        value, suffix = abs(float(match.group(1))), match.group(2)
        limit = F16_MAX if suffix == "h" else F32_MAX
        assert value <= limit, (
            f"{name}: literal {match.group(0)} is outside the finite range of "
            f"{'f16' if suffix == 'h' else 'f32'}; Chromium's Tint rejects it (use "
            f"bitcast<f32>(0xff7fffffu) for -FLT_MAX)")


@pytest.mark.parametrize("name, text", shader_sources(), ids=[n for n, _ in shader_sources()])
def test_no_reserved_word_names_anything(name, text):
    code = without_comments(text)
    names = set(DECLARED.findall(code)) | set(PARAM_OR_MEMBER.findall(code))
    clash = sorted(names & RESERVED)
    assert not clash, f"{name}: WGSL reserves {clash}; Tint and naga refuse them as names"


def test_the_checks_catch_what_broke_before():
    assert not all(float(m.group(1)) <= F32_MAX
                   for m in FLOAT_LITERAL.finditer("var m = -3.4028235e38;"))
    assert set(DECLARED.findall("var target = 0u;")) & RESERVED == {"target"}
