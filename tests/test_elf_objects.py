"""Cached kernels load without LLVM (backends/elf_objects, llvm_host): an object LLVM
compiled runs loaded by elf_objects with MCJIT's results; a later process on a warm
cache never imports llvmlite's binding; CPU records are kept once, never overwritten, and
another CPU's or a broken one is not believed; any object the loader does not take is
refused with UnsupportedObject (and compiled instead), never loaded half-way."""

import ctypes
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="compiled kernels need llvmlite (the jit extra)")

from ember.backends import elf_objects, llvm_build, llvm_host  # noqa: E402

needs_loader = pytest.mark.skipif(
    not elf_objects.supported(), reason="elf_objects loads objects on Linux x86-64 only"
)


def _module(triple):
    """A kernel with what LLVM's objects refer to: a vector constant (a constant pool),
    a call of another function of the module, and a zero fill long enough to become a
    memset call: void f(float *out, i64 n) -> out[i] = i * 1.5 + 0.25 after zeroing it."""
    from llvmlite import ir

    f32, i64 = ir.FloatType(), ir.IntType(64)
    m = ir.Module()
    m.triple = triple
    scale = ir.Function(m, ir.FunctionType(f32, [f32]), "test_scale")
    b = ir.IRBuilder(scale.append_basic_block())
    b.ret(b.fadd(b.fmul(scale.args[0], f32(1.5)), f32(0.25)))
    fill = ir.Function(m, ir.FunctionType(ir.VoidType(), [f32.as_pointer(), i64]), "test_fill")
    out, n = fill.args
    b = ir.IRBuilder(fill.append_basic_block("entry"))
    memset = m.declare_intrinsic("llvm.memset", [ir.IntType(8).as_pointer(), i64])
    b.call(memset, [b.bitcast(out, ir.IntType(8).as_pointer()), ir.IntType(8)(0),
                    b.mul(n, i64(4)), ir.IntType(1)(0)])
    loop, done = fill.append_basic_block("loop"), fill.append_basic_block("done")
    b.cbranch(b.icmp_signed(">", n, i64(0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(i64(0), fill.entry_basic_block)
    b.store(b.call(scale, [b.sitofp(i, f32)]), b.gep(out, [i]))
    nxt = b.add(i, i64(1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return m


def _fill(engine, n):
    f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("test_fill")
    )
    out = np.full(n, np.nan, np.float32)
    f(out.ctypes.data, n)
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE", str(tmp_path))
    return tmp_path


@needs_loader
def test_an_object_llvm_compiled_runs_loaded_without_llvm(cache):
    triple = llvm_build.host()[0]
    key = f"test_elf_objects {os.getpid()}"
    built = llvm_build.compile_module("test_elf", key, lambda: _module(triple))
    assert not isinstance(built, elf_objects.LoadedObject)  # compiled, and kept
    loaded = llvm_build.compile_module("test_elf", key, lambda: pytest.fail("not cached"))
    assert isinstance(loaded, elf_objects.LoadedObject)
    want = np.arange(300, dtype=np.float32) * np.float32(1.5) + np.float32(0.25)
    np.testing.assert_array_equal(_fill(built, 300), want)
    np.testing.assert_array_equal(_fill(loaded, 300), want)
    assert loaded.get_function_address("no_such_function") == 0


@needs_loader
def test_a_warm_cache_builds_every_kernel_without_llvmlites_binding():
    script = textwrap.dedent(
        """
        import sys
        from ember.backends import llvm_build, elf_objects
        for group in llvm_build.GROUPS:
            for name in group:
                llvm_build.kernels(name)
        print(llvm_build.is_built("llvm_quant"), "llvmlite.binding" in sys.modules)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "EMBER_JIT"}
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=env, check=True).stdout.split()
        for _ in range(2)  # the first may compile (a cold cache) and keep the code
    ]
    assert runs[1] == ["True", "False"], runs


@needs_loader
def test_the_loaded_quantized_kernels_give_mcjits_bits(cache):
    """llvm_quant's real object, loaded both ways (the cache is this test's own: the
    first build compiles through MCJIT, the second loads the kept object)."""
    from ember.backends import llvm_quant
    from ember.io.quant import GGMLType

    from test_qmatmul_cpu import weight

    compiled = llvm_quant.build()
    loaded = llvm_quant.build()
    assert not isinstance(compiled[int(GGMLType.Q4_K)]._engine, elf_objects.LoadedObject)
    assert isinstance(loaded[int(GGMLType.Q4_K)]._engine, elf_objects.LoadedObject)
    rng = np.random.default_rng(0)
    for t in (GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q8_0):
        w = weight(rng, t, 9, 2)
        x = rng.standard_normal((3, w.shape[1])).astype(np.float32)
        outs = []
        for kernels in (compiled, loaded):
            k = kernels[int(t)]
            out = np.empty((3, 9), np.float32)
            k.dot(k.weight_rows(w), x, out, 0, 9)
            outs.append(out)
        np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


# --- what the loader refuses -----------------------------------------------------------------
@pytest.fixture(scope="module")
def an_object():
    """A real object's bytes: the test module compiled to machine code."""
    binding = llvm_build.llvm()
    triple, cpu, flat, _ = llvm_build.host()
    machine = binding.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=flat, opt=2, jit=True
    )
    return machine.emit_object(binding.parse_assembly(str(_module(triple))))


def _sections(code):
    shoff, shnum = struct.unpack_from("<Q", code, 0x28)[0], struct.unpack_from("<H", code, 0x3C)[0]
    return [(shoff + i * 64, struct.unpack_from("<IIQ", code, shoff + i * 64)) for i in range(shnum)]


def _patched(code, at, fmt, value):
    code = bytearray(code)
    struct.pack_into(fmt, code, at, value)
    return bytes(code)


@needs_loader
@pytest.mark.parametrize(
    "spoil, reason",
    [
        (lambda c: c[:40], "shorter than an ELF header"),
        (lambda c: b"\x7fELG" + c[4:], "not a little-endian 64-bit ELF"),
        (lambda c: _patched(c, 0x12, "<H", 183), "not an x86-64 relocatable"),  # aarch64
        (lambda c: _patched(c, 0x10, "<H", 3), "not an x86-64 relocatable"),  # a shared object
        (lambda c: _patched(c, 0x28, "<Q", len(c)), "section headers beyond the file"),
    ],
)
def test_a_malformed_object_is_refused_by_name(an_object, spoil, reason):
    with pytest.raises(elf_objects.UnsupportedObject, match=reason):
        elf_objects.LoadedObject(spoil(an_object))


@needs_loader
def test_a_writable_section_an_unknown_symbol_or_relocation_is_refused(an_object):
    sections = _sections(an_object)
    alloc = next(at for at, (_, kind, flags) in sections if flags & 2 and kind == 1)
    flags_at = alloc + 8
    writable = _patched(an_object, flags_at, "<Q", 0x3)
    with pytest.raises(elf_objects.UnsupportedObject, match="writable section"):
        elf_objects.LoadedObject(writable)
    rela = [at for at, (_, kind, _) in sections if kind == 4]
    assert rela, "the test object has relocations"
    offset = struct.unpack_from("<Q", an_object, rela[0] + 24)[0]
    info = struct.unpack_from("<Q", an_object, offset + 8)[0]
    odd = _patched(an_object, offset + 8, "<Q", (info >> 32) << 32 | 10)  # R_X86_64_32
    with pytest.raises(elf_objects.UnsupportedObject, match="relocation type 10"):
        elf_objects.LoadedObject(odd)
    memset = an_object.find(b"memset\0")
    assert memset > 0, "the test object calls memset"
    with pytest.raises(elf_objects.UnsupportedObject, match="external symbol 'system'"):
        elf_objects.LoadedObject(an_object[:memset] + b"system" + an_object[memset + 6 :])


@needs_loader
def test_every_truncation_is_refused_or_loads(an_object):
    for end in range(0, len(an_object), 7):
        try:
            elf_objects.LoadedObject(an_object[:end])
        except elf_objects.UnsupportedObject:
            pass


# --- llvm_host's record -----------------------------------------------------------------------
@pytest.fixture
def fresh_host(cache, monkeypatch):
    monkeypatch.setattr(llvm_host, "_answer", [])
    fingerprint = llvm_host._fingerprint()
    if fingerprint is None:
        pytest.skip("no /proc/cpuinfo: LLVM is asked in every process")
    return fingerprint


def test_the_cpus_record_is_kept_once_and_read_back(fresh_host, monkeypatch):
    answer = llvm_host.host()
    path = llvm_host._path(fresh_host)
    assert os.path.isfile(path)
    monkeypatch.setattr(llvm_host, "_answer", [])
    monkeypatch.setattr(llvm_host, "_ask_llvm", lambda: pytest.fail("LLVM asked again"))
    assert llvm_host.host() == answer
    triple, cpu, flat, features = answer
    assert triple and cpu and flat.startswith(("+", "-"))
    assert all(features[f[1:]] == (f[0] == "+") for f in flat.split(","))


@pytest.mark.parametrize(
    "record",
    [
        "another cpu\n\nx86_64-unknown-linux-gnu\nzen9\n+avx",  # another fingerprint
        "{fp}\n\nx86_64-unknown-linux-gnu\n\n+avx",  # a field missing
        "{fp}",  # cut short
        b"\xff\xfe",  # not text
    ],
)
def test_a_record_of_another_cpu_or_a_broken_one_is_not_believed_nor_replaced(
    fresh_host, record
):
    path = llvm_host._path(fresh_host)
    os.makedirs(os.path.dirname(path))
    data = record if isinstance(record, bytes) else record.format(fp=fresh_host).encode()
    with open(path, "wb") as fh:
        fh.write(data)
    triple, cpu, flat, _ = llvm_host.host()
    assert (triple, cpu, flat) == llvm_host._ask_llvm()
    with open(path, "rb") as fh:
        assert fh.read() == data  # not ember's to replace
