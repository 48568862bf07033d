"""The stages benchmarks/gpu_check.py runs, with their sizes and timeouts, on the lent GPU
machine and in the dry mode here (which swaps the devices and shrinks the sizes only).

A stage is a dict: name, kind ("pytest", "probe" or "bench"), timeout in seconds, commands
(argv lists run in order from the repository root; the first failing one ends the stage
unless keep_going is set), env (added for those commands), and
for the non-pytest kinds `describe`, which turns the stage's last JSON line into its
one-line headline, and for benchmarks `rebuild`, which makes the same shape from the
{"progress": ...} lines of a run stopped before its last line.
"""

import os

# Ops (every op family, views, nn, fused ops, the contract) and models (tiny random configs
# against transformers): the test files whose bodies take the `device` fixture.
OP_TESTS = [
    "test_ops_*.py",
    "test_views.py",
    "test_nn.py",
    "test_fused_linear.py",
    "test_backend_contract.py",
    "test_contract_helpers.py",
    "test_int_division.py",
    "test_i64_arithmetic_overflow.py",
    "test_rope_tables.py",
]
MODEL_TESTS = [
    "test_bert.py",
    "test_llama.py",
    "test_gemma.py",
    "test_gemma_gguf.py",
    "test_gguf_models.py",
    "test_smollm2.py",
    "test_whisper_model.py",
    "test_yolo.py",
    "test_sam_model*.py",
    "test_quant_placement.py",
    "test_generation_bounds.py",
    "test_audio_mel.py",
]
WGPU_TESTS = ["test_wgpu_*.py"]  # the WebGPU runtime, limits, splits, qmatmul kernels

# Dry mode: a few files, enough to prove each stage's plumbing on lavapipe in seconds.
DRY_TESTS = ["test_ops_binary.py", "test_views.py", "test_llama.py"]
DRY_WGPU_TESTS = ["test_wgpu_params.py", "test_wgpu_split_plan.py"]

# Seconds per stage on the lent machine: 470 in all, inside the budget of the whole run
# (480 s), which leaves the device call (600 s at most) time for its setup and return.
DEVICE_TIMEOUTS = {
    "env": 40,
    "tests_cuda": 95,
    "tests_wgpu": 95,
    "ops_wgpu": 60,
    "minilm": 70,
    "llm": 110,
}
DEVICE_BUDGET = 480
# The dry mode's are generous: two shared cores, torch starting in every fresh process.
DRY_TIMEOUTS = {
    "env": 60,
    "tests_cuda": 150,
    "tests_wgpu": 200,
    "ops_wgpu": 150,
    "minilm": 300,
    "llm": 360,
}
DRY_BUDGET = sum(DRY_TIMEOUTS.values())


def stages(dry, python, work, xdist, pytest_timeout, test_files):
    """The plan: [stage dict]. `test_files(pattern)` expands a pattern under tests/."""
    cuda = "cpu" if dry else "cuda"  # the numpy backend stands in for CuPy in the dry mode
    peer = "cpu" if dry else "cuda"
    timeouts = DRY_TIMEOUTS if dry else DEVICE_TIMEOUTS

    def files(patterns):
        return [f for p in patterns for f in test_files(p)]

    def pytest(name, devices, patterns):
        # -v: one line per test as it ends, so a stage cut short still says what ran.
        args = [python, "-m", "pytest", "-v", "-rfE", "--tb=short", "-p", "no:cacheprovider"]
        if xdist and not dry:
            args += ["-n", str(min(12, os.cpu_count() or 1))]
        if pytest_timeout:
            args += ["--timeout", "60"]  # one hung test fails alone, the stage goes on
        return {
            "name": name,
            "kind": "pytest",
            "timeout": timeouts[name],
            # -k keeps the bodies parametrized on this device (and tests/test_wgpu_*.py),
            # leaving out the CPU-only tests of those files, which CI runs anyway.
            "commands": [args + ["-k", devices, *files(patterns)]],
            "env": {"EMBER_TEST_DEVICES": devices},
        }

    op_model = DRY_TESTS if dry else OP_TESTS + MODEL_TESTS
    ops_sizes = "128,256" if dry else "1024,2048,4096,8192"
    minilm_dir = os.path.join(work, "minilm-random")
    llm_small = ["--layers", "1", "--prompt", "8", "--decode", "4"] if dry else []
    return [
        {
            "name": "env",
            "kind": "probe",
            "timeout": timeouts["env"],
            "keep_going": True,  # each command reports something of its own
            "commands": ([] if dry else [["nvidia-smi"]])
            + [
                [python, "-m", "ember.cli", "info"],
                [python, "benchmarks/gpu_check_probe.py", "--cuda", cuda, "--peer", peer]
                + (["--software-wgpu"] if dry else []),
            ],
            "describe": describe_probe,
        },
        pytest("tests_cuda", cuda, op_model),
        pytest("tests_wgpu", "wgpu", op_model + (DRY_WGPU_TESTS if dry else WGPU_TESTS)),
        {
            "name": "ops_wgpu",
            "kind": "bench",
            "timeout": timeouts["ops_wgpu"],
            "commands": [
                [python, "benchmarks/ops_wgpu.py", "--peer", f"torch-{peer}"]
                + ["--sizes", ops_sizes, "--dtypes", "f32,f16", "--json"]
                + (["--repeats", "2"] if dry else [])
            ],
            "describe": describe_ops,
            "rebuild": lambda rows: {"rows": rows},
        },
        {
            "name": "minilm",
            "kind": "bench",
            "timeout": timeouts["minilm"],
            "commands": [
                [python, "benchmarks/gpu_check_minilm.py", minilm_dir],
                [python, "benchmarks/minilm.py", "--model", minilm_dir, "--no-browser", "--json"]
                + ["--engines", f"ember:{cuda},torch:{peer},ember:wgpu", "--rounds", "1"]
                + (
                    ["--sentences", "32", "--wgpu-sentences", "16", "--repeats", "1"]
                    if dry
                    else ["--sentences", "512", "--wgpu-sentences", "512", "--repeats", "3"]
                ),
            ],
            "describe": describe_minilm,
            "rebuild": lambda found: {"results": {p["label"]: p["result"] for p in found}},
        },
        {
            "name": "llm",
            "kind": "bench",
            "timeout": timeouts["llm"],
            "commands": [
                [python, "benchmarks/llm.py", "--keep", os.path.join(work, "llm")]
                + ["--ember-devices", f"{cuda},wgpu", "--torch-device", peer]
                + ["--timeout", str(timeouts["llm"] // 2), "--json-progress"]
                + llm_small
            ],
            "describe": describe_llm,
            "rebuild": rebuild_llm,
        },
    ]


def describe_probe(found):
    parts = []
    for kind in ("cuda", "wgpu"):
        d = found.get(kind, {})
        if not d.get("ok"):
            parts.append(f"{kind} did not open ({d.get('error')})")
            continue
        extra = f", kernels {d['kernel_set']}, f16 {d['shader_f16']}" if kind == "wgpu" else ""
        parts.append(f"{kind} {d.get('name')} (matmul check {d.get('matmul_error', '-')}){extra}")
    torch = found.get("torch", {})
    parts.append(f"torch {torch.get('version')} on {torch.get('device')}")
    return "; ".join(parts)


def describe_ops(found):
    """Ratios at 4096 (the target size) or, in the dry mode, at the largest size run."""
    rows = {r["op"]: r for r in found.get("rows", [])}
    sizes = sorted({int(op.split()[2].split("^")[0]) for op in rows if op.startswith("matmul")})
    n = 4096 if 4096 in sizes else (sizes[-1] if sizes else None)
    parts = []
    for dtype in ("f32", "f16"):
        for form in ("x @ W", "x @ W.T"):
            r = rows.get(f"matmul {dtype} {n}^3 {form}")
            if r:
                parts.append(f"{dtype} {n}^3 {form} {r['ratio']:.2f}x ({r['wgpu'] / 1e3:.2f} TF/s)")
    for op, r in rows.items():
        if not op.startswith("matmul"):
            parts.append(f"{op.split()[0]} {r['ratio']:.2f}x")
    peers = {k for r in rows.values() for k in r} - {"op", "unit", "wgpu", "ratio"}
    return f"wgpu/{found.get('peer') or '/'.join(sorted(peers))}: " + ", ".join(parts)


def describe_minilm(found):
    parts = []
    for label, r in found.get("results", {}).items():
        if "error" in r:
            parts.append(f"{label}: error {r['error']}")
        elif "vs_torch" in r:
            v = r["vs_torch"]
            parts.append(
                f"{label} {r['per_s']:.0f}/s = {v['throughput']:.2f}x torch, "
                f"cold {v['cold_start']:.2f}x"
            )
        else:
            parts.append(f"{label} {r['per_s']:.0f}/s")
    return "; ".join(parts)


def rebuild_llm(found):
    sections = {}
    for p in found:
        sections.setdefault(p["section"], {})[p["engine"]] = p["result"]
    return sections


def describe_llm(found):
    parts = []
    for results in (v for k, v in found.items() if k != "partial"):
        base = next((r for name, r in results.items() if name.startswith("torch")), {})
        for name, r in results.items():
            if "error" in r:
                parts.append(f"{name}: error {r['error']}")
                continue
            if "decode_s" in base and not name.startswith("torch"):
                line = (
                    f"{name}: decode {base['decode_s'] / r['decode_s']:.2f}x, "
                    f"prompt {base['prompt_s'] / r['prompt_s']:.2f}x torch"
                )
            else:
                line = f"{name}: decode {r['decode_s']:.3f} s, prompt {r['prompt_s']:.3f} s"
            parts.append(line)
    return "; ".join(parts)
