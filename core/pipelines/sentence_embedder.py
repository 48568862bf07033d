"""Sentence embeddings: tokenizer + BERT encoder + sentence-transformers pooling.

    emb = SentenceEmbedder.from_pretrained("all-MiniLM-L6-v2", device="best")
    vecs = emb.encode(["a cat", "a dog"])          # (2, 384) Tensor on the device
    emb.similarity(vecs, vecs)                    # cosine matrix

Batches are padding-aware: texts are sorted by token count and batched with neighbours
of similar length, each batch padded only to its own longest text, then the results are
put back in input order. A batch holds up to `batch_size` texts and up to `batch_tokens`
padded tokens, so short texts go in large batches (on the CPU every op of a batch is a
hand-off between the cores: 32 short texts a batch spent twice the CPU time of 256 on a
busy 2-core machine) while long ones stay within a bounded memory.
"""

import os
import time

from .. import dtype as dt
from ..device import as_device
from ..errors import EmberError
from ..tensor import Tensor, cat, tensor
from .tokenizer_loader import encode_ids, load_tokenizer

# Texts and padded tokens (texts x the batch's longest) in one batch by default: 256
# sentences of ~16 tokens; 16 texts of 256 tokens (their attention scores: 50 MB in f32
# for MiniLM's 12 heads).
BATCH_SIZE = 256
BATCH_TOKENS = 4096


class SentenceEmbedder:
    def __init__(self, model, tokenizer, pooling, device, model_path=None, pad_id=0):
        self.model = model
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.device = device
        self.model_path = model_path
        self.pad_id = pad_id
        limit = model.config.max_position_embeddings
        self.max_seq_length = min(pooling.max_seq_length or limit, limit)
        self.timings = {}

    @classmethod
    def from_pretrained(cls, path_or_id=None, device=None, dtype=dt.f32):
        """A model directory or hub id (see ember.hub.resolve); None is the default model."""
        from ..hub import resolve
        from ..models.bert import BertConfig, BertModel
        from ..models.pooling import read_pooling_config
        from ..nn import VarBuilder

        start = time.perf_counter()
        device = as_device(device)
        path = resolve(path_or_id)
        config = BertConfig.from_json(os.path.join(path, "config.json"))
        model = BertModel(config, VarBuilder.from_dir(path, dtype=dtype, device=device))
        pooling = read_pooling_config(path)
        limit = config.max_position_embeddings
        max_len = min(pooling.max_seq_length or limit, limit)
        tokenizer = load_tokenizer(os.path.join(path, "tokenizer.json"), max_len)
        out = cls(
            model, tokenizer, pooling, device, model_path=path, pad_id=config.pad_token_id or 0
        )
        out.timings["load"] = time.perf_counter() - start
        return out

    @property
    def dim(self):
        return self.model.config.hidden_size

    def tokenize(self, texts):
        return encode_ids(self.tokenizer, texts, self.max_seq_length)

    def encode(self, texts, batch_size=BATCH_SIZE, normalize=None, batch_tokens=BATCH_TOKENS):
        """An (n, dim) Tensor on the device, rows in the order of `texts`. A batch holds
        at most `batch_size` texts and `batch_tokens` padded tokens (a text longer than
        that goes alone). `normalize` defaults to the model's own setting (2_Normalize
        in modules.json)."""
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise EmberError("SentenceEmbedder.encode: texts must be strings", op="encode")
        for name, value in (("batch_size", batch_size), ("batch_tokens", batch_tokens)):
            if value < 1:
                raise EmberError(
                    f"SentenceEmbedder.encode: {name} must be >= 1, got {value}",
                    op="encode",
                )
        if not texts:
            from ..tensor import zeros

            return zeros(0, self.dim, device=self.device)
        t0 = time.perf_counter()
        ids = self.tokenize(texts)
        t1 = time.perf_counter()
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        batches = [
            [ids[i] for i in order[start:stop]]
            for start, stop in batch_bounds([len(ids[i]) for i in order], batch_size, batch_tokens)
        ]
        parts = self.device.backend.map_independent(self._embed_batch, batches)
        out = parts[0] if len(parts) == 1 else cat(parts, 0)
        if order != list(range(len(order))):
            inverse = [0] * len(order)
            for pos, i in enumerate(order):
                inverse[i] = pos
            out = out.index_select(0, tensor(inverse, dtype=dt.i64, device=self.device))
        if normalize if normalize is not None else self.pooling.normalize:
            from ..models.pooling import l2_normalize

            out = l2_normalize(out)
        self.device.backend.synchronize()
        self.timings["tokenize"] = t1 - t0
        self.timings["embed"] = time.perf_counter() - t1
        return out

    def _embed_batch(self, batch_ids):
        from ..models.pooling import pool

        longest = max(len(x) for x in batch_ids)
        padded = [x + [self.pad_id] * (longest - len(x)) for x in batch_ids]
        input_ids = tensor(padded, dtype=dt.i64, device=self.device)
        if all(len(x) == longest for x in batch_ids):
            mask = None  # no padding: skip the mask bias and the masked pooling
        else:
            mask = tensor(
                [[1] * len(x) + [0] * (longest - len(x)) for x in batch_ids],
                dtype=dt.f32,
                device=self.device,
            )
        # The lengths let the model skip the padding in every token-wise step.
        hidden = self.model(input_ids, attention_mask=mask, lengths=[len(x) for x in batch_ids])
        if mask is not None and mask.dtype is not hidden.dtype:
            mask = mask.to(hidden.dtype)
        return pool(hidden, mask, self.pooling.mode)

    def similarity(self, a, b=None):
        """Cosine similarity matrix (len(a), len(b)) of two sets of embeddings (Tensors,
        or texts, which are encoded first)."""
        from ..models.pooling import l2_normalize

        a = a if isinstance(a, Tensor) else self.encode(a)
        b = a if b is None else (b if isinstance(b, Tensor) else self.encode(b))
        if a.ndim == 1:
            a = a.unsqueeze(0)
        if b.ndim == 1:
            b = b.unsqueeze(0)
        return l2_normalize(a).matmul(l2_normalize(b).t())

    def __repr__(self):
        return (
            f"SentenceEmbedder({self.model_path}, device={self.device}, dim={self.dim}, "
            f"pooling={self.pooling.mode}, normalize={self.pooling.normalize})"
        )


def batch_bounds(lengths, batch_size, batch_tokens):
    """(start, stop) of consecutive batches over `lengths` (sorted longest first): each
    as long as it can be with at most `batch_size` items and `batch_tokens` padded tokens
    (items x its first, longest one), and at least one item."""
    bounds = []
    start = 0
    while start < len(lengths):
        rows = max(1, min(batch_size, batch_tokens // max(lengths[start], 1)))
        stop = min(start + rows, len(lengths))
        bounds.append((start, stop))
        start = stop
    return bounds
