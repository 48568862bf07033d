"""ember.nn: layers against PyTorch, Module bookkeeping, VarBuilder lookups and errors."""
import json

import numpy as np
import pytest

import ember
from ember import nn
from helpers import require

torch = None


@pytest.fixture(scope="module", autouse=True)
def _torch():
    global torch
    torch = require("torch")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _vb(tensors, device=None, dtype=None):
    return nn.VarBuilder.from_tensors(tensors, device=device, dtype=dtype)


def _close(actual, expected, atol=1e-5, rtol=1e-5):
    np.testing.assert_allclose(actual.numpy(), np.asarray(expected), rtol=rtol, atol=atol)


# --- layers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 8), (2, 1, 3, 8)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(device, shape, bias):
    rng = _rng(1)
    w, b, x = _randn(rng, 6, 8), _randn(rng, 6), _randn(rng, *shape)
    layer = nn.Linear(8, 6, bias=bias, vb=_vb({"weight": w, "bias": b}, device))
    expected = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w),
                                          torch.from_numpy(b) if bias else None)
    _close(layer(ember.tensor(x, device=device)), expected.numpy())


def test_linear_rejects_wrong_input_width(device):
    layer = nn.Linear(8, 6, vb=_vb({"weight": np.zeros((6, 8), np.float32),
                                    "bias": np.zeros(6, np.float32)}, device))
    with pytest.raises(ember.ShapeMismatch, match=r"Linear: input \[2, 7\].*expected 8"):
        layer(ember.zeros(2, 7, device=device))


def test_embedding_matches_torch(device):
    rng = _rng(2)
    w = _randn(rng, 10, 4)
    ids = np.array([[1, 9, 0], [3, 3, 2]], np.int64)
    layer = nn.Embedding(10, 4, vb=_vb({"weight": w}, device))
    expected = torch.nn.functional.embedding(torch.from_numpy(ids), torch.from_numpy(w))
    _close(layer(ember.tensor(ids, device=device)), expected.numpy(), atol=0, rtol=0)


def test_layer_norm_matches_torch(device):
    rng = _rng(3)
    x, w, b = _randn(rng, 2, 3, 16) * 3 + 1, _randn(rng, 16), _randn(rng, 16)
    layer = nn.LayerNorm(16, eps=1e-12, vb=_vb({"weight": w, "bias": b}, device))
    expected = torch.nn.functional.layer_norm(torch.from_numpy(x), (16,), torch.from_numpy(w),
                                              torch.from_numpy(b), eps=1e-12)
    _close(layer(ember.tensor(x, device=device)), expected.numpy(), atol=1e-5)


def test_layer_norm_reads_legacy_gamma_beta(device):
    rng = _rng(4)
    x, w, b = _randn(rng, 3, 8), _randn(rng, 8), _randn(rng, 8)
    layer = nn.LayerNorm(8, vb=_vb({"gamma": w, "beta": b}, device))
    expected = torch.nn.functional.layer_norm(torch.from_numpy(x), (8,), torch.from_numpy(w),
                                              torch.from_numpy(b), eps=1e-5)
    _close(layer(ember.tensor(x, device=device)), expected.numpy(), atol=1e-5)


def test_rms_norm_matches_formula(device):
    rng = _rng(5)
    x, w = _randn(rng, 4, 16), _randn(rng, 16)
    layer = nn.RmsNorm(16, eps=1e-6, vb=_vb({"weight": w}, device))
    tx = torch.from_numpy(x)
    expected = tx * torch.rsqrt(tx.pow(2).mean(-1, keepdim=True) + 1e-6) * torch.from_numpy(w)
    _close(layer(ember.tensor(x, device=device)), expected.numpy(), atol=1e-5)


def test_conv1d_matches_torch(device):
    rng = _rng(6)
    x, w, b = _randn(rng, 2, 4, 11), _randn(rng, 6, 2, 3), _randn(rng, 6)
    layer = nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2, vb=_vb({"weight": w, "bias": b},
                                                                     device))
    expected = torch.nn.functional.conv1d(torch.from_numpy(x), torch.from_numpy(w),
                                          torch.from_numpy(b), stride=2, padding=1, groups=2)
    _close(layer(ember.tensor(x, device=device)), expected.numpy(), atol=1e-4)


def test_conv2d_matches_torch(device):
    rng = _rng(7)
    x, w, b = _randn(rng, 1, 3, 9, 8), _randn(rng, 5, 3, 3, 2), _randn(rng, 5)
    layer = nn.Conv2d(3, 5, (3, 2), stride=1, padding=1, vb=_vb({"weight": w, "bias": b}, device))
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                          torch.from_numpy(b), padding=1)
    _close(layer(ember.tensor(x, device=device)), expected.numpy(), atol=1e-4)


def _torch_activation(name):
    F = torch.nn.functional
    return {
        "gelu": F.gelu,
        "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "relu": F.relu,
        "silu": F.silu,
        "swish": F.silu,
        "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
        "linear": lambda x: x,
    }[name]


@pytest.mark.parametrize("name", ["gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu",
                                  "swish", "quick_gelu", "tanh", "sigmoid", "linear"])
def test_activation_by_name_matches_torch(device, name):
    x = np.linspace(-6, 6, 97, dtype=np.float32)
    expected = _torch_activation(name)(torch.from_numpy(x)).numpy()
    _close(nn.Activation(name)(ember.tensor(x, device=device)), expected, atol=2e-6)
    _close(nn.get_activation(name.upper())(ember.tensor(x, device=device)), expected, atol=2e-6)


def test_unknown_activation_names_the_known_ones():
    with pytest.raises(ember.EmberError, match=r"unknown name 'mish'.*gelu"):
        nn.get_activation("mish")


def test_dropout_is_identity(device):
    x = ember.tensor([[1.0, -2.0, 3.0]], device=device)
    assert nn.Dropout(0.5)(x).tolist() == [[1.0, -2.0, 3.0]]


# --- Module bookkeeping ----------------------------------------------------------------------------
class _Block(nn.Module):
    def __init__(self, vb=None):
        super().__init__()
        self.fc = nn.Linear(4, 3, vb=vb.pp("fc") if vb else None)
        self.norm = nn.LayerNorm(3, vb=vb.pp("norm") if vb else None)
        self.act = nn.Activation("relu")
        self._cache = "not a parameter"

    def forward(self, x):
        return self.act(self.norm(self.fc(x)))


def _block_tensors(rng, prefix=""):
    return {f"{prefix}fc.weight": _randn(rng, 3, 4), f"{prefix}fc.bias": _randn(rng, 3),
            f"{prefix}norm.weight": _randn(rng, 3), f"{prefix}norm.bias": _randn(rng, 3)}


def test_named_parameters_follow_attribute_names():
    seq = nn.Sequential(_Block(), nn.Linear(3, 2, bias=False))
    names = [n for n, _ in seq.named_parameters()]
    assert names == ["0.fc.weight", "0.fc.bias", "0.norm.weight", "0.norm.bias", "1.weight"]
    assert seq.num_parameters() == 12 + 3 + 3 + 3 + 6
    assert set(seq.state_dict()) == set(names)


def test_load_later_equals_load_at_construction(device):
    rng = _rng(8)
    tensors = _block_tensors(rng, "blk.")
    x = _randn(rng, 2, 4)
    built = _Block(_vb(tensors, device).pp("blk"))
    later = _Block().load(_vb(tensors, device).pp("blk"))
    a = built(ember.tensor(x, device=device)).numpy()
    b = later(ember.tensor(x, device=device)).numpy()
    tx = torch.from_numpy(x)
    t = {k: torch.from_numpy(v) for k, v in tensors.items()}
    ref = torch.relu(torch.nn.functional.layer_norm(
        torch.nn.functional.linear(tx, t["blk.fc.weight"], t["blk.fc.bias"]), (3,),
        t["blk.norm.weight"], t["blk.norm.bias"]))
    np.testing.assert_allclose(a, ref.numpy(), atol=1e-5)
    np.testing.assert_array_equal(a, b)


def test_sequential_runs_children_in_order(device):
    rng = _rng(9)
    w1, w2 = _randn(rng, 5, 4), _randn(rng, 2, 5)
    seq = nn.Sequential(nn.Linear(4, 5, bias=False), nn.Activation("tanh"),
                        nn.Linear(5, 2, bias=False))
    seq.load(_vb({"0.weight": w1, "2.weight": w2}, device))
    x = _randn(rng, 3, 4)
    expected = np.tanh(x @ w1.T) @ w2.T
    _close(seq(ember.tensor(x, device=device)), expected, atol=1e-5)
    assert len(seq) == 3 and isinstance(seq[1], nn.Activation)


def test_module_to_moves_and_casts_every_parameter(device):
    rng = _rng(10)
    block = _Block(_vb(_block_tensors(rng)))
    block.to(device)
    assert {p.device for p in block.parameters()} == {device}
    block.to(ember.f16)
    assert {p.dtype for p in block.parameters()} == {ember.f16}


def test_load_non_strict_keeps_missing(device):
    layer = nn.Linear(2, 2)
    layer.load(_vb({"weight": np.eye(2, dtype=np.float32)}, device), strict=False)
    assert layer.weight.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    with pytest.raises(ember.FormatError, match="'bias' not found"):
        nn.Linear(2, 2).load(_vb({"weight": np.eye(2, dtype=np.float32)}, device))


# --- VarBuilder ------------------------------------------------------------------------------------
def test_var_builder_prefixes_and_keys():
    vb = _vb({"encoder.layer.0.w": np.zeros(2, np.float32), "encoder.b": np.ones(1, np.float32),
              "head": np.zeros(1, np.float32)})
    enc = vb.pp("encoder")
    assert enc.path("b") == "encoder.b"
    assert enc.keys() == ["b", "layer.0.w"]
    assert enc.pp("layer").pp(0).contains("w")
    assert "head" in vb and "head" not in enc
    assert enc.get((1,), "b").tolist() == [1.0]


def test_var_builder_missing_names_the_full_path_and_close_names():
    vb = _vb({"encoder.layer.0.weight": np.zeros(2, np.float32)}, )
    with pytest.raises(ember.FormatError) as info:
        vb.pp("encoder").pp("layer.0").get((2,), "wieght")
    message = str(info.value)
    assert "'encoder.layer.0.wieght'" in message and "encoder.layer.0.weight" in message
    assert info.value.field == "encoder.layer.0.wieght"


def test_var_builder_shape_mismatch_names_path_and_shapes():
    vb = _vb({"a.w": np.zeros((3, 4), np.float32)})
    with pytest.raises(ember.ShapeMismatch, match=r"'a\.w'.*has shape \[3, 4\], expected \[4, 3\]"):
        vb.pp("a").get((4, 3), "w")


def test_var_builder_casts_and_places(device):
    vb = _vb({"w": np.arange(4, dtype=np.float32)}, device=device, dtype="f16")
    t = vb.get((4,), "w")
    assert t.dtype is ember.f16 and t.device == device
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert vb.get((4,), "w", dtype=ember.f32).dtype is ember.f32


def _save(tensors, path):
    st = require("safetensors.numpy")
    st.save_file(tensors, str(path))


def test_var_builder_reads_safetensors_and_names_the_file(tmp_path, device):
    rng = _rng(11)
    w = _randn(rng, 3, 4)
    _save({"fc.weight": w, "fc.bias": np.zeros(3, np.float32)}, tmp_path / "model.safetensors")
    vb = nn.VarBuilder.from_dir(tmp_path, device=device)
    np.testing.assert_array_equal(vb.pp("fc").get((3, 4), "weight").numpy(), w)
    with pytest.raises(ember.ShapeMismatch, match=str(tmp_path / "model.safetensors")):
        vb.get((4, 3), "fc.weight")
    with pytest.raises(ember.FormatError, match="not found in .*model.safetensors"):
        vb.get((1,), "fc.gamma")


def test_var_builder_reads_sharded_checkpoints(tmp_path, device):
    rng = _rng(12)
    a, b = _randn(rng, 2, 2), _randn(rng, 5)
    _save({"layer.0.w": a}, tmp_path / "model-00001-of-00002.safetensors")
    _save({"layer.1.w": b}, tmp_path / "model-00002-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {"layer.0.w": "model-00001-of-00002.safetensors",
                                            "layer.1.w": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    for vb in (nn.VarBuilder.from_dir(tmp_path, device=device),
               nn.VarBuilder.from_safetensors(tmp_path / "model.safetensors.index.json",
                                              device=device)):
        np.testing.assert_array_equal(vb.pp("layer").get((2, 2), "0.w").numpy(), a)
        np.testing.assert_array_equal(vb.get((5,), "layer.1.w").numpy(), b)
        with pytest.raises(ember.ShapeMismatch, match="model-00002-of-00002.safetensors"):
            vb.get((4,), "layer.1.w")


def test_sharded_index_naming_a_missing_file(tmp_path):
    index = {"weight_map": {"w": "gone.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    vb = nn.VarBuilder.from_dir(tmp_path)
    with pytest.raises(ember.FormatError, match="gone.safetensors does not exist.*index.json"):
        vb.get((1,), "w")


def test_bad_sharded_index_names_the_field(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": [1]}))
    with pytest.raises(ember.FormatError, match="'weight_map'"):
        nn.VarBuilder.from_dir(tmp_path)


def test_dir_without_weights_says_what_it_expected(tmp_path):
    with pytest.raises(ember.FormatError, match="model.safetensors"):
        nn.VarBuilder.from_dir(tmp_path)


class _WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.placeholder((2,))
        self.register_buffer("table", nn.placeholder((3,)))
        self.register_buffer("cache", ember.zeros(4), persistent=False)


def test_buffers_load_when_persistent_and_stay_out_of_parameters(device):
    m = _WithBuffers()
    assert [n for n, _ in m.named_parameters()] == ["scale"]
    assert [n for n, _ in m.named_buffers()] == ["table", "cache"]
    assert set(m.state_dict()) == {"scale", "table"}
    m.load(_vb({"scale": np.array([1, 2], np.float32), "table": np.array([3, 4, 5], np.float32)},
               device))
    assert m.table.tolist() == [3.0, 4.0, 5.0] and m.table.device == device
    assert m.cache.tolist() == [0.0] * 4  # transient: never read from the checkpoint


def test_module_list_holds_indexed_children():
    layers = nn.ModuleList(nn.Linear(2, 2), nn.Linear(2, 3))
    assert [n for n, _ in layers.named_parameters()] == ["0.weight", "0.bias", "1.weight",
                                                          "1.bias"]
    assert layers[1].out_features == 3
    with pytest.raises(TypeError):
        layers(ember.zeros(1, 2))


def test_module_without_init_says_so():
    class Broken(nn.Module):
        def __init__(self):
            self.w = ember.zeros(1)

    with pytest.raises(AttributeError, match="Module.__init__"):
        Broken()
