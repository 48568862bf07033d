#!/usr/bin/env bash
# Fill, here, the ignored folders a device run of benchmarks/gpu_check.sh carries, check
# them, and print the device tool's `run` arguments. Run it in the checkout the session
# calls the device tool from (the tool sends that one), with network access:
#     bash benchmarks/gpu_check_prepare.sh
#   .whl/       wgpu and the pure or cp312 wheels it and the tests need that the image
#               lacks (cffi, pycparser, rendercanvas, gguf), at the versions of the
#               project's Python here, for CPython 3.12 manylinux x86_64
#   .gl/        Debian's Vulkan loader and GL vendor-neutral libraries (amd64)
#   .gpucheck/  all-MiniLM-L6-v2's config and tokenizer files, without the weights
# Folders already filled are left as they are; a wheel of another version of the same
# package in .whl stops it (two versions break the install there).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; elif [ -x ./py ]; then PYTHON=./py; else PYTHON=python3; fi
fi
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for folder in /.whl/ /.gl/ /.gpucheck/; do
    grep -qxF "$folder" "$exclude" 2>/dev/null || echo "$folder" >>"$exclude"
done

# --- wheels ---------------------------------------------------------------------------------
packages=(wgpu cffi pycparser rendercanvas gguf)
pins=$("$PYTHON" - "${packages[@]}" <<'EOF'
import importlib.metadata, sys
print(" ".join(f"{n}=={importlib.metadata.version(n)}" for n in sys.argv[1:]))
EOF
)
mkdir -p .whl
for pin in $pins; do
    name=${pin%%==*}
    version=${pin#*==}
    have=$(find .whl -maxdepth 1 -iname "${name}-*.whl" -printf '%f\n')
    if [ -n "$have" ]; then
        if ! grep -qi "^${name}-${version}-" <<<"$have"; then
            echo "gpu_check_prepare: .whl holds $have, not $pin: remove it and run this again" >&2
            exit 1
        fi
        continue
    fi
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d .whl "$pin"
done

# --- Debian packages: the Vulkan loader and its GL companions ----------------------------------
mkdir -p .gl
if ! compgen -G ".gl/libvulkan1_*.deb" >/dev/null; then
    lists=$(mktemp -d /tmp/ember-apt-lists-XXXXXX)
    mkdir -p "$lists/partial"
    o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists")
    apt-get "${o[@]}" -qq update
    (cd .gl && apt-get "${o[@]}" -qq download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
    rm -rf -- "$lists"
fi

# --- MiniLM's files without its weights (gpu_check_minilm.py adds random ones there) ------------
if [ ! -f .gpucheck/minilm/config.json ]; then
    src=$("$PYTHON" -c 'from ember.hub import fetch_default_model; print(fetch_default_model(log=lambda m: None))')
    mkdir -p .gpucheck/minilm.partial/1_Pooling
    for f in config.json tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json \
        modules.json sentence_bert_config.json 1_Pooling/config.json; do
        cp "$src/$f" ".gpucheck/minilm.partial/$f"
    done
    mv .gpucheck/minilm.partial .gpucheck/minilm
fi

# --- checks: the wheels import under CPython 3.12 and find an adapter; the call's size ---------
py312=""
for candidate in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
        py312=$candidate
        break
    fi
done
if [ -n "$py312" ]; then
    # wgpu alone: it needs no numpy (the image has numpy; this Python may not).
    target=$(mktemp -d /tmp/ember-wheel-check-XXXXXX)
    trap 'rm -rf -- "$target"' EXIT
    "$py312" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
        --no-index --no-deps --no-compile --target "$target" .whl/*.whl
    export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/ember-xdg-$(id -u)}
    mkdir -p -m 700 "$XDG_RUNTIME_DIR"
    PYTHONPATH=$target "$py312" -c '
import wgpu
a = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
print("gpu_check_prepare: wgpu", wgpu.__version__, "imports under Python 3.12 and finds", a.info["device"])'
else
    echo "gpu_check_prepare: no python3.12 here: the wheels were not tried"
fi
tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
carried=$(du -cb .whl .gl .gpucheck | tail -1 | cut -f1)
total=$((tree + carried))
echo "gpu_check_prepare: the call sends $((total / 1024)) KiB (working tree $((tree / 1024)) KiB, carried $((carried / 1024)) KiB) of the 65536 KiB it may"
if [ "$total" -gt $((60 * 1024 * 1024)) ]; then
    echo "gpu_check_prepare: that is too close to the 64 MiB limit" >&2
    exit 1
fi

cat <<'EOF'

The device tool's `run` call (one call; the script ends inside about 8 minutes):
  command:   bash benchmarks/gpu_check.sh
  carry:     [".whl", ".gl", ".gpucheck"]
  timeout_s: 600
EOF
