"""The device check for a lent GPU machine: ember's op and model tests on cuda (CuPy) and wgpu
(Vulkan), then ops_wgpu.py, minilm.py and llm.py against torch CUDA on the same GPU, in one
call that ends inside its time budget.

    python3 benchmarks/gpu_check.py [--out DIR] [--budget SECONDS] [--only STAGE,...]
    python benchmarks/gpu_check.py --dry      # here: numpy for cuda, lavapipe, torch CPU

Run it through benchmarks/gpu_check.sh, which first unpacks the carried Vulkan loader and
installs the carried wheels (benchmarks/gpu_check_prepare.sh fills both folders). Each stage
runs in its own process group under its own timeout (cut to what is left of --budget), so a
hang costs that stage only; every stage reports pass, fail or timeout and the next one runs.
Under --out (default $OUT) it writes one log per stage, gpu_check.log (this script's own
lines) and summary.json (rewritten after every stage): eight files at most, none deeper
than --out, as the device tool returns them.

--dry (or GPU_CHECK_DRY=1) runs the same stages on this machine with the numpy backend in
place of CuPy, lavapipe for wgpu, torch CPU as the peer, a few test files and small sizes,
so a broken stage is found here and not on the lent machine.
"""

import argparse
import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from gpu_check_stages import DEVICE_BUDGET, DRY_BUDGET, stages  # noqa: E402

# The device tool returns files of at most 16 MiB: a longer log keeps its head and its tail.
LOG_LIMIT = 15 * 2**20
LOG_HEAD = 2**20


class Report:
    """This run's lines (stdout and gpu_check.log) and summary.json, rewritten per stage."""

    def __init__(self, out, mode, budget):
        self.out = out
        self.log = os.path.join(out, "gpu_check.log")
        self.summary = {"mode": mode, "budget_s": budget, "started": time.time(), "stages": {}}

    def say(self, line):
        print(line, flush=True)
        with open(self.log, "a") as fh:
            fh.write(line + "\n")

    def stage(self, name, result):
        self.summary["stages"][name] = result
        self.write()

    def write(self):
        self.summary["elapsed_s"] = round(time.time() - self.summary["started"], 1)
        path = os.path.join(self.out, "summary.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(self.summary, fh, indent=1)
        os.replace(path + ".tmp", path)


def import_path():
    """A folder whose `ember` package is this checkout's (core/, shaders/, web/ as pyproject
    maps them), for every process a stage starts: the lent machine has no ember installed.
    It holds links only; the caller removes it at the end."""
    farm = tempfile.mkdtemp(prefix="ember-gpu-check-import-")
    pkg = os.path.join(farm, "ember")
    os.mkdir(pkg)
    for name in os.listdir(os.path.join(ROOT, "core")):
        if name != "__pycache__":
            os.symlink(os.path.join(ROOT, "core", name), os.path.join(pkg, name))
    for name in ("shaders", "web"):
        os.symlink(os.path.join(ROOT, name), os.path.join(pkg, name))
    return farm


def run_stage(stage, env, out, seconds):
    """Run the stage's commands in order into its log; stop at the first failing one
    unless the stage says keep_going. Returns {"status", "rc", "seconds", "log"}; a
    timeout ends the whole process group."""
    log_name = f"{stage['name']}.log"
    path = os.path.join(out, log_name)
    start = time.monotonic()
    status, rc = "pass", 0
    with open(path, "w") as log:
        for cmd in stage["commands"]:
            left = seconds - (time.monotonic() - start)
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            if left <= 1:
                status, rc = "timeout", None
                log.write(f"[gpu_check] no time left of the stage's {seconds:.0f} s\n")
                break
            try:
                proc = subprocess.Popen(
                    cmd,
                    cwd=ROOT,
                    env=dict(env, **stage.get("env", {})),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:  # no such program here (nvidia-smi on the dry run, say)
                log.write(f"[gpu_check] could not start it: {exc}\n")
                log.flush()
                status, rc = "fail", None
                if stage.get("keep_going"):
                    continue
                break
            try:
                rc = proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                stop_group(proc)
                status, rc = "timeout", None
                log.write(f"\n[gpu_check] stopped: the stage's {seconds:.0f} s ran out\n")
                break
            if rc != 0:
                status = "fail"
                if not stage.get("keep_going"):
                    break
    trim(path)
    return {
        "status": status,
        "rc": rc,
        "seconds": round(time.monotonic() - start, 1),
        "timeout_s": round(seconds),
        "log": log_name,
    }


def stop_group(proc):
    """SIGTERM to the stage's own process group, SIGKILL after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def trim(path):
    size = os.path.getsize(path)
    if size <= LOG_LIMIT:
        return
    with open(path, "rb") as fh:
        head = fh.read(LOG_HEAD)
        fh.seek(size - (LOG_LIMIT - LOG_HEAD))
        tail = fh.read()
    with open(path + ".tmp", "wb") as fh:
        fh.write(head)
        fh.write(f"\n[gpu_check] ... {size - len(head) - len(tail)} bytes left out ...\n".encode())
        fh.write(tail)
    os.replace(path + ".tmp", path)


PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")
# A -v progress line: "[gw3] [ 12%] PASSED tests/x.py::t[cuda]" (xdist) or
# "tests/x.py::t[cuda] PASSED [ 12%]".
PYTEST_VERBOSE = re.compile(
    r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b.*\[\s*\d+%\]"
    r"|::.*\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b"
)


def read_pytest(path):
    """Counts from pytest's last summary line and its FAILED/ERROR lines (first 40); for a
    run stopped before its summary, the counts and failures of its -v progress lines."""
    counts, problems, seen, failing = {}, [], {}, []
    with open(path, errors="replace") as fh:
        for line in fh:
            if line.startswith(("FAILED ", "ERROR ")) and len(problems) < 40:
                problems.append(line.strip()[:300])
            elif re.search(r" in [\d.]+s", line) and PYTEST_COUNT.search(line):
                counts = {k: int(n) for n, k in PYTEST_COUNT.findall(line)}
            else:
                m = PYTEST_VERBOSE.search(line)
                if m:
                    word = (m.group(1) or m.group(2)).lower()
                    seen[word] = seen.get(word, 0) + 1
                    if word in ("failed", "error") and len(failing) < 40:
                        failing.append(line.strip()[:300])
    if not counts and seen:  # stopped early: what had finished, marked as such
        return {"counts": {f"{k} so far": n for k, n in seen.items()}, "problems": failing}
    return {"counts": counts, "problems": problems}


def read_figures(path):
    """The benchmark's --json figures: its last JSON line, or where the run was stopped
    before printing it, what its {"progress": ...} lines had given so far (a list)."""
    final, progress = None, []
    with open(path, errors="replace") as fh:
        for line in fh:
            if not line.startswith("{"):
                continue
            try:
                found = json.loads(line)
            except ValueError:
                continue
            if "progress" in found:
                progress.append(found["progress"])
            else:
                final = found
    return final, progress


def headline(stage, result, path):
    """One line for the stage, and what goes into summary.json beside pass/fail."""
    if stage["kind"] == "pytest":
        found = read_pytest(path)
        result.update(found)
        if result["status"] == "pass" and not found["counts"].get("passed"):
            result["status"] = "fail"  # nothing ran: no device, or nothing collected
        return ", ".join(f"{n} {k}" for k, n in found["counts"].items()) or "no summary line"
    figures, progress = read_figures(path)
    if figures is None and progress:
        figures = dict(stage["rebuild"](progress), partial=True)
    if figures is None:
        return "no figures"
    result["figures"] = figures
    line = stage["describe"](figures)
    return f"(partial) {line}" if figures.get("partial") else line


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--dry",
        action="store_true",
        default=os.environ.get("GPU_CHECK_DRY", "") not in ("", "0"),
        help="this machine: numpy in place of CuPy, lavapipe, torch CPU, small sizes",
    )
    ap.add_argument("--out", default=os.environ.get("OUT"), help="where logs go (default $OUT)")
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"seconds for all stages (default {DEVICE_BUDGET}, dry {DRY_BUDGET})",
    )
    ap.add_argument("--only", default=None, help="comma-separated stage names to run")
    args = ap.parse_args()
    if args.budget is None:
        args.budget = DRY_BUDGET if args.dry else DEVICE_BUDGET
    if not args.out:
        if not args.dry:
            ap.error("--out: no folder given and $OUT is unset")
        args.out = os.path.join(ROOT, "test-artifacts", "gpu_check", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(args.out, exist_ok=True)

    mode = "dry" if args.dry else "device"
    report = Report(args.out, mode, args.budget)
    work = tempfile.mkdtemp(prefix="ember-gpu-check-")
    farm = import_path()
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([farm, *filter(None, [os.environ.get("PYTHONPATH")])]),
        PYTHONUNBUFFERED="1",
        TOKENIZERS_PARALLELISM="false",
    )
    env.setdefault("XDG_RUNTIME_DIR", f"/tmp/ember-xdg-{os.getuid()}")
    os.makedirs(env["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    plan = stages(
        dry=args.dry,
        python=sys.executable,
        work=work,
        xdist=importlib.util.find_spec("xdist") is not None,
        pytest_timeout=importlib.util.find_spec("pytest_timeout") is not None,
        test_files=lambda pattern: sorted(glob.glob(os.path.join("tests", pattern), root_dir=ROOT)),
    )
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {s["name"] for s in plan}
        if unknown:
            ap.error(f"--only: no stage {', '.join(sorted(unknown))}")
        plan = [s for s in plan if s["name"] in wanted]
    report.say(f"gpu_check ({mode}): {len(plan)} stages in {args.budget:.0f} s; logs in {args.out}")
    deadline = time.monotonic() + args.budget
    try:
        for stage in plan:
            seconds = min(stage["timeout"], deadline - time.monotonic())
            if seconds < 5:
                report.stage(stage["name"], {"status": "not run", "why": "the budget ran out"})
                report.say(f"[{stage['name']}] not run: the budget ran out")
                continue
            result = run_stage(stage, env, args.out, seconds)
            line = headline(stage, result, os.path.join(args.out, result["log"]))
            report.stage(stage["name"], result)
            report.say(f"[{stage['name']}] {result['status']} in {result['seconds']} s: {line}")
            for problem in result.get("problems", [])[:10]:
                report.say(f"    {problem[:200]}")
    finally:
        for root in (farm, work):  # both made by this run; rmtree does not follow the links
            shutil.rmtree(root, ignore_errors=True)
        report.write()
    statuses = [s["status"] for s in report.summary["stages"].values()]
    report.say(
        f"gpu_check ({mode}) done in {report.summary['elapsed_s']} s: "
        + ", ".join(f"{n} {statuses.count(n)}" for n in ("pass", "fail", "timeout", "not run"))
    )
    return 0 if all(s == "pass" for s in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
