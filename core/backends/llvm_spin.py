"""Helper threads that wait for work spinning in compiled code, for the CPU's short
products (a decode step's), compiled into a kernel module beside the kernels they run.

A decode step makes tens of products of tens of microseconds each (Whisper base's six
decoder layers: 36 of 25-70 us, and the 53 MB logits product). row_parallel hands half
of such work to a sleeping pool thread: a futex wake-up, then the GIL passed between the
threads for each range; on these 2-vCPU VMs that cost more than the half saved, and
run_rows' timing kept them on one thread (Whisper base's fc1, 2 MB of halves: 59 us
alone, 67 us shared that way). Here a helper waits in compiled code, without the GIL,
spinning on its slot (128 bytes of its own) for up to IDLE_CYCLES of the time-stamp
counter after its last job; a hand-off is then a few stores and a compare-exchange. A
helper idle that long goes back to sleep (a threading.Event) so an idle process spins
no core; the caller that finds it asleep runs the whole product itself and wakes it for
the next one. x86-64 only (its `pause` and time-stamp counter); elsewhere no helpers are
built and row_parallel shares the work as before.

A slot's words: its state, the job's function, a stop flag, the count of jobs its
helper has run, the job's arguments. The
state is IDLE (the helper spins, ready), POSTED (a job is in the slot), DONE (the helper
ran it; the caller sets IDLE again) or ASLEEP. Only the caller that posted a job waits
for it, and a slot is posted to only from IDLE, so callers on several Python threads
share the helpers safely: one that finds a slot busy runs that part itself. The stop
flag is read only by an idle helper, which then sleeps for good: a job posted meanwhile
is run first, never dropped (a caller would wait for it forever).

This module is a kernel module of its own (llvm_build builds it with the others): its
machine code is the helpers' wait, ``ember_spin``, which runs any job posted to the
slot (a job is a function of one pointer, the slot's argument words). The kernels to
split live in their own modules: ``add_split(module, kernel, ...)`` adds to a kernel
module a job wrapper and a split form of a kernel over a range of rows: the range cut
in one part per helper plus the caller's, each helper's part posted, the caller's own
run, and the posted ones waited for. The parts' rows are computed by the same code as a
whole call's, so the results do not depend on how the rows were split. Today:
llvm_f16's dot (a decode step's F16 products) and llvm_attention's attend (a decode
step's heads).
"""

import atexit
import os
import threading
import time

import numpy as np

from .addresses import address

IDLE, POSTED, DONE, ASLEEP = 0, 1, 2, 3
JOB, STOP, JOBS, ARGS = 1, 2, 3, 4  # a slot's words after its state
SLOT_WORDS = 16  # 128 bytes: a slot never shares a cache line (or its prefetched pair)
ARG_WORDS = SLOT_WORDS - ARGS
MAX_HELPERS = 63  # the split's mask of parts it ran itself is one i64
# Time-stamp counter ticks a helper spins after its last job before it sleeps: ~1 ms at
# 2-3 GHz. A Whisper decode step's products come every 0.05-0.3 ms, its steps every ~10
# ms with the token rules between; a sleeping helper costs the next product its help only.
IDLE_CYCLES = 3_000_000
# How long `Helpers.ready` waits for woken helpers to spin (seconds): a thread's wake-up
# and its turn at the GIL take ~20-100 us where a core is free.
READY_PATIENCE = 0.0005

# pid: this process's (os.getpid() is a system call, and helpers() is asked at every
# product), set again in a forked child
_state = {"helpers": None, "pid": os.getpid(), "spin": None}


def _after_fork_in_child():
    _state["pid"] = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
_lock = threading.Lock()


def supported(triple):
    return triple.startswith("x86_64")


def build():
    """The compiled wait (SpinKernels), or None on a CPU without helpers (llvm_build)."""
    import sys

    from . import llvm_build

    if not supported(llvm_build.host()[0]):
        return None
    engine = llvm_build.compile_kernels(sys.modules[__name__], _ir_module)
    return SpinKernels(engine, engine.get_function_address("ember_spin"))


def _ir_module(triple):
    from .llvm_ir import new_module

    module = new_module("ember_spin", triple)
    add_spin(module)
    return module


class SpinKernels:
    def __init__(self, engine, spin_addr):
        import ctypes

        self._engine = engine  # owns the machine code: kept alive with the function
        self.spin = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(spin_addr)


def process_helpers(threads):
    """This process's Helpers for `threads` threads in all (the caller's among them), or
    None: one thread, a CPU without helpers, or no llvmlite. Its callers are built
    kernels (EMBER_JIT was not 0 when they were asked for): the wait, once found, is kept
    (llvm_build.kernels reads the environment at every call, 2% of a decode step)."""
    if threads <= 1:
        return None
    spin = _state["spin"]
    if spin is None:
        from . import llvm_build

        kernels = llvm_build.kernels("llvm_spin")
        if kernels is None:
            return None
        spin = _state["spin"] = kernels.spin
    return helpers(spin, threads - 1)


# --- the IR -------------------------------------------------------------------------------------
def add_spin(module):
    """``void ember_spin(i64 *slot, i64 idle_cycles)``: a helper's wait: run each job
    posted to the slot; return, the slot ASLEEP, once idle for idle_cycles or, idle, told
    to stop."""
    from llvmlite import ir

    i64 = ir.IntType(64)
    pi64 = i64.as_pointer()
    job_type = ir.FunctionType(ir.VoidType(), [pi64])
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [pi64, i64]), "ember_spin")
    slot, idle = fn.args
    clock, pause = _clock(module), _pause(module)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    head, run, wait, sleep, leave = (
        fn.append_basic_block(n) for n in ("head", "run", "wait", "sleep", "leave")
    )
    last = b.alloca(i64)
    b.cmpxchg(slot, i64(ASLEEP), i64(IDLE), "acq_rel", "acquire")  # awake
    b.store(b.call(clock, []), last)
    b.branch(head)

    b.position_at_end(head)
    state = b.load_atomic(slot, "acquire", 8)
    b.cbranch(b.icmp_unsigned("==", state, i64(POSTED)), run, wait)

    b.position_at_end(run)
    job = b.inttoptr(b.load(b.gep(slot, [i64(JOB)])), job_type.as_pointer())
    b.call(job, [b.gep(slot, [i64(ARGS)])])
    count = b.gep(slot, [i64(JOBS)])
    b.store(b.add(b.load(count), i64(1)), count)
    b.store_atomic(i64(DONE), slot, "release", 8)
    b.store(b.call(clock, []), last)
    b.branch(head)

    b.position_at_end(wait)
    b.call(pause, [])
    long_idle = b.icmp_unsigned(">", b.sub(b.call(clock, []), b.load(last)), idle)
    stop = b.icmp_unsigned("!=", b.load_atomic(b.gep(slot, [i64(STOP)]), "acquire", 8), i64(0))
    done = b.or_(long_idle, stop)
    b.cbranch(b.and_(b.icmp_unsigned("==", state, i64(IDLE)), done), sleep, head)

    b.position_at_end(sleep)  # asleep only from IDLE: a job posted meanwhile is run first
    gone = b.cmpxchg(slot, i64(IDLE), i64(ASLEEP), "acq_rel", "acquire")
    b.cbranch(b.extract_value(gone, 1), leave, head)

    b.position_at_end(leave)
    b.ret_void()


def add_split(module, kernel, name, rows_at, align):
    """Add ``<name>_job(i64 *args)`` (the kernel on its arguments as words) and
    ``i64 <name>(i64 *slots, i64 helpers, <the kernel's arguments>)``: the kernel over
    rows [args[rows_at], args[rows_at + 1]) cut into helpers + 1 parts of a multiple of
    `align` rows, part 0 the caller's. Returns the mask of helpers whose part the caller
    ran itself (busy or asleep: wake the asleep ones)."""
    from llvmlite import ir

    from .llvm_ir import loop

    i64 = ir.IntType(64)
    pi64 = i64.as_pointer()
    types = kernel.function_type.args
    if len(types) > ARG_WORDS:
        raise ValueError(
            f"llvm_spin: {name}'s kernel takes {len(types)} arguments, a slot {ARG_WORDS}"
        )

    job = ir.Function(module, ir.FunctionType(ir.VoidType(), [pi64]), name + "_job")
    b = ir.IRBuilder(job.append_basic_block("entry"))
    words = [b.load(b.gep(job.args[0], [i64(i)])) for i in range(len(types))]
    b.call(kernel, [_from_word(b, w, t) for w, t in zip(words, types, strict=True)])
    b.ret_void()

    fn = ir.Function(module, ir.FunctionType(i64, [pi64, i64] + list(types)), name)
    slots, helpers, args = fn.args[0], fn.args[1], list(fn.args[2:])
    pause = _pause(module)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    r0, r1 = args[rows_at], args[rows_at + 1]
    per = b.udiv(b.add(b.sub(r1, r0), helpers), b.add(helpers, i64(1)))  # ceil(rows / parts)
    per = b.mul(b.udiv(b.add(per, i64(align - 1)), i64(align)), i64(align))
    ran_here = b.alloca(i64)
    b.store(i64(0), ran_here)

    def part(b, s):
        """(slot s's words, its rows' first and end)"""
        lo = b.add(r0, b.mul(b.add(s, i64(1)), per))
        hi = b.add(lo, per)
        hi = b.select(b.icmp_signed("<", hi, r1), hi, r1)
        return b.gep(slots, [b.mul(s, i64(SLOT_WORDS))]), lo, hi

    def run(b, lo, hi):
        call = list(args)
        call[rows_at], call[rows_at + 1] = lo, hi
        b.call(kernel, call)

    def when(b, cond, body):
        then, after = b.append_basic_block("then"), b.append_basic_block("after")
        b.cbranch(cond, then, after)
        b.position_at_end(then)
        body(b)
        b.branch(after)
        b.position_at_end(after)

    def mark(b, s):
        b.store(b.or_(b.load(ran_here), b.shl(i64(1), s)), ran_here)

    def post(b, s):
        slot, lo, hi = part(b, s)

        def offer(b):
            idle = b.icmp_unsigned("==", b.load_atomic(slot, "acquire", 8), i64(IDLE))

            def fill(b):
                b.store(b.ptrtoint(job, i64), b.gep(slot, [i64(JOB)]))
                for i, a in enumerate(args):
                    word = lo if i == rows_at else hi if i == rows_at + 1 else _to_word(b, a)
                    b.store(word, b.gep(slot, [i64(ARGS + i)]))
                taken = b.cmpxchg(slot, i64(IDLE), i64(POSTED), "acq_rel", "acquire")
                when(b, b.not_(b.extract_value(taken, 1)), lambda b: mark(b, s))

            then, busy, after = (b.append_basic_block(n) for n in ("idle", "busy", "posted"))
            b.cbranch(idle, then, busy)
            b.position_at_end(then)
            fill(b)
            b.branch(after)
            b.position_at_end(busy)
            mark(b, s)
            b.branch(after)
            b.position_at_end(after)

        when(b, b.icmp_signed("<", lo, hi), offer)

    loop(b, i64(0), helpers, post, "post")
    first_end = b.add(r0, per)
    run(b, r0, b.select(b.icmp_signed("<", first_end, r1), first_end, r1))

    def own_or_wait(b, s):
        slot, lo, hi = part(b, s)
        mine = b.icmp_unsigned("!=", b.and_(b.load(ran_here), b.shl(i64(1), s)), i64(0))

        def settle(b):
            then, other, after = (b.append_basic_block(n) for n in ("mine", "theirs", "settled"))
            b.cbranch(mine, then, other)
            b.position_at_end(then)
            run(b, lo, hi)
            b.branch(after)
            b.position_at_end(other)
            spin, done = b.append_basic_block("spin"), b.append_basic_block("done")
            b.branch(spin)
            b.position_at_end(spin)
            b.call(pause, [])
            finished = b.icmp_unsigned("==", b.load_atomic(slot, "acquire", 8), i64(DONE))
            b.cbranch(finished, done, spin)
            b.position_at_end(done)
            b.store_atomic(i64(IDLE), slot, "release", 8)
            b.branch(after)
            b.position_at_end(after)

        when(b, b.icmp_signed("<", lo, hi), settle)

    loop(b, i64(0), helpers, own_or_wait, "settle")
    b.ret(b.load(ran_here))


def add_pieces(module, name, arg_types, piece, split=True):
    """Add ``void <name>(i64 t0, i64 t1, i64 *table, <arg_types>)``: threads t0 .. t1 - 1
    in turn, each taking the next piece p < table[1] (table[0] counts the pieces taken:
    an atomic add, so whichever thread is free takes the next) and emitting
    ``piece(b, t, p, table, args)`` for it; and, `split` (a CPU with helpers),
    ``<name>_split`` (add_split) for a team of the caller and its helpers, thread 0 the
    caller's and s + 1 helper s's (run_team). A piece's result must not depend on which
    thread takes it. Returns the function."""
    from llvmlite import ir

    from .llvm_ir import I64, loop

    pi64 = I64.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, pi64, *arg_types]), name)
    t0, t1, table = fn.args[:3]
    args = fn.args[3:]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    count = b.load(b.gep(table, [I64(1)]))

    def thread(b, t):
        head, work, done = (b.append_basic_block(s) for s in ("take", "piece", "none"))
        b.branch(head)
        b.position_at_end(head)
        p = b.atomic_rmw("add", table, I64(1), "monotonic")
        b.cbranch(b.icmp_signed("<", p, count), work, done)
        b.position_at_end(work)
        piece(b, t, p, table, args)
        b.branch(head)
        b.position_at_end(done)

    loop(b, t0, t1, thread, "t")
    b.ret_void()
    if split:
        add_split(module, fn, name + "_split", rows_at=0, align=1)
    return fn


def run_team(run, split, helpers, table, *args):
    """A pieces function (add_pieces; `run` and `split` its ctypes functions) over
    `table` (an int64 array: [0, pieces, ...]) with the caller alone (helpers None) or
    with llvm_spin.Helpers, woken first where they sleep."""
    if helpers is None:
        run(0, 1, address(table), *args)
        return
    helpers.ready()
    helpers.split(split, 0, helpers.count + 1, address(table), *args)


def _to_word(b, value):
    from llvmlite import ir

    from .llvm_ir import I64

    return b.ptrtoint(value, I64) if isinstance(value.type, ir.PointerType) else value


def _from_word(b, word, typ):
    from llvmlite import ir

    return b.inttoptr(word, typ) if isinstance(typ, ir.PointerType) else word


def _clock(module):
    from .llvm_ir import I64, intrinsic

    return intrinsic(module, "llvm.readcyclecounter", I64, 0)


def _pause(module):
    from llvmlite import ir

    from .llvm_ir import intrinsic

    return intrinsic(module, "llvm.x86.sse2.pause", ir.VoidType(), 0)


# --- the threads ------------------------------------------------------------------------------
class Helpers:
    """`count` helper threads, each waiting on its own slot through the compiled spin,
    for up to `idle_cycles` after its last job."""

    def __init__(self, spin, count, idle_cycles=IDLE_CYCLES):
        if not 0 < count <= MAX_HELPERS:
            raise ValueError(f"llvm_spin: 1 to {MAX_HELPERS} helpers, got {count}")
        self.count = count
        self.pid = os.getpid()
        words = np.zeros((count + 1) * SLOT_WORDS, np.int64)  # room to align to 128 bytes
        skip = (-words.ctypes.data % (SLOT_WORDS * 8)) // 8
        self._words = words
        self.slots = words[skip : skip + count * SLOT_WORDS].reshape(count, SLOT_WORDS)
        self.slots[:, 0] = ASLEEP
        self.address = self.slots.ctypes.data
        self._spin = spin
        self._idle_cycles = int(idle_cycles)
        self._wake = [threading.Event() for _ in range(count)]
        self._threads = [
            threading.Thread(target=self._serve, args=(i,), name=f"ember-spin-{i}", daemon=True)
            for i in range(count)
        ]
        for t in self._threads:
            t.start()

    def _serve(self, i):
        slot = self.address + i * SLOT_WORDS * 8
        while True:
            self._wake[i].wait()
            self._wake[i].clear()
            if self.slots[i, STOP]:
                return
            self._spin(slot, self._idle_cycles)  # ctypes lets the GIL go for the whole wait
            if self.slots[i, STOP]:
                return

    def jobs(self):
        """How many parts each helper has run so far."""
        return [int(n) for n in self.slots[:, JOBS]]

    def split(self, fn, *args):
        """fn(slots, count, *args), a split that add_split compiled, over these helpers;
        then the ones whose part the caller ran because they slept are woken. Returns
        whether the helpers ran every part posted to them (False: the caller ran some
        itself, so the run's time says nothing of sharing)."""
        ran_here = fn(self.address, self.count, *args)
        if ran_here:
            self.wake(ran_here)
        return not ran_here

    def ready(self, patience=None):
        """Wake the helpers that sleep and wait, the GIL let go, until they spin (for at
        most `patience` seconds, READY_PATIENCE unless given): for a product long enough
        to repay a wake-up. A split finding a helper asleep runs its part itself and only
        then wakes it, which for a lone long product (the logits' 262,144 x 640 Q8_0 rows
        of Gemma 3, 18 ms on one core) meant one core every time its helper had dozed
        off before it."""
        asleep = [i for i in range(self.count) if self.slots[i, 0] == ASLEEP]
        if not asleep:
            return
        for i in asleep:
            self._wake[i].set()
        deadline = time.perf_counter() + (READY_PATIENCE if patience is None else patience)
        while any(self.slots[i, 0] == ASLEEP for i in asleep):
            if time.perf_counter() > deadline:
                return
            time.sleep(0)  # lets the woken threads take the GIL to enter their spin

    def wake(self, mask):
        """Wake the helpers of `mask` (a split's parts run by the caller) that sleep."""
        for i in range(self.count):
            if mask >> i & 1 and self.slots[i, 0] == ASLEEP:
                self._wake[i].set()

    def close(self):
        """Stop every helper once it is idle (a job posted to it still runs); callers
        then find its slot asleep and run their parts themselves."""
        self.slots[:, STOP] = 1
        for e in self._wake:
            e.set()
        for t in self._threads:
            t.join(1.0)


def helpers(spin, wanted):
    """This process's Helpers of `wanted` threads for the compiled `spin`, made on first
    use and again after a fork (a child has none of its parent's threads) or when the
    thread count changes; None for fewer than one."""
    wanted = min(int(wanted), MAX_HELPERS)
    h = _state["helpers"]
    if h is not None and h.pid == _state["pid"] and h.count == wanted:
        return h
    with _lock:
        h = _state["helpers"]
        if h is not None and h.pid == os.getpid() and h.count == wanted:
            return h
        if h is not None and h.pid == os.getpid():
            h.close()
        _state["helpers"] = Helpers(spin, wanted) if wanted >= 1 else None
        return _state["helpers"]


@atexit.register
def _stop():
    h = _state["helpers"]
    if h is not None and h.pid == os.getpid():
        h.close()
