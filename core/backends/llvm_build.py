"""Compiling ember's hand-written LLVM IR (llvm_f16, llvm_conv) for this CPU through
llvmlite alone, with the machine code kept in ember's cache for later processes.

llvmlite is numba's LLVM binding (the ``ember[jit]`` extra installs it): it imports in
~0.03 s, where numba's import and first call cost ~0.45 s of a process. A module is
built at most once a process; `compile_module` runs LLVM's optimization passes only
when no cached machine code matches (the passes and code generation are most of a
build's time), and `compiler_pages.release()` hands LLVM's code pages back after.
"""

import hashlib
import importlib
import os
import threading
import warnings

_DIGEST = 32  # bytes of SHA-256 before a cached object's code
# The modules of kernels built together, each with a `build()` returning its kernels (or
# None where this CPU cannot have them): all at the first ask for any, then LLVM's code
# pages handed back once (compiler_pages). Built one by one, each build after a release
# read LLVM's pages back in (a Whisper cold start's second build took 60-84 ms instead of
# ~10).
MODULES = ("llvm_f16", "llvm_math")
_built: dict = {}
_lock = threading.Lock()


def kernels(name):
    """The kernels of module `name` (one of MODULES), or None: without llvmlite, with
    EMBER_JIT=0, on a CPU the module refuses, or where its build failed (a warning says
    why; callers then take their numpy path)."""
    if os.environ.get("EMBER_JIT", "1") == "0":
        return None
    if not _built:
        with _lock:
            if not _built:
                _build_all()
    return _built.get(name)


def _build_all():
    from . import compiler_pages

    built = {}
    if llvm() is not None:
        for name in MODULES:
            try:
                built[name] = importlib.import_module(f"{__package__}.{name}").build()
            except Exception as exc:  # an LLVM that refuses the IR: numpy serves
                warnings.warn(f"{name}: kernels not built ({exc})", stacklevel=4)
                built[name] = None
        compiler_pages.release()  # the code is in place: LLVM's pages can go
    built[None] = None  # marks the batch done, even where nothing could be built
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
    """(triple, cpu name, feature string, features dict-like) of this process's CPU."""
    binding = llvm()
    features = binding.get_host_cpu_features()
    return binding.get_process_triple(), binding.get_host_cpu_name(), features.flatten(), features


def compile_module(name, module):
    """An MCJIT engine holding the machine code of `module` (an llvmlite.ir.Module for
    this process's triple), optimized at -O3 with loop and SLP vectorization, from
    ember's cache when an earlier process built the same IR for the same CPU. Keep the
    engine alive while its functions are called."""
    binding = llvm()
    triple, cpu, flat, _ = host()
    machine = binding.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=flat, opt=3, jit=True
    )
    text = str(module)
    parsed = binding.parse_assembly(text)
    parsed.verify()
    cached = ObjectCache(name, text, triple, cpu, flat)
    if cached.code is None:  # the optimization only matters to code about to be generated
        tuning = binding.create_pipeline_tuning_options(speed_level=3)
        tuning.loop_vectorization = True
        tuning.slp_vectorization = True
        passes = binding.create_pass_builder(machine, tuning)
        passes.getModulePassManager().run(parsed, passes)
    engine = binding.create_mcjit_compiler(parsed, machine)
    engine.set_object_cache(cached.store, cached.load)
    engine.finalize_object()
    return engine


class ObjectCache:
    """The machine code of one build, kept in ember's cache (jit/ under $EMBER_CACHE) so
    that later processes skip LLVM's passes and code generation. Its file name is the
    module's name and a hash of everything the code depends on (the IR, llvmlite's
    version, the target triple, CPU and features): another build gets another file. The
    file starts with the SHA-256 of the code after it, checked before LLVM sees the code
    (LLVM aborts the process on an object it cannot read). A file that fails the check is
    never trusted, nor replaced: this process compiles its own code and leaves the file as
    it is (it may not be ember's). A missing or unwritable cache only means compiling
    again."""

    def __init__(self, name, text, triple, cpu, features):
        import llvmlite

        from ..cache_dir import cache_dir

        key = "\0".join((text, llvmlite.__version__, triple, cpu, features))
        file = f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.o"
        self.path = os.path.join(cache_dir(), "jit", file)
        self.code = None
        try:
            with open(self.path, "rb") as fh:
                kept = fh.read()
        except OSError:
            return
        digest, code = kept[:_DIGEST], kept[_DIGEST:]
        if code and hashlib.sha256(code).digest() == digest:
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
                fh.write(hashlib.sha256(code).digest() + code)
            os.link(part, self.path)
        except OSError:  # already there, unwritable, or no hard links here: not kept
            pass
        finally:
            if made:
                os.remove(part)
