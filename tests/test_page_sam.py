"""The segmentation page's Python, run natively (it needs no browser for these parts):
the pure-Python resize equals Pillow's bilinear to the pixel, the pixel values equal
SamProcessor's recipe, the polynomial sin/cos Fourier encoding equals SAM's, and
SamModel.from_tensors builds the model from_pretrained builds."""
import json

import numpy as np
import pytest

import ember
from ember.errors import FormatError, InvalidArgument
from ember.models.sam import SamModel
from ember.models.sam_prompt import FourierEmbedding
from ember.web.page_sam import AccurateFourierEmbedding, pixel_values
from ember.web.page_sam_resize import check_size, resize_plane, resized_shape
from helpers import require
from sam_page_fixtures import MEAN, STD, sample_image, save_tiny_sam

# upscaled, both sides shrunk, one side kept, square, tiny, long and thin
SIZES = [(40, 48, 64), (700, 500, 64), (64, 30, 64), (30, 30, 64), (3, 7, 64), (20, 300, 64)]


@pytest.mark.parametrize("h, w, longest", SIZES)
def test_resize_equals_pillow_bilinear(h, w, longest):
    pil = require("PIL.Image")
    img = np.random.default_rng(h * w).integers(0, 256, (h, w, 3)).astype(np.uint8)
    rh, rw = resized_shape(h, w, longest)
    want = np.asarray(pil.fromarray(img).resize((rw, rh), pil.BILINEAR))
    got = np.stack([np.frombuffer(resize_plane(img[..., c].tobytes(), w, h, rw, rh), np.uint8)
                    .reshape(rh, rw) for c in range(3)], -1)
    np.testing.assert_array_equal(got, want)


def test_pixel_values_follow_sam_processor():
    pil = require("PIL.Image")
    rgb = sample_image()
    h, w = rgb.shape[:2]
    rgba = np.concatenate([rgb, np.full((h, w, 1), 255, np.uint8)], -1)
    got, (rh, rw) = pixel_values(rgba.tobytes(), w, h, 64, ember.Device.cpu())
    assert (rh, rw) == (48, 64)
    resized = np.asarray(pil.fromarray(rgb).resize((rw, rh), pil.BILINEAR))
    x = ((resized.astype(np.float64) * (1 / 255)).astype(np.float32) - MEAN) / STD
    want = np.zeros((1, 3, 64, 64), np.float32)
    want[0, :, :rh, :rw] = x.transpose(2, 0, 1)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-6)


def test_an_image_too_thin_is_refused():
    with pytest.raises(InvalidArgument, match="image: 5000x1 is too thin"):
        check_size(5000, 1, 64)


def test_polynomial_fourier_encoding_equals_sams(device):
    rng = np.random.default_rng(0)
    matrix = rng.normal(0, 1, (2, 32)).astype(np.float32)
    coords = rng.uniform(0, 1, (3, 5, 2)).astype(np.float32)
    want = FourierEmbedding(ember.tensor(matrix)).forward(ember.tensor(coords)).numpy()
    got = AccurateFourierEmbedding(ember.tensor(matrix, device=device))(
        ember.tensor(coords, device=device)).numpy()
    # The arguments reach ~30 rad, where one float32 ulp of the argument is 2e-6.
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_from_tensors_builds_what_from_pretrained_builds(tmp_path):
    require("transformers")
    from ember.io.safetensors import load_safetensors
    path = save_tiny_sam(tmp_path / "tiny")
    ref = SamModel.from_pretrained(path)
    tensors = load_safetensors(str(path / "model.safetensors"))
    config = json.loads((path / "config.json").read_text())
    model = SamModel.from_tensors(tensors, config, label="tiny/model.safetensors")
    pixels = ember.tensor(np.random.default_rng(1).normal(0, 1, (1, 3, 64, 64)).astype(np.float32))
    np.testing.assert_array_equal(model.image_embeddings(pixels).numpy(),
                                  ref.image_embeddings(pixels).numpy())
    with pytest.raises(FormatError, match="tiny/model.safetensors: neither a segment-anything"):
        SamModel.from_tensors(tensors, None, label="tiny/model.safetensors")
