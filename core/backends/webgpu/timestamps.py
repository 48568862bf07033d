"""Per-kernel GPU times from timestamp queries, while a profiler watches a WebGPU device.

A GpuTimer set as `runtime.timer` gives each dispatch a compute pass of its own whose
beginning and end write a timestamp (the only timestamp writes core WebGPU allows, so the
browser driver does the same as the native one), and brackets each submitted batch with two
empty passes, a begin and an end marker: one timestamp pair around everything the batch
ran, measured apart from the kernels' own pairs. Before each submit the batch's queries are
resolved into a buffer of their own; `collect()` reads them all back after the run.

Timestamps are in nanoseconds (WebGPU's unit); a pair whose end reads before its begin
(allowed by the spec after a clock change) counts as zero.
"""

import struct
import time

from ...errors import UnsupportedOp

MAX_QUERIES = 4096  # WebGPU's limit on one query set's count


def supported(driver):
    return "timestamp-query" in driver.features


class GpuTimer:
    def __init__(self, driver, dispatches_per_batch):
        self.driver = driver
        # Two queries per dispatch and the two markers: the arena bounds dispatches per batch.
        self.capacity = 2 * dispatches_per_batch + 2
        if self.capacity > MAX_QUERIES:
            raise UnsupportedOp(
                f"profile: a batch of {dispatches_per_batch} dispatches needs "
                f"more than {MAX_QUERIES} timestamp queries",
                op="profile",
            )
        self.query_set = driver.create_query_set(self.capacity)
        self._open()
        self.batches = []  # (resolve buffer, query count, kernels, CPU submit time in ns)

    def _open(self):
        self.used = 0
        self.kernels = []  # (label, bytes bound) per dispatch of the open batch

    def dispatch(self, pipe, bind_group, uniform_offset, groups, label, ranges):
        """Record one dispatch (Runtime.launch calls this instead of the driver's while a
        timer is set), in a timed pass of its own."""
        if self.used == 0:
            self.driver.timestamp_pass(self.query_set, 0, None)
            self.used = 1
        i = self.used
        self.driver.dispatch(
            pipe, bind_group, uniform_offset, groups, timestamps=(self.query_set, i, i + 1)
        )
        self.used += 2
        self.kernels.append((label, sum(n for _, _, n in ranges)))

    def close_batch(self):
        """Just before the batch is submitted: the end marker and the queries' resolve."""
        if self.used == 0:
            return
        self.driver.timestamp_pass(self.query_set, None, self.used)
        count = self.used + 1
        buf = self.driver.create_buffer(count * 8, "query")
        self.driver.resolve_queries(self.query_set, count, buf)
        self.batches.append((buf, count, self.kernels, time.perf_counter_ns()))
        self._open()

    def drop_batch(self):
        """The batch was discarded after a failure: forget its dispatches."""
        self._open()

    def collect(self):
        """Read every resolved batch (all submitted by now): a list of batches, each
        {"submit_ns", "begin_ns", "end_ns", "kernels": [(label, bytes, begin_ns, end_ns)]}."""
        batches, self.batches = self.batches, []
        return [self._parse(b, self.driver.read(b[0], 0, b[1] * 8)) for b in batches]

    async def collect_async(self):
        """collect() without blocking (a page without JSPI)."""
        batches, self.batches = self.batches, []
        return [self._parse(b, await self.driver.read_async(b[0], 0, b[1] * 8)) for b in batches]

    def _parse(self, batch, raw):
        buf, count, kernels, submitted = batch
        self.driver.destroy_buffer(buf)
        stamps = struct.unpack(f"<{count}Q", bytes(raw))
        timed = [
            (label, nbytes, stamps[1 + 2 * k], max(stamps[2 + 2 * k], stamps[1 + 2 * k]))
            for k, (label, nbytes) in enumerate(kernels)
        ]
        return {
            "submit_ns": submitted,
            "begin_ns": stamps[0],
            "end_ns": max(stamps[-1], stamps[0]),
            "kernels": timed,
        }
