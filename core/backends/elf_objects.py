"""Loading the machine code llvm_build keeps in ember's cache without LLVM.

A cached kernel module is an ELF relocatable object LLVM wrote for x86-64 with its large
code model: every address in the code is a 64-bit absolute (R_X86_64_64) or, rarely,
a 64-bit PC-relative word (R_X86_64_PC64), each patched in with one store. Loading it
takes ~100 lines of Python: the allocated sections copied into one anonymous mapping,
the relocations applied, the mapping made read-only and executable. MCJIT did the same
work, but needed llvmlite's 170 MB LLVM library in the process first: importing it cost
~40 ms and its pages (a 76 MB RSS peak while it initialized, then ~8 MiB kept: the
library's touched pages, libstdc++, LLVM's heap), against a 135 MiB SmolLM2 working set.

Anything else (another machine or object format, a relocation kind, a writable section,
an unknown external symbol, a system refusing executable mappings, a malformed file)
raises UnsupportedObject, and the caller hands the code to MCJIT as before. Linux only
(ELF, and an executable anonymous mapping through libc).
"""

import ctypes
import struct
import sys
import weakref

_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")
ET_REL, EM_X86_64 = 1, 62
SHT_PROGBITS, SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 1, 2, 4, 8, 9
SHT_X86_64_UNWIND = 0x70000001  # .eh_frame: for unwinders only, never read by the code
SHF_WRITE, SHF_ALLOC = 0x1, 0x2
SHN_UNDEF, SHN_LORESERVE, SHN_ABS = 0, 0xFF00, 0xFFF1
R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32, R_X86_64_PC64 = 1, 2, 4, 24
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20
PAGE = 4096
# external functions the kernels may call (LLVM lowers large zero fills and copies to
# them); anything else is refused rather than looked up in whatever the process loaded
EXTERNAL = ("memset", "memcpy", "memmove")


class UnsupportedObject(Exception):
    """An object this loader does not take (the reason in the message): compile instead."""


def supported():
    """Whether this process can load objects here at all (Linux on x86-64)."""
    import platform

    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


class LoadedObject:
    """The machine code of one object, in executable memory of its own for as long as
    this object lives; `get_function_address` as MCJIT's engine has it."""

    def __init__(self, code):
        if not supported():
            raise UnsupportedObject("object loading is for Linux on x86-64")
        sections = _sections(code)
        layout, size = _layout(sections)
        self._symbols, symbols = {}, []
        base = _map(size)
        self._finalizer = weakref.finalize(self, _libc().munmap, ctypes.c_void_p(base), size)
        # not at exit: a daemon thread (llvm_spin's helpers) may still run this code then
        self._finalizer.atexit = False
        try:
            for i, (kind, offset, length) in layout.items():
                if kind == SHT_PROGBITS and length:
                    ctypes.memmove(base + offset, code[_at(sections[i])[0] :][:length], length)
            symbols = _symbols(code, sections, layout, base)
            for name, address in symbols:
                if name:
                    self._symbols[name] = address
            _relocate(code, sections, layout, base, [a for _, a in symbols])
            if _libc().mprotect(ctypes.c_void_p(base), size, PROT_READ | PROT_EXEC) != 0:
                raise UnsupportedObject(
                    f"the system refused executable memory (errno {ctypes.get_errno()})"
                )
        except BaseException:
            self._finalizer()
            raise

    def get_function_address(self, name):
        """The address of the object's symbol `name`, or 0 where it has none."""
        return self._symbols.get(name, 0)


# --- parsing -----------------------------------------------------------------------------------
def _sections(code):
    """The section headers, as tuples of _SECTION's fields, after checking the header."""
    if len(code) < _ELF_HEADER.size:
        raise UnsupportedObject("shorter than an ELF header")
    ident, etype, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, _ = (
        _ELF_HEADER.unpack_from(code)
    )
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        raise UnsupportedObject("not a little-endian 64-bit ELF file")
    if etype != ET_REL or machine != EM_X86_64:
        raise UnsupportedObject(
            f"not an x86-64 relocatable object (type {etype}, machine {machine})"
        )
    if shentsize != _SECTION.size or shoff + shnum * shentsize > len(code):
        raise UnsupportedObject("section headers beyond the file")
    sections = [_SECTION.unpack_from(code, shoff + i * shentsize) for i in range(shnum)]
    for s in sections:
        if s[1] not in (SHT_NOBITS, 0) and s[4] + s[5] > len(code):
            raise UnsupportedObject("a section beyond the file")
    return sections


def _at(section):
    """(file offset, size) of a section."""
    return section[4], section[5]


def _layout(sections):
    """{section index: (type, offset in the mapping, size)} of the allocated sections, and
    the mapping's size (whole pages)."""
    layout, end = {}, 0
    for i, (_, kind, flags, _, _, size, _, _, align, _) in enumerate(sections):
        if not flags & SHF_ALLOC or kind == SHT_X86_64_UNWIND:
            continue
        if flags & SHF_WRITE:
            raise UnsupportedObject("a writable section (the kernels keep no state)")
        if kind not in (SHT_PROGBITS, SHT_NOBITS):
            raise UnsupportedObject(f"an allocated section of type {kind}")
        align = max(1, align)
        if align & (align - 1) or align > PAGE:
            raise UnsupportedObject(f"a section alignment of {align}")
        end = -(-end // align) * align
        layout[i] = (kind, end, size)
        end += size
    return layout, max(PAGE, -(-end // PAGE) * PAGE)


def _symbols(code, sections, layout, base):
    """[(name, address)] of the symbol table's entries, in its order."""
    tables = [s for s in sections if s[1] == SHT_SYMTAB]
    if len(tables) != 1:
        raise UnsupportedObject(f"{len(tables)} symbol tables")
    (_, _, _, _, offset, size, link, _, _, entsize) = tables[0]
    if entsize != _SYMBOL.size or link >= len(sections):
        raise UnsupportedObject("a malformed symbol table")
    names = sections[link]
    out = []
    for at in range(offset, offset + size, entsize):
        name_at, _, _, shndx, value, _ = _SYMBOL.unpack_from(code, at)
        name = _string(code, names, name_at)
        if shndx == SHN_UNDEF:
            address = _external(name) if name else 0
        elif shndx == SHN_ABS:
            address = value
        elif shndx < SHN_LORESERVE and shndx in layout:
            address = base + layout[shndx][1] + value
        else:
            address = None  # a section not loaded (debug information): not referable
        out.append((name, address))
    return out


def _string(code, table, at):
    offset, size = _at(table)
    if at >= size:
        raise UnsupportedObject("a name beyond its string table")
    end = code.find(b"\0", offset + at, offset + size)
    if end < 0:
        raise UnsupportedObject("an unterminated name")
    return code[offset + at : end].decode("ascii", "replace")


def _external(name):
    if name not in EXTERNAL:
        raise UnsupportedObject(f"an external symbol {name!r}")
    return ctypes.cast(getattr(_libc(), name), ctypes.c_void_p).value


def _relocate(code, sections, layout, base, addresses):
    """Apply every RELA section that targets a loaded section."""
    for _, kind, _, _, offset, size, _, target, _, entsize in sections:
        if kind == SHT_REL:
            raise UnsupportedObject("REL relocations")
        if kind != SHT_RELA or target not in layout:
            continue
        if entsize != _RELA.size:
            raise UnsupportedObject("a malformed relocation section")
        _, start, length = layout[target]
        for at in range(offset, offset + size, entsize):
            where, info, addend = _RELA.unpack_from(code, at)
            sym, rtype = info >> 32, info & 0xFFFFFFFF
            if sym >= len(addresses) or addresses[sym] is None:
                raise UnsupportedObject(f"a relocation against symbol {sym}, not loaded")
            value, place = addresses[sym] + addend, base + start + where
            if rtype == R_X86_64_64:
                _store(place, where, length, "<Q", value & (2**64 - 1))
            elif rtype == R_X86_64_PC64:
                _store(place, where, length, "<q", value - place)
            elif rtype in (R_X86_64_PC32, R_X86_64_PLT32):
                if not -(2**31) <= value - place < 2**31:
                    raise UnsupportedObject("a 32-bit PC-relative reach exceeded")
                _store(place, where, length, "<i", value - place)
            else:
                raise UnsupportedObject(f"relocation type {rtype}")


def _store(place, where, length, fmt, value):
    data = struct.pack(fmt, value)
    if where + len(data) > length:
        raise UnsupportedObject("a relocation beyond its section")
    ctypes.memmove(place, data, len(data))


# --- memory ------------------------------------------------------------------------------------
_state = {"libc": None}


def _libc():
    libc = _state["libc"]
    if libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        )
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        _state["libc"] = libc
    return libc


def _map(size):
    """The address of `size` bytes of fresh read-write anonymous memory."""
    address = _libc().mmap(None, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise UnsupportedObject(f"no memory mapped (errno {ctypes.get_errno()})")
    return address
