"""Compiling ember's hand-written LLVM IR (llvm_f16, llvm_math, llvm_norm, llvm_attention)
for this CPU through llvmlite alone, with the machine code kept in ember's cache for
later processes.

llvmlite is numba's LLVM binding (the ``ember[jit]`` extra installs it): it imports in
~0.03 s, where numba's import and first call cost ~0.45 s of a process. A module is
built at most once a process; `compile_module` runs LLVM's optimization passes only
when no cached machine code matches (the passes and code generation are most of a
build's time; with it cached, the IR is not even generated). Cached code is loaded
without LLVM where elf_objects takes it (Linux on x86-64), the CPU's description coming
from llvm_host's record: such a process never loads LLVM's library. Where LLVM did run,
`compiler_pages.release()` hands its code pages back after.
"""

import importlib
import importlib.util
import os
import sys
import threading
import warnings

from . import llvm_host
from .optional_jit import jit_disabled

_DIGEST = 32  # bytes of SHA-256 before a cached object's code
try:  # CPython's own SHA-256: hashlib's import maps OpenSSL's libcrypto (3.3 MiB resident)
    from _sha2 import sha256  # CPython 3.12+
except ImportError:
    try:
        from _sha256 import sha256  # CPython 3.11
    except ImportError:
        from hashlib import sha256
# Groups of kernel modules built together, each module with a `build()` returning its
# kernels (or None where this CPU cannot have them): a group at the first ask for any of
# its modules, then LLVM's code pages handed back once (compiler_pages). Built one by
# one, each build after a release read LLVM's pages back in (a Whisper cold start's
# second build took 60-84 ms instead of ~10). A module a model may not need (kernels for
# one family) belongs in a group of its own.
GROUPS = (
    (
        "llvm_f16",
        "llvm_math",
        "llvm_norm",
        "llvm_attention",
        "llvm_attention_rows",
        "llvm_spin",
        "llvm_decode_gemm",
    ),
    ("llvm_quant", "llvm_integer_gemm"),  # the ggml block types: GGUF language models only
    # convolutions (YOLO, SAM): ~4.6 s to build cold, a 200 KB object; a text or speech
    # model never asks for it (Whisper's conv1d keeps im2col)
    ("llvm_conv",),
)
_built: dict = {}
_lock = threading.Lock()


def kernels(name):
    """The kernels of module `name` (one of GROUPS'), or None: without llvmlite, with
    EMBER_JIT=0, on a CPU the module refuses, or where its build failed (a warning says
    why; callers then take their numpy path)."""
    if jit_disabled():
        return None
    if name not in _built:
        with _lock:
            if name not in _built:
                _build_group(next(g for g in GROUPS if name in g))
    return _built[name]


def is_built(name):
    """Whether module `name`'s kernels were built (and built here) in this process."""
    return _built.get(name) is not None


def _build_group(group):
    from . import compiler_pages

    built = dict.fromkeys(group)
    if importlib.util.find_spec("llvmlite") is not None:
        for name in group:
            try:
                built[name] = importlib.import_module(f"{__package__}.{name}").build()
            except Exception as exc:  # an LLVM that refuses the IR: numpy serves
                warnings.warn(f"{name}: kernels not built ({exc})", stacklevel=4)
        if "llvmlite.binding" in sys.modules:
            compiler_pages.release()  # the code is in place: LLVM's pages can go
    _built.update(built)


def llvm():
    """llvmlite.binding with the native target initialized, or None without llvmlite."""
    try:
        import llvmlite.binding as binding
    except ImportError:
        return None
    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    return binding


def host():
    """(triple, cpu name, feature string, {feature: enabled}) of this process's CPU, as
    LLVM names them (llvm_host: without LLVM where its record is kept)."""
    return llvm_host.host()


def compile_module(name, key, make_module, tuning=""):
    """An MCJIT engine holding the machine code of the llvmlite.ir.Module `make_module()`
    builds for this process's triple, optimized at -O3 with loop and SLP vectorization;
    or, where an earlier process kept that code in ember's cache, that code loaded
    without building the module at all (generating and printing the IR of nine
    unrolled convolution kernels, in a trial, took 0.38 s of a process; loading their
    object 5 ms): by elf_objects where it takes the object, else by MCJIT. Either has
    `get_function_address(name)`. `key` must name everything the IR depends on besides
    llvmlite and the CPU (see `source_key`); `tuning`, LLVM feature flags added to the
    CPU's for this module ("+fast-dpwssd"). Keep what it returns alive while its
    functions are called."""
    triple, cpu, flat, _ = host()
    if tuning:  # LLVM tuning flags a module asks for (llvm_integer_gemm's fast-dpwssd)
        flat = f"{flat},{tuning}" if flat else tuning
    cached = ObjectCache(name, key, triple, cpu, flat)
    if cached.code is not None:
        from . import elf_objects

        try:
            return elf_objects.LoadedObject(cached.code)
        except elf_objects.UnsupportedObject:
            pass  # another platform, or code this loader does not take: MCJIT links it
    binding = llvm()
    machine = binding.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=flat, opt=3, jit=True
    )
    if cached.code is not None:
        engine = binding.create_mcjit_compiler(
            binding.parse_assembly(f'target triple = "{triple}"'), machine
        )
        engine.add_object_file(binding.ObjectFileRef.from_data(cached.code))
        engine.finalize_object()
        return engine
    parsed = binding.parse_assembly(str(make_module()))
    parsed.verify()
    tuning = binding.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    passes = binding.create_pass_builder(machine, tuning)
    passes.getModulePassManager().run(parsed, passes)
    engine = binding.create_mcjit_compiler(parsed, machine)
    engine.set_object_cache(cached.store, cached.load)
    engine.finalize_object()
    return engine


def compile_kernels(module, make_ir, params=(), sources=(), tuning=""):
    """compile_module for a kernel module whose IR depends on its own source, llvm_ir's,
    the modules `sources` (others whose IR builders it calls) and `params`:
    `make_ir(triple)` builds the llvmlite.ir.Module (run only where nothing is cached).
    The engine is named after the module."""
    triple = host()[0]
    key = source_key(module, LLVM_IR, *sources, params=params)
    name = module.__name__.rsplit(".", 1)[-1]
    return compile_module(name, key, lambda: make_ir(triple), tuning)


# llvm_ir's source, read for the cache key without importing it (its import imports
# llvmlite.ir, ~6 ms that a process loading cached code has no use for)
LLVM_IR = os.path.join(os.path.dirname(__file__), "llvm_ir.py")


def source_key(*modules, params=()):
    """A cache key for IR generated by `modules` (modules, or their files' paths: their
    source text, so that any edit is another key) with `params`."""
    texts = []
    for module in modules:
        with open(getattr(module, "__file__", module), encoding="utf-8") as fh:
            texts.append(fh.read())
    return "\0".join(texts + [repr(params)])


class ObjectCache:
    """The machine code of one build, kept in ember's cache (jit/ under $EMBER_CACHE) so
    that later processes skip generating the IR, LLVM's passes and code generation. Its
    file name is the module's name and a hash of everything the code depends on (the
    IR generator's source and parameters, llvmlite's version, the target triple, CPU and
    features): another build gets another file. The
    file starts with the SHA-256 of the code after it, checked before LLVM sees the code
    (LLVM aborts the process on an object it cannot read). A file that fails the check is
    never trusted, nor replaced: this process compiles its own code and leaves the file as
    it is (it may not be ember's). A missing or unwritable cache only means compiling
    again."""

    def __init__(self, name, key, triple, cpu, features):
        import llvmlite

        from ..cache_dir import cache_dir

        key = "\0".join((key, llvmlite.__version__, triple, cpu, features))
        file = f"{name}-{sha256(key.encode()).hexdigest()[:32]}.o"
        self.path = os.path.join(cache_dir(), "jit", file)
        self.code = None
        try:
            with open(self.path, "rb") as fh:
                kept = fh.read()
        except OSError:
            return
        digest, code = kept[:_DIGEST], kept[_DIGEST:]
        if code and sha256(code).digest() == digest:
            self.code = code

    def load(self, module):
        return self.code

    def store(self, module, code):
        """Write the code where no file is yet: written whole under a name of this
        process's own, then linked into place, which fails where a file already is (one
        another process has just written, or one that is not ember's), so nothing is
        overwritten; the process's own name is removed either way."""
        if self.code is not None:
            return
        part, made = f"{self.path}.{os.getpid()}.part", False
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(part, "xb") as fh:  # "x": a file of that name is left alone
                made = True
                fh.write(sha256(code).digest() + code)
            os.link(part, self.path)
        except OSError:  # already there, unwritable, or no hard links here: not kept
            pass
        finally:
            if made:
                os.remove(part)
