"""ember imports and builds tensors where numpy cannot be imported (as in a browser page)."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs before `import ember`: a meta-path finder that refuses numpy (and cupy), as if
# they were not installed, so ember's pure-Python paths are the only ones left.
BLOCKER = textwrap.dedent("""
    import sys

    class _NoNumpy:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("numpy", "cupy"):
                raise ImportError(f"No module named {name!r} (blocked for this test)")
            return None

    sys.meta_path.insert(0, _NoNumpy())
    for _name in [m for m in sys.modules if m.split(".")[0] in ("numpy", "cupy")]:
        del sys.modules[_name]
""")


def _run(body):
    code = BLOCKER + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def test_blocker_really_blocks_numpy():
    out = _run("""
        try:
            import numpy
            print("numpy imported")
        except ImportError:
            print("blocked")
    """)
    assert out.strip() == "blocked"


def test_import_ember_without_numpy():
    out = _run("""
        import ember
        assert "numpy" not in sys.modules, sorted(m for m in sys.modules if "numpy" in m)
        print(ember.__version__, ember.f32, ember.bf16.itemsize)
    """)
    assert out.split() == ["0.1.0", "ember.f32", "2"]


def test_device_cpu_names_numpy_when_it_is_missing():
    out = _run("""
        import ember
        try:
            ember.Device.cpu()
        except ember.DeviceError as exc:
            print("DeviceError:", exc)
        else:
            print("no error")
    """)
    assert out.startswith("DeviceError:") and "numpy" in out and "pip install numpy" in out


def test_layout_views_without_numpy():
    out = _run("""
        from ember import Layout
        base = Layout((2, 3, 4))
        t = base.transpose(0, 2).narrow(1, 1, 2)
        print(t.shape, t.strides, t.offset)
        print(base.reshape((6, 4)).strides, base.transpose(0, 1).reshape((24,)))
        print(base.slice(2, 0, 4, 2).broadcast_to((5, 2, 3, 2)).strides)
        print(base.unsqueeze(0).squeeze().permute((2, 0, 1)).shape)
    """)
    lines = out.splitlines()
    assert lines[0] == "(4, 2, 2) (1, 4, 12) 4"
    assert lines[1] == "(4, 1) None"
    assert lines[2] == "(0, 12, 4, 2)"
    assert lines[3] == "(4, 2, 3)"


def test_tensors_without_numpy_on_a_pure_python_device():
    """Without numpy, ember.tensor/tolist go through hostdata (packed bytes) and views are
    layout-only: checked on a pure-Python storage backend standing in for a GPU device."""
    out = _run("""
        import ember
        from ember.backends.base import Backend
        from ember.layout import Layout

        class BytesBackend(Backend):
            # Storage is a bytearray; to_bytes reads any strided layout element by element
            # (fine for a test device; real devices do this in a kernel).
            name = "bytes"

            def from_host(self, data, dtype, shape, copy=True):
                return bytearray(data)

            def full(self, shape, value, dtype):
                from ember.hostdata import pack
                n = 1
                for d in shape:
                    n *= d
                return bytearray(pack([value] * n, dtype))

            def to_bytes(self, storage, layout, dtype):
                size = dtype.itemsize
                out = bytearray()
                def walk(dim, offset):
                    if dim == len(layout.shape):
                        out.extend(storage[offset * size:(offset + 1) * size])
                        return
                    for i in range(layout.shape[dim]):
                        walk(dim + 1, offset + i * layout.strides[dim])
                walk(0, layout.offset)
                return bytes(out)

        dev = ember.Device("webgpu", 9, BytesBackend())
        t = ember.tensor([[1.5, 2.0, 3.0], [4.0, 5.0, 6.0]], device=dev)
        print(t.dtype, t.shape, t.tolist())
        print(t.T.tolist())
        print(t[:, ::2].tolist(), t[1, 1:].tolist(), t[None, 0].tolist())
        print(t.reshape(3, 2).tolist(), t.unsqueeze(0).expand(2, 2, 3).shape)
        print(ember.tensor([1, 2, 3], device=dev).dtype, ember.tensor([True], device=dev).dtype)
        print(ember.tensor([1.0, 2.0], dtype=ember.bf16, device=dev).tolist())
        print(ember.tensor([0.5, 1.0], dtype=ember.f16, device=dev).tolist())
        print(ember.tensor(7, device=dev).item(), ember.zeros(2, 2, device=dev).tolist())
        print(ember.arange(4, device=dev).tolist())
        try:
            ember.tensor([[1, 2], [3]], device=dev)
        except ember.ShapeMismatch as exc:
            print("ragged:", exc)
    """)
    lines = out.splitlines()
    assert lines[0] == "ember.f32 (2, 3) [[1.5, 2.0, 3.0], [4.0, 5.0, 6.0]]"
    assert lines[1] == "[[1.5, 4.0], [2.0, 5.0], [3.0, 6.0]]"
    assert lines[2] == "[[1.5, 3.0], [4.0, 6.0]] [5.0, 6.0] [[1.5, 2.0, 3.0]]"
    assert lines[3] == "[[1.5, 2.0], [3.0, 4.0], [5.0, 6.0]] (2, 2, 3)"
    assert lines[4] == "ember.i64 ember.u8"
    assert lines[5] == "[1.0, 2.0]"
    assert lines[6] == "[0.5, 1.0]"
    assert lines[7] == "7 [[0.0, 0.0], [0.0, 0.0]]"
    assert lines[8] == "[0, 1, 2, 3]"
    assert lines[9].startswith("ragged: tensor: ragged nested sequence")


def test_random_without_numpy():
    out = _run("""
        import ember
        from ember.random import Generator
        a = Generator(3).normal((2, 2))
        b = Generator(3).normal((2, 2))
        print(a == b, len(a))
    """)
    assert out.strip() == "True 4"


@pytest.mark.parametrize("module", ["ember.tensor", "ember.layout", "ember.ops", "ember.hostdata",
                                    "ember.backends.base", "ember.functional", "ember.random"])
def test_core_modules_import_without_numpy(module):
    _run(f"""
        import importlib
        importlib.import_module({module!r})
        assert "numpy" not in sys.modules
    """)
