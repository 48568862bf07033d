"""whisper_step.DecoderStep: a decode step's layers as the modules' own backend calls, so
the same bits, on every device; the modules' path wherever it does not apply (dense
weights, a hook watching a layer, a step of several positions)."""

import copy

import numpy as np
import pytest

import ember
from ember.io.quant import GGMLType
from ember.models import whisper_step
from ember.models.quant_layers import QuantLinear
from ember.models.whisper_batch import finish, greedy_batch
from ember.models.whisper_decoding import DecodeOptions
from ember.models.whisper_load import load_whisper
from ember.models.whisper_step import DecoderStep
from helpers import ON_CI
from whisper_random import random_whisper  # noqa: F401


@pytest.fixture
def keeps_halves(cpu):
    """The CPU device where it computes with f16 weights (llvm_f16's kernels): a failure
    under CI=true where it does not, a skip on a machine without llvmlite or with
    EMBER_JIT=0 (the CPU widens the halves there, and no step is fused)."""
    if not cpu.backend.computes_quantized(GGMLType.F16):
        if ON_CI:
            pytest.fail("the CPU does not compute with f16 weights (llvmlite missing?)")
        pytest.skip("the CPU widens f16 weights here (no llvmlite, or EMBER_JIT=0)")
    return cpu


@pytest.fixture(scope="module")
def half_dir(random_whisper, tmp_path_factory):  # noqa: F811
    """The random model saved in float16: its projections load as QuantLinears (F16)
    where the device computes with f16 weights."""
    model, _, tokens, features = random_whisper
    path = tmp_path_factory.mktemp("whisper-f16")
    copy.deepcopy(model).half().save_pretrained(path)
    return path, tokens, features


def _steps(em, enc, tokens, fused, n=6):
    """Each step's logits (f32) of greedy decoding after the start of transcript."""
    em.decoder.fused_decode = fused
    try:
        cache = em.decoder.new_cache(enc)
        ids = [[tokens.sot, tokens.transcribe, tokens.no_timestamps]] * enc.shape[0]
        logits = em.decoder(ember.tensor(ids, dtype=ember.i64, device=enc.device), cache)
        out = []
        for _ in range(n):
            nxt = logits.numpy()[:, -1].argmax(-1)
            step = ember.tensor([[int(t)] for t in nxt], dtype=ember.i64, device=enc.device)
            logits = em.decoder(step, cache)
            out.append(logits.numpy())
        return out
    finally:
        del em.decoder.fused_decode  # the class's default again


def _takes(em):
    return all(
        type(p) is QuantLinear
        for layer in em.decoder.layers
        for p in (layer.fc1, layer.fc2, layer.self_attn.out_proj, layer.encoder_attn.q_proj)
    )


@pytest.mark.parametrize("batch", [1, 2])
def test_a_fused_decode_step_has_the_modules_bits(device, half_dir, batch):
    """Each decode step's logits through DecoderStep equal the modules' path bit for bit,
    for one row and for two; the step is taken exactly where the projections are
    quantized (F16 halves: the CPU's with its compiled kernels; wgpu widens them, and
    EMBER_JIT=0's CPU: both keep the modules' path)."""
    path, tokens, features = half_dir
    em = load_whisper(path, device=device)
    if device.kind == "cpu":  # the CPU keeps f16 halves wherever its kernels take them
        assert _takes(em) == device.backend.computes_quantized(GGMLType.F16)
    assert (DecoderStep.of(em.decoder) is not None) == _takes(em)
    enc = em.encoder(ember.tensor(features.numpy()[:batch], device=device))
    fused, modules = _steps(em, enc, tokens, True), _steps(em, enc, tokens, False)
    for a, b in zip(fused, modules, strict=True):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_batched_greedy_decoding_takes_the_step_with_the_same_tokens(
    keeps_halves, half_dir, monkeypatch
):
    """greedy_batch's steps run through DecoderStep (counted) and give the tokens and
    log-probabilities the modules' path gives."""
    path, tokens, features = half_dir
    em = load_whisper(path, device=keeps_halves)
    enc = em.encoder(ember.tensor(features.numpy(), device=keeps_halves))
    opts = DecodeOptions(max_new_tokens=10)
    prompts = [tokens.prompt(lang) for lang in ("en", "de", "fr")]
    runs = []
    real_run = DecoderStep.run

    def counted(self, x, cache):
        out = real_run(self, x, cache)
        runs.append(out is not None)
        return out

    monkeypatch.setattr(DecoderStep, "run", counted)
    fused = finish(greedy_batch(em, enc, tokens, opts, prompts, [0, 0, 0]))
    assert runs and all(runs)
    em.decoder.fused_decode = False
    taken = len(runs)
    modules = finish(greedy_batch(em, enc, tokens, opts, prompts, [0, 0, 0]))
    assert len(runs) == taken  # the modules' path made no DecoderStep
    for a, b in zip(fused, modules, strict=True):
        assert a.tokens == b.tokens and a.avg_logprob == b.avg_logprob


def test_dense_weights_or_a_hook_keep_the_modules_path(
    keeps_halves,
    random_whisper,
    half_dir,  # noqa: F811
):
    """A dense (f32) decoder has no fused step; a forward hook on any layer's module
    turns it off (ember.verify watches through hooks), and the hook sees the step."""
    _, f32_path, tokens, features = random_whisper
    dense = load_whisper(f32_path, device=keeps_halves)
    assert DecoderStep.of(dense.decoder) is None
    em = load_whisper(half_dir[0], device=keeps_halves)
    assert DecoderStep.of(em.decoder) is not None
    seen = []
    handle = em.decoder.layers[1].fc2.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    try:
        assert DecoderStep.of(em.decoder) is None
        enc = em.encoder(ember.tensor(features.numpy()[:1], device=keeps_halves))
        _steps(em, enc, tokens, True, n=2)
        assert (1, 1, em.cfg.d_model) in seen
    finally:
        handle.remove()
    assert DecoderStep.of(em.decoder) is not None


def test_a_cache_of_another_decoder_is_left_to_the_modules_path(keeps_halves, half_dir):
    """run() returns None, writing nothing, for a cache whose layer count differs."""
    path, tokens, features = half_dir
    em = load_whisper(path, device=keeps_halves)
    enc = em.encoder(ember.tensor(features.numpy()[:1], device=keeps_halves))
    cache = em.decoder.new_cache(enc)
    cache.cross = cache.cross[:1]
    x = ember.zeros((1, 1, em.cfg.d_model), device=keeps_halves)
    before = [k.numpy().copy() for k in cache.self_kv.keys]
    assert whisper_step.DecoderStep.of(em.decoder).run(x, cache) is None
    for k, was in zip(cache.self_kv.keys, before, strict=True):
        np.testing.assert_array_equal(k.numpy(), was)
