"""A finished profile: the summary table (sorted by time) and the Chrome trace.

Host ops: the time each contract call took on the calling thread (on WebGPU that is
recording, and the wait where a result is read back). GPU kernels: the time between the
timestamps written at the beginning and end of each dispatch's pass. The GPU time of a
run (`gpu_time_ns`) is the sum over its submitted batches of the span between the two
markers that bracket each batch (timestamps.py): one timestamp pair around everything the
GPU ran for it, kernels and the gaps between them.

The trace is the Trace Event Format (complete "X" events, microseconds) that Perfetto and
chrome://tracing open: one process for the host (a track per thread, nested calls inside
their caller) and one per GPU, whose timestamps are moved onto the host clock by one
offset, the smallest that puts no batch's start before the moment it was submitted.
"""

import json
import os

from ..errors import InvalidArgument
from ..owned import atomic_file

HOST_PID = 1


class Profile:
    def __init__(self, events, gpu, origin_ns, devices, wall_ns):
        self.events = events  # host op events (ops.py), in completion order
        self.gpu = gpu  # device name -> batches (timestamps.GpuTimer.collect)
        self.origin_ns = origin_ns
        self.devices = devices
        self.wall_ns = wall_ns

    # --- figures ----------------------------------------------------------------------------
    def kernels(self, device=None):
        """(device, label, bytes bound, begin_ns, end_ns) per timed dispatch."""
        return [
            (name, *k)
            for name, batches in self.gpu.items()
            if device in (None, name)
            for b in batches
            for k in b["kernels"]
        ]

    def kernel_time_ns(self, device=None):
        return sum(end - begin for _, _, _, begin, end in self.kernels(device))

    def gpu_time_ns(self, device=None):
        """The GPU time of the run: per batch, end marker minus begin marker, summed."""
        return sum(
            b["end_ns"] - b["begin_ns"]
            for name, batches in self.gpu.items()
            if device in (None, name)
            for b in batches
        )

    def summary(self):
        """Rows {kind, device, name, calls, time_ns, bytes_in, bytes_out}, longest first:
        host ops as their callers made them (depth 0) and GPU kernels by label."""
        rows = {}

        def add(kind, device, name, dur, bytes_in, bytes_out):
            row = rows.setdefault(
                (kind, device, name),
                {
                    "kind": kind,
                    "device": device,
                    "name": name,
                    "calls": 0,
                    "time_ns": 0,
                    "bytes_in": 0,
                    "bytes_out": 0,
                },
            )
            row["calls"] += 1
            row["time_ns"] += dur
            row["bytes_in"] += bytes_in
            row["bytes_out"] += bytes_out

        for e in self.events:
            if e["depth"] == 0:
                add("op", e["device"], e["name"], e["dur_ns"], e["bytes_in"], e["bytes_out"])
        for device, label, nbytes, begin, end in self.kernels():
            add("kernel", device, label, end - begin, nbytes, 0)
        return sorted(rows.values(), key=lambda r: (r["kind"] != "op", -r["time_ns"], r["name"]))

    def table(self, limit=None):
        """The summary as text: host ops, then GPU kernels, each sorted by time."""
        lines = []
        for kind, title in (("op", "host ops"), ("kernel", "GPU kernels (timestamp queries)")):
            rows = [r for r in self.summary() if r["kind"] == kind]
            if not rows:
                continue
            total = sum(r["time_ns"] for r in rows) or 1
            width = min(72, max(len(r["name"]) for r in rows))
            lines.append(f"{title}: {total / 1e6:.3f} ms in {sum(r['calls'] for r in rows)} calls")
            dev = max(6, *(len(r["device"]) for r in rows))
            # A kernel's bytes are those of its bindings (read and written alike).
            moved = f"{'in':>9} {'out':>9}" if kind == "op" else f"{'bound':>9}"
            lines.append(
                f"  {'name':<{width}} {'device':<{dev}} {'calls':>6} {'ms':>9} "
                f"{'%':>5} {'us/call':>9} {moved}"
            )
            for r in rows[:limit]:
                name = r["name"] if len(r["name"]) <= width else r["name"][: width - 1] + "…"
                moved = f"{_size(r['bytes_in']):>9}" + (
                    f" {_size(r['bytes_out']):>9}" if kind == "op" else ""
                )
                lines.append(
                    f"  {name:<{width}} {r['device']:<{dev}} {r['calls']:>6} "
                    f"{r['time_ns'] / 1e6:>9.3f} {100 * r['time_ns'] / total:>5.1f} "
                    f"{r['time_ns'] / 1e3 / r['calls']:>9.1f} {moved}"
                )
            if limit is not None and len(rows) > limit:
                lines.append(f"  ... {len(rows) - limit} more")
        for device in (d for d, batches in self.gpu.items() if batches):
            lines.append(
                f"{device} GPU time: {self.gpu_time_ns(device) / 1e6:.3f} ms over "
                f"{len(self.gpu[device])} submissions, of which kernels "
                f"{self.kernel_time_ns(device) / 1e6:.3f} ms"
            )
        if not lines:
            lines.append("no ops ran while profiling")
        return "\n".join(lines)

    # --- Chrome trace ------------------------------------------------------------------------
    def trace(self):
        """The profile as a Trace Event Format dict (`{"traceEvents": [...]}`)."""
        events = [_meta("process_name", HOST_PID, 0, "host")]
        threads = {}
        for e in self.events:
            tid = threads.setdefault(e["tid"], len(threads) + 1)
            events.append(
                _complete(
                    e["name"],
                    "op",
                    e["ts_ns"],
                    e["dur_ns"],
                    HOST_PID,
                    tid,
                    {
                        "device": e["device"],
                        "depth": e["depth"],
                        "bytes_in": e["bytes_in"],
                        "bytes_out": e["bytes_out"],
                    },
                )
            )
        for tid in threads.values():
            events.append(_meta("thread_name", HOST_PID, tid, f"thread {tid}"))
        for pid, (device, batches) in enumerate(self.gpu.items(), start=HOST_PID + 1):
            events.append(_meta("process_name", pid, 0, f"{device} GPU"))
            events.append(_meta("thread_name", pid, 1, "queue"))
            if not batches:
                continue
            shift = max(b["submit_ns"] - self.origin_ns - b["begin_ns"] for b in batches)
            for i, b in enumerate(batches):
                events.append(
                    _complete(
                        f"submission {i}",
                        "batch",
                        b["begin_ns"] + shift,
                        b["end_ns"] - b["begin_ns"],
                        pid,
                        1,
                        {"kernels": len(b["kernels"])},
                    )
                )
                for label, nbytes, begin, end in b["kernels"]:
                    events.append(
                        _complete(
                            label,
                            "kernel",
                            begin + shift,
                            end - begin,
                            pid,
                            1,
                            {"bytes_bound": nbytes},
                        )
                    )
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def save_trace(self, path, overwrite=False):
        """Write the Chrome trace JSON to `path` (under a temporary name, then renamed);
        an existing file is refused unless `overwrite`."""
        if os.path.exists(path) and not overwrite:
            raise InvalidArgument(
                f"profile: {path} exists; choose another trace path "
                f"(or pass overwrite=True / --force)"
            )
        with atomic_file(path, "w") as fh:
            json.dump(self.trace(), fh)
        return path


def _size(nbytes):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def _complete(name, cat, ts_ns, dur_ns, pid, tid, args):
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": ts_ns / 1e3,
        "dur": dur_ns / 1e3,
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _meta(kind, pid, tid, name):
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
