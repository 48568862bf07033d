"""faster-whisper's inputs for ember: its 16 kHz decoding of a file and its log-mel
windows. Its features differ from openai-whisper's by design (the log-mel of the whole
unpadded audio, each window cut from it and padded with zeros in the log domain), so
ember's decoding is given these very features when its tokens are compared."""

import numpy as np

import ember


def peer_audio(audio, n_mels):
    """(samples, features, content frames) as faster-whisper computes them, of a file or
    of 16 kHz samples."""
    from faster_whisper.audio import decode_audio
    from faster_whisper.feature_extractor import FeatureExtractor

    samples = audio if isinstance(audio, np.ndarray) else decode_audio(audio)
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    feats = FeatureExtractor(feature_size=n_mels)(samples)
    return samples, feats, feats.shape[-1] - 1


def peer_log_mel(samples, feats, content):
    """A log_mel for ember's windows (views into `samples`) that gives faster-whisper's
    window at the same seek: its features from there, at most 30 s of content, padded."""
    from faster_whisper.audio import pad_or_trim

    from ember.audio.log_mel import HOP, N_FRAMES

    base = samples.__array_interface__["data"][0]

    def log_mel(window):
        start = (window.__array_interface__["data"][0] - base) // samples.itemsize
        seek = start // HOP
        size = min(N_FRAMES, content - seek)
        return ember.tensor(pad_or_trim(feats[:, seek : seek + size]).astype(np.float32))

    return log_mel


class SameInputsOnce:
    """Wraps a model's encoder so that the same features are encoded once: tests that
    decode one window several ways (with and without a prompt) pay for one encoder pass.
    The encoder is deterministic, so this changes the time, not the result."""

    def __init__(self, encoder):
        self.encoder = encoder
        self.seen = {}

    def __call__(self, features):
        import hashlib

        key = hashlib.sha256(features.numpy().tobytes()).hexdigest()
        if key not in self.seen:
            self.seen[key] = self.encoder(features)
        return self.seen[key]
