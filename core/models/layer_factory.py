"""How a model makes its layers from a VarBuilder's tensors, whatever they hold.

Model code (llama, gemma, whisper) asks a layer factory for its linear layers, fused
projections, embedding and tied output head; the factory decides their kind from what the
weight source hands out. DenseLayers, here, makes Linear and Embedding over tensors;
quant_layers.QuantizedLayers makes QuantLinear and QuantEmbedding where the source hands
out host weights in a storage type of their own (io.quant.QTensor: ggml's quantized
blocks from a GGUF file, or the f16 halves of a checkpoint the CPU computes with
directly, see whisper_load). The model code is the same either way. This module needs no
numpy (the page runs it); quant_layers does.
"""

import sys

from ..nn import Embedding, Linear
from ..tensor import cat


def loaded_quant_layers():
    """The quant_layers module where it was imported, else None: it needs numpy (a page's
    Pyodide has none), and where it was never imported no layer is a QuantLinear, which is
    all the fused decode steps (llama_step, whisper_step) ask it."""
    return sys.modules.get(f"{__package__}.quant_layers")


def placed_f32(linear, device):
    """A QuantLinear's weight as its backend call takes it (placed on `device` for f32
    activations, as its forward places it): what the fused decode steps pass."""
    from .. import dtype as dt

    linear.place(device, dt.f32)
    return linear._placed[1]


class DenseLayers:
    """How the model makes its layers from a VarBuilder's tensors: dense Linear and
    Embedding layers. quant_layers.QuantizedLayers overrides `from_tensors`, `concat` and
    `embedding` for quantized weights; the model code is the same either way."""

    def linear(self, vb, in_features, out_features, bias):
        w = vb.get((out_features, in_features), "weight")
        return self.from_tensors(w, vb.get((out_features,), "bias") if bias else None)

    def fused(self, vb, names, in_features, outs, bias):
        """One layer whose output is the concatenation of the layers `names` (q/k/v, or
        gate/up): one GEMM per step instead of several, which matters when decoding one
        token at a time."""
        parts = [
            (vb.pp(n).get((o, in_features), "weight"), vb.pp(n).get((o,), "bias") if bias else None)
            for n, o in zip(names, outs, strict=True)
        ]
        return self.concat(names, parts)

    def from_tensors(self, weight, bias):
        return Linear.from_tensors(weight, bias)

    def concat(self, names, parts):
        weights, biases = zip(*parts, strict=True)
        bias = cat(list(biases), 0) if biases[0] is not None else None
        return self.from_tensors(cat(list(weights), 0), bias)

    def embedding(self, vb, vocab, hidden, device):
        return Embedding(vocab, hidden, vb=vb)

    def tied_head(self, embedding):
        """The output projection that reuses the embedding table."""
        return self.from_tensors(embedding.weight, None)
