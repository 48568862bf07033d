"""A Llama-family GGUF model in a page (Pyodide, no numpy), its weights kept quantized.

build_web writes beside the GGUF a description of it (build_scripts/page_gguf_sidecar.py:
config, tensor table, chat template, tokenizer.json), because ember's GGUF reader needs
numpy. Here the GGUF itself sits in one JS ArrayBuffer (fetched with progress) and:

- the F32/F16 tensors (norms) go from views of it to the device (tensor_from_js);
- the quantized 2-D weights go to the device as their raw blocks (the backend's
  upload_quantized: one transient host copy per tensor, the largest being the 30 MB
  Q8_0 embedding table, which is also the tied output head) and run through its qmatmul;
  q/k/v and gate/up of one type are stacked, as natively, for one matmul per step;
- the token embedding is looked up on the host: only the rows a step needs are decoded
  from a copy of the table's bytes kept as a JS ArrayBuffer (outside wasm memory), so
  the file's buffer can be freed once the model is built.

The model is ember's own LlamaForCausalLM; only the layers differ (PageQuantLayers).
"""

import struct

import js
from ember import dtype as dt
from ember.errors import DimOutOfRange, FormatError, ShapeMismatch, UnsupportedOp, fmt_shape
from ember.io.js_buffers import tensor_from_js
from ember.layout import Layout
from ember.models.layer_factory import DenseLayers
from ember.models.llama import LlamaForCausalLM
from ember.nn import Module
from ember.tensor import Tensor, cat, tensor

# ggml type numbers (ember.io.quant.GGMLType, which imports numpy)
F32, F16, Q8_0 = 0, 1, 8
_PLAIN = {F32: dt.f32, F16: dt.f16}
_Q8_0_BLOCK = struct.Struct("<e32b")  # scale (f16), 32 int8 weights: 34 bytes


class JsQuantWeight:
    """A quantized (out, in) weight still in the file's buffer: a JS Uint8Array `view`."""

    def __init__(self, view, ggml_type, shape, name):
        self.view, self.ggml_type, self.shape, self.name = view, ggml_type, tuple(shape), name


class GGUFBufferSource:
    """A VarBuilder source over a GGUF file held in a JS ArrayBuffer, answering by the
    Hugging Face names of the sidecar's tensor table."""

    def __init__(self, buffer, tensors, label):
        self.buffer, self.tensors, self.label = buffer, tensors, label
        size = int(buffer.byteLength)
        for name, info in tensors.items():
            if info["offset"] + info["nbytes"] > size:
                raise FormatError(
                    f"{label}: tensor {name!r} ends at byte {info['offset'] + info['nbytes']}, "
                    f"past the end of the file ({size} bytes): the bundle's GGUF and its "
                    f"page-model.json do not match (rebuild the bundle)",
                    path=label,
                    field=name,
                )

    def keys(self):
        return self.tensors.keys()

    def __contains__(self, name):
        return name in self.tensors

    def shape(self, name):
        return tuple(self.tensors[name]["shape"])

    def where(self, name=None):
        return self.label if name is None else f"{self.label} (tensor {name!r})"

    def view(self, name):
        info = self.tensors[name]
        return js.Uint8Array.new(self.buffer, info["offset"], info["nbytes"])

    def load(self, name, device=None, dtype=None):
        info = self.tensors[name]
        t = info["type"]
        if t in _PLAIN:
            out = tensor_from_js(self.view(name), _PLAIN[t], info["shape"], device)
            want = dt.as_dtype(dtype) if dtype is not None else dt.f32
            return out if out.dtype is want else out.to(want)
        if len(info["shape"]) != 2:
            raise UnsupportedOp(
                f"{self.where(name)}: a quantized tensor of shape {fmt_shape(info['shape'])}; "
                f"the page reads quantized weights only as 2-D matrices",
                op="page_gguf",
            )
        return JsQuantWeight(self.view(name), t, info["shape"], self.where(name))


def _stacked(weights):
    """One JsQuantWeight of same-type weights stacked by rows (rows are whole blocks)."""
    total = sum(int(w.view.byteLength) for w in weights)
    out = js.Uint8Array.new(total)
    at = 0
    for w in weights:
        out.set(w.view, at)
        at += int(w.view.byteLength)
    rows = sum(w.shape[0] for w in weights)
    return JsQuantWeight(out, weights[0].ggml_type, (rows, weights[0].shape[1]), weights[0].name)


class PageQuantLinear(Module):
    """y = x @ dequantize(W).T + bias, W's raw blocks on the device (Backend.qmatmul)."""

    def __init__(self, weight, bias, device):
        super().__init__()
        be = device.backend
        if not be.keeps_quantized(weight.ggml_type):
            raise UnsupportedOp(
                f"{weight.name}: ggml type {weight.ggml_type} has no quantized kernel on this "
                f"device; the page keeps weights quantized and has no numpy to dequantize them",
                op="page_gguf",
            )
        # The backend takes a bytes-like object: one host copy of this tensor, freed after.
        self.qweight = be.upload_quantized(weight.view.to_bytes(), weight.ggml_type, weight.shape)
        self.out_features, self.in_features = weight.shape
        self.ggml_type = weight.ggml_type
        self.bias = bias

    def forward(self, x):
        if x.shape[-1] != self.in_features:
            raise ShapeMismatch(
                f"PageQuantLinear: input {fmt_shape(x.shape)} has last dim {x.shape[-1]}, "
                f"expected {self.in_features}",
                op="qmatmul",
                shapes=(x.shape, (self.out_features, self.in_features)),
            )
        xf = x if x.dtype is dt.f32 else x.to(dt.f32)
        st, shape = x.backend.qmatmul(xf.storage, xf.layout, self.qweight, dt.f32)
        y = Tensor(st, Layout(shape), dt.f32, x.device)
        if x.dtype is not dt.f32:
            y = y.to(x.dtype)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self):
        return f"{self.in_features}, {self.out_features}, ggml type {self.ggml_type}"


class PageQ8Embedding(Module):
    """Rows of a Q8_0 (vocab, dim) table decoded on the host, a step's ids at a time, from
    the table's bytes in a JS ArrayBuffer of their own."""

    def __init__(self, weight, device, dtype=dt.f32):
        super().__init__()
        if weight.ggml_type != Q8_0:
            raise UnsupportedOp(
                f"{weight.name}: the page looks token embeddings up in Q8_0, F32 or F16 "
                f"tables, not ggml type {weight.ggml_type}",
                op="page_gguf",
            )
        self.num_embeddings, self.embedding_dim = weight.shape
        v = weight.view
        # A copy of the table alone, so the file's buffer can go once the model is built.
        self.table = v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength)
        self.row_bytes = self.embedding_dim // 32 * _Q8_0_BLOCK.size
        self.device, self.out_dtype = device, dtype
        self.weight = weight  # the tied head uploads it (PageQuantLayers.tied_head)
        self.host_ids = None

    def _row(self, i):
        raw = js.Uint8Array.new(self.table, i * self.row_bytes, self.row_bytes).to_bytes()
        out = []
        for scale, *q in _Q8_0_BLOCK.iter_unpack(raw):
            out.extend(scale * v for v in q)
        return out

    def forward(self, ids):
        # The ids as the caller gave them (PageLlamaForCausalLM), else read back.
        rows = self.host_ids if self.host_ids is not None else ids.tolist()
        flat = [i for row in rows for i in row] if rows and isinstance(rows[0], list) else rows
        for i in flat:
            if not 0 <= i < self.num_embeddings:
                raise DimOutOfRange(
                    f"embedding: token id {i} out of range for a vocabulary of "
                    f"{self.num_embeddings}",
                    op="embedding",
                    index=i,
                )
        values = [self._row(i) for i in flat]
        y = tensor(values, dtype=dt.f32, device=self.device).reshape(*ids.shape, self.embedding_dim)
        return y if self.out_dtype is dt.f32 else y.to(self.out_dtype)


class PageQuantLayers(DenseLayers):
    """LlamaForCausalLM's layers over a GGUFBufferSource: quantized where the file is."""

    def __init__(self, device):
        self.device = device

    def from_tensors(self, weight, bias):
        if isinstance(weight, JsQuantWeight):
            return PageQuantLinear(weight, bias, self.device)
        return super().from_tensors(weight, bias)

    def concat(self, names, parts):
        weights = [w for w, _ in parts]
        if not any(isinstance(w, JsQuantWeight) for w in weights):
            return super().concat(names, parts)
        if (
            not all(isinstance(w, JsQuantWeight) for w in weights)
            or len({w.ggml_type for w in weights}) != 1
        ):
            raise UnsupportedOp(
                f"{weights[0].name}: the page stacks {', '.join(names)} only when they share "
                f"one quantized type",
                op="page_gguf",
            )
        bias = cat([b for _, b in parts], 0) if parts[0][1] is not None else None
        return PageQuantLinear(_stacked(weights), bias, self.device)

    def embedding(self, vb, vocab, hidden, device):
        info = vb.source.tensors.get(vb.path("weight"))
        if info is not None and info["type"] not in _PLAIN:
            return PageQ8Embedding(vb.get((vocab, hidden), "weight"), device)
        return super().embedding(vb, vocab, hidden, device)

    def tied_head(self, embedding):
        head = self.from_tensors(embedding.weight, None)
        if isinstance(embedding, PageQ8Embedding):
            embedding.weight = None  # its view would keep the whole file's buffer alive
        return head


class PageLlamaForCausalLM(LlamaForCausalLM):
    """ember's Llama, handing the host ids of each step to a host-side embedding so that
    looking rows up needs no readback of the ids from the device."""

    def forward(self, input_ids, *args, **kwargs):
        embed = self.embed_tokens
        if isinstance(embed, PageQ8Embedding) and not isinstance(input_ids, Tensor):
            embed.host_ids = input_ids
        try:
            return super().forward(input_ids, *args, **kwargs)
        finally:
            if isinstance(embed, PageQ8Embedding):
                embed.host_ids = None


def load_model(buffer, sidecar, device, label, max_len=None):
    """The model over the GGUF in `buffer`, described by its sidecar dict; `max_len` caps
    its context (the cache and rope tables)."""
    from ember.models.llama_config import LlamaConfig
    from ember.nn import VarBuilder

    cfg = LlamaConfig.from_dict(sidecar["config"], path=f"{label} (page-model.json)")
    source = GGUFBufferSource(buffer, sidecar["tensors"], label)
    vb = VarBuilder(source, dtype=dt.f32, device=device)
    return PageLlamaForCausalLM(cfg, vb, device, layers=PageQuantLayers(device), max_len=max_len)


def num_parameters(model):
    """The model's weights, quantized ones included (Module.num_parameters counts only
    its tensors); the tied head is the embedding table, counted once."""
    n = model.num_parameters()
    for _, m in model.named_modules():
        if isinstance(m, PageQuantLinear):
            n += m.out_features * m.in_features
    embed = model.embed_tokens
    if isinstance(embed, PageQ8Embedding) and not model.config.tie_word_embeddings:
        n += embed.num_embeddings * embed.embedding_dim
    return n
