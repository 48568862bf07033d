"""ember's malloc setting (backends/host_malloc): on glibc, once the CPU device exists, large
temporaries freed by one op are reused by the next instead of being page-faulted afresh;
a user's own malloc setting, or EMBER_MALLOC=system, leaves malloc alone."""

import json
import os
import platform
import subprocess
import sys

import pytest

PROBE = r"""
import json, resource
import numpy as np
import ember
from ember.backends import host_malloc
ember.Device.cpu()
faults = []
for step in range(6):  # arrays of growing size, each freed before the next, as ops do
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones((16 + 2 * step) << 18, np.float32)  # 16, 18, ... 26 MiB
    del a
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": host_malloc._state["applied"], "faults": faults[1:]}))
"""


def _probe(script=PROBE, **env):
    """The JSON `script` prints, run without the caller's malloc settings and with `env`."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUN"))}
    full.pop("EMBER_MALLOC", None)
    # 4 KiB pages only, so a fault count measures memory touched afresh
    full.update(NUMPY_MADVISE_HUGEPAGE="0", **env)
    out = subprocess.run(
        [sys.executable, "-c", script], env=full, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def _glibc():
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not _glibc(), reason="the setting is made on glibc only")
def test_freed_temporaries_are_reused_not_faulted_again():
    tuned, system = _probe(), _probe(EMBER_MALLOC="system")
    assert tuned["applied"] is True and system["applied"] is False
    # glibc's own policy maps every one of these afresh (each is above its moving
    # threshold): 16+ MiB of faults an array; ember's keeps the freed heap for the next
    assert min(system["faults"]) > 4000
    assert sum(tuned["faults"]) < sum(system["faults"]) / 4


@pytest.mark.skipif(not _glibc(), reason="the setting is made on glibc only")
@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_TRIM_THRESHOLD_": "1000000"},
        {"MALLOC_MMAP_THRESHOLD_": "1000000"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1000000"},
    ],
)
def test_a_users_malloc_setting_wins(env):
    assert _probe(**env)["applied"] is False


ARENAS = r"""
import json, resource, threading
import numpy as np
import ember
ember.Device.cpu()

def churn():
    a = np.ones(24 << 18, np.float32)  # 24 MiB, freed in this thread's arena
    del a

t = threading.Thread(target=churn)
t.start()
t.join()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = np.ones(24 << 18, np.float32)  # the main thread: another thread's freed block?
print(json.dumps({"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


@pytest.mark.skipif(not _glibc(), reason="the setting is made on glibc only")
def test_a_block_one_thread_freed_serves_another():
    """One arena for every thread: the main thread's array reuses what a pool thread
    freed (a few faults) instead of faulting 24 MiB afresh in an arena of its own; a
    user's MALLOC_ARENA_MAX keeps glibc's arenas."""
    assert _probe(ARENAS)["faults"] < 1000
    assert _probe(ARENAS, MALLOC_ARENA_MAX="8")["faults"] > 5000
