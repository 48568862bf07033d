"""`ember embed --input` as a user runs it, in a subprocess: killed with SIGKILL mid-run and
rerun it ends with the same files as an uninterrupted run; its peak RSS does not grow with
the corpus (tiny random model, so tens of thousands of rows take seconds)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from corpus_fixtures import sentences, tiny_model_dir, write_jsonl  # noqa: F401 (a fixture)
from ember.corpus.parts import MANIFEST, parts_dir


def _command(model, src, out, *extra):
    return [sys.executable, "-m", "ember.cli", "embed", "--device", "cpu", "--model", str(model),
            "--input", str(src), "--output", str(out), "--window", "32", "--batch-size", "8",
            *extra]


def _committed(out):
    try:
        with open(os.path.join(parts_dir(out), MANIFEST)) as fh:
            return len(json.load(fh)["parts"])
    except (OSError, ValueError):
        return 0


def _run(cmd):
    """(exit code, stderr, peak RSS in KiB) of one run."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err, usage.ru_maxrss


def test_sigkill_mid_run_then_rerun_gives_the_uninterrupted_file(tmp_path, tiny_model_dir):
    src = write_jsonl(tmp_path / "docs.jsonl", sentences(3000, seed=11))
    whole, killed = tmp_path / "whole.npy", tmp_path / "killed.npy"
    code, err, _ = _run(_command(tiny_model_dir, src, whole))
    assert code == 0, err
    proc = subprocess.Popen(_command(tiny_model_dir, src, killed), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while _committed(killed) < 5 and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    done = _committed(killed)
    assert 5 <= done < 3000 // 32 and not killed.exists()
    code, err, _ = _run(_command(tiny_model_dir, src, killed))
    assert code == 0, err
    assert f"resuming {killed}: " in err
    assert killed.read_bytes() == whole.read_bytes()
    rows = [(tmp_path / f"{name}.rows.jsonl").read_bytes() for name in ("killed", "whole")]
    assert rows[0] == rows[1]
    assert not os.path.exists(parts_dir(killed))


@pytest.mark.slow
def test_peak_rss_does_not_grow_with_the_corpus(tmp_path, tiny_model_dir):
    peaks = {}
    for n in (1000, 10000):
        src = write_jsonl(tmp_path / f"c{n}.jsonl", sentences(n, seed=n))
        code, err, peaks[n] = _run(_command(tiny_model_dir, src, tmp_path / f"c{n}.npy"))
        assert code == 0, err
    # Holding the 10,000 rows (their ids, texts and vectors) would add about 5 MB to the
    # ~50 MB of a run; streaming them in windows adds well under 1 MB.
    assert peaks[10000] <= peaks[1000] * 1.05, peaks
