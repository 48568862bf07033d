"""`ember serve` as a subprocess, for the tests that talk to it as a person would."""
import re
import subprocess
import sys

import pytest


def start_ember_serve(*args, url=r"http://(\S+):(\d+)/"):
    """`python -m ember.cli serve *args`; returns (process, the match of `url` on the line
    that announces where it listens). Fails the test, killing the server, when no such
    line comes."""
    cmd = [sys.executable, "-m", "ember.cli", "serve", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = ""
    for _ in range(50):  # notes (a stale bundle, a build) may come before the URL line
        line = proc.stdout.readline()
        if not line or "http://" in line:
            break
    match = re.search(url, line)
    if not match:
        proc.kill()
        rest = proc.stdout.read()
        pytest.fail(f"ember serve printed no URL: {line}{rest}")
    return proc, match
