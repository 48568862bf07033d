"""Whisper's log-mel spectrogram as ember ops, against transformers' WhisperFeatureExtractor
on every device, and ember's mel filterbank against the extractor's and openai-whisper's."""

import io
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from ember.audio.log_mel import LogMel
from ember.audio.mel_filters import mel_filters
from helpers import missing, require


def _speechlike(seconds, seed):
    """A chirp, a vowel-like harmonic stack and noise: energy across the whole band."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    chirp = 0.3 * np.sin(2 * np.pi * (100 + 3000 * t / seconds) * t)
    vowel = sum(0.1 / k * np.sin(2 * np.pi * 180 * k * t) for k in range(1, 20))
    return (
        chirp + vowel * (1 + np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(len(t))
    ).astype(np.float32)


def _compare(device, n_mels, seconds, chunk):
    transformers = require("transformers")
    x = _speechlike(seconds, seed=n_mels)
    fe = transformers.WhisperFeatureExtractor(feature_size=n_mels, chunk_length=chunk)
    ref = fe(x, sampling_rate=16000, return_tensors="np").input_features[0]
    got = LogMel(n_mels, device)(x, n_samples=chunk * 16000)
    assert got.shape == (n_mels, chunk * 100) and got.device == device
    np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=1e-4)


# Windows of 3 s (300 frames) keep the software-Vulkan run short; the maths is per frame
# except the floor at the window's maximum, which both sides take over the same window.
@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("seconds", [1.7, 3.5])  # padded to the window, and cut to it
def test_log_mel_matches_whisper_feature_extractor(device, n_mels, seconds):
    _compare(device, n_mels, seconds, chunk=3)


@pytest.mark.parametrize("seconds", [11.0, 31.0])
def test_log_mel_of_whisper_30_s_window(cpu, seconds):
    _compare(cpu, 80, seconds, chunk=30)


def test_silence_is_the_floor_everywhere(cpu):
    got = LogMel(80, cpu)(np.zeros(16000, np.float32)).numpy()
    np.testing.assert_array_equal(got, np.full((80, 3000), (-10 + 4) / 4, np.float32))


@pytest.mark.parametrize("n_mels", [80, 128])
def test_filterbank_matches_the_feature_extractor(n_mels):
    transformers = require("transformers")
    ref = transformers.WhisperFeatureExtractor(feature_size=n_mels).mel_filters.T
    np.testing.assert_allclose(mel_filters(n_mels), ref, rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def openai_mel_filters(tmp_path_factory):
    """whisper/assets/mel_filters.npz from the openai-whisper sdist (downloaded, not installed)."""
    where = tmp_path_factory.mktemp("openai-whisper")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    done = subprocess.run(cmd + ["openai-whisper==20250625", "-d", str(where)], capture_output=True)
    sdists = list(where.glob("openai_whisper-*.tar.gz"))
    if done.returncode != 0 or not sdists:
        missing("the openai-whisper sdist", done.stderr.decode(errors="replace")[-300:])
    with tarfile.open(sdists[0]) as tar:
        member = next(n for n in tar.getnames() if n.endswith("whisper/assets/mel_filters.npz"))
        return dict(np.load(io.BytesIO(tar.extractfile(member).read())))


@pytest.mark.parametrize("n_mels", [80, 128])
def test_filterbank_matches_openai_whisper_assets(openai_mel_filters, n_mels):
    ref = openai_mel_filters[f"mel_{n_mels}"]  # float32 in the file
    np.testing.assert_allclose(mel_filters(n_mels), ref, rtol=0, atol=1e-8)
