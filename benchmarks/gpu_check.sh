#!/usr/bin/env bash
# The device check in one call: its setup, then benchmarks/gpu_check.py (the stages; its
# docstring says what each does and what comes back under $OUT).
#
# On the lent GPU machine, from the repository root, with .gl, .whl and .gpucheck carried
# (benchmarks/gpu_check_prepare.sh fills them here and prints the exact run call):
#     bash benchmarks/gpu_check.sh
# Here, the dry mode (numpy in place of CuPy, lavapipe, torch CPU, small sizes; the logs go
# under test-artifacts/gpu_check/):
#     PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh --dry     # or GPU_CHECK_DRY=1
set -u
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1

dry=${GPU_CHECK_DRY:-0}
for arg in "$@"; do
    if [ "$arg" = --dry ]; then dry=1; fi
done
if [ "$dry" != 0 ]; then
    # This machine's own Vulkan (lavapipe) and the project's Python, nothing unpacked.
    GPU_CHECK_DRY=1 exec "${PYTHON:-python3}" benchmarks/gpu_check.py "$@"
fi

# The device mode unpacks Debian packages into / : only on the lent machine, where the
# device tool sets $OUT, never on a machine of ours by mistake.
if [ -z "${OUT:-}" ]; then
    echo "gpu_check.sh: \$OUT is unset, so this is not the lent machine; here run it with --dry" >&2
    exit 2
fi

# The Vulkan loader (and the GL vendor-neutral libraries the NVIDIA ICD links) from the
# carried Debian packages: the image has the driver but no loader (the device tool's notes).
shopt -s nullglob
debs=(.gl/*.deb)
if [ ${#debs[@]} -gt 0 ]; then
    for f in "${debs[@]}"; do
        dpkg -x "$f" / || echo "gpu_check.sh: dpkg -x $f failed"
    done
    ldconfig
else
    echo "gpu_check.sh: no .gl/*.deb carried: wgpu needs the image's own Vulkan loader"
fi
ldconfig -p | grep -q 'libvulkan\.so\.1' ||
    echo "gpu_check.sh: no libvulkan.so.1 after the unpacking: wgpu will find no adapter"
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then
    export VK_DRIVER_FILES=$icd
fi
egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
if [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] && [ -f "$egl" ]; then
    export __EGL_VENDOR_LIBRARY_FILENAMES=$egl
fi

# wgpu and the other wheels the image lacks, into a folder of their own ahead on the path.
wheels=(.whl/*.whl)
site=/tmp/ember-gpu-check-site
if [ ${#wheels[@]} -gt 0 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "${wheels[@]}" || echo "gpu_check.sh: installing the carried wheels failed"
    export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
else
    echo "gpu_check.sh: no .whl/*.whl carried: wgpu must be in the image already"
fi

exec python3 benchmarks/gpu_check.py "$@"
