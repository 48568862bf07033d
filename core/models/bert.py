"""BERT encoder (absolute positions, token types, padding mask), written like candle-transformers'
bert.rs: a config read from config.json, modules named like the checkpoint, `forward`.

Inference layout: hidden states stay 2-D (batch*tokens, hidden) between layers, so every
Linear is one GEMM; Q, K and V are one fused GEMM whose weight is built once after loading
(with 1/sqrt(head_dim) folded into the query rows); attention runs as batched matmuls on
(batch, heads, tokens, head_dim) views of that GEMM's output, without copies.
"""

import dataclasses
import math

from .. import dtype as dt
from .. import functional as F
from ..errors import FormatError, ShapeMismatch, fmt_shape
from ..io.files import read_json
from ..nn import (
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    Module,
    ModuleList,
    activation_op,
    get_activation,
)
from ..tensor import cat, tensor, zeros
from . import config_fields as cf


@dataclasses.dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    model_type: str = "bert"

    @classmethod
    def from_dict(cls, d, source="config"):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in fields}
        config = cls(**kwargs)
        config.validate(source)
        return config

    @classmethod
    def from_json(cls, path):
        d = read_json(path, "BertConfig: model config")
        if not isinstance(d, dict):
            raise FormatError(f"BertConfig: {path} is not a JSON object", path=path)
        return cls.from_dict(d, source=path)

    def validate(self, source="config"):
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if not cf.is_int(value) or value <= 0 or value > cf.MAX_COUNT:
                raise FormatError(
                    f"BertConfig: field '{name}' in {source} must be a positive "
                    f"integer, got {value!r}",
                    path=source,
                    field=name,
                )
        self.layer_norm_eps = cf.positive_number(source, "layer_norm_eps", self.layer_norm_eps)
        cf.optional(cf.integer, source, "pad_token_id", self.pad_token_id, low=None)
        cf.string(source, "hidden_act", self.hidden_act)
        cf.string(source, "position_embedding_type", self.position_embedding_type)
        cf.optional(cf.string, source, "model_type", self.model_type)
        if self.hidden_size % self.num_attention_heads:
            raise FormatError(
                f"BertConfig: hidden_size {self.hidden_size} in {source} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}",
                path=source,
                field="num_attention_heads",
            )
        if self.position_embedding_type != "absolute":
            raise FormatError(
                f"BertConfig: position_embedding_type {self.position_embedding_type!r} in "
                f"{source} is not supported (only 'absolute')",
                path=source,
                field="position_embedding_type",
            )
        if self.model_type not in ("bert", None, ""):
            raise FormatError(
                f"BertConfig: model_type {self.model_type!r} in {source} is not a BERT encoder "
                "(its weights or position ids differ); ember.models.bert runs model_type 'bert'",
                path=source,
                field="model_type",
            )
        get_activation(self.hidden_act)

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads


def _sub(vb, name):
    return vb.pp(name) if vb is not None else None


class BertEmbeddings(Module):
    def __init__(self, cfg, vb=None):
        super().__init__()
        self.word_embeddings = Embedding(
            cfg.vocab_size, cfg.hidden_size, _sub(vb, "word_embeddings")
        )
        self.position_embeddings = Embedding(
            cfg.max_position_embeddings, cfg.hidden_size, _sub(vb, "position_embeddings")
        )
        self.token_type_embeddings = Embedding(
            cfg.type_vocab_size, cfg.hidden_size, _sub(vb, "token_type_embeddings")
        )
        self.LayerNorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, vb=_sub(vb, "LayerNorm"))
        self.dropout = Dropout()
        self.max_positions = cfg.max_position_embeddings

    def forward(self, input_ids, token_type_ids=None):
        _, t = input_ids.shape
        if t > self.max_positions:
            raise ShapeMismatch(
                f"BertEmbeddings: {t} tokens exceed max_position_embeddings {self.max_positions}; "
                "truncate the input",
                op="bert",
                shape=input_ids.shape,
            )
        words = self.word_embeddings(input_ids)  # (B, T, H)
        pos = self.position_embeddings.weight.narrow(0, 0, t)  # (T, H): a view
        if token_type_ids is None:
            # All type 0: one row, broadcast, instead of a gather.
            extra = pos + self.token_type_embeddings.weight.narrow(0, 0, 1)
        else:
            extra = pos + self.token_type_embeddings(token_type_ids)  # (B, T, H)
        return self.LayerNorm(words + extra)

    def forward_packed(self, input_ids, packing, token_type_ids=None):
        """Embeddings of the real tokens only: (N, H) rows in packing.keep's order."""
        ids = input_ids.reshape(-1).index_select(0, packing.keep)
        words = self.word_embeddings(ids)  # (N, H)
        pos = self.position_embeddings.weight.index_select(0, packing.positions)  # (N, H)
        if token_type_ids is None:
            extra = pos + self.token_type_embeddings.weight.narrow(0, 0, 1)
        else:
            types = token_type_ids.reshape(-1).index_select(0, packing.keep)
            extra = pos + self.token_type_embeddings(types)
        return self.LayerNorm(words + extra)


class BertSelfAttention(Module):
    def __init__(self, cfg, vb=None):
        super().__init__()
        h = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.head_dim
        self.query = Linear(h, h, vb=_sub(vb, "query"))
        self.key = Linear(h, h, vb=_sub(vb, "key"))
        self.value = Linear(h, h, vb=_sub(vb, "value"))
        self._qkv = None

    def _reset_derived(self):
        self._qkv = None

    def fused_qkv(self):
        """(W, b) of one (3H, H) projection; the softmax scale is folded into Q's rows."""
        if self._qkv is None:
            scale = 1.0 / math.sqrt(self.head_dim)
            w = cat([self.query.weight * scale, self.key.weight, self.value.weight], 0)
            b = cat([self.query.bias * scale, self.key.bias, self.value.bias], 0)
            self._qkv = (w, b)
        return self._qkv

    def forward(self, x2d, batch, tokens, mask_bias=None, packing=None):
        w, b = self.fused_qkv()
        nh, hd = self.num_heads, self.head_dim
        qkv = F.linear(x2d, w, b)
        if packing is not None:
            qkv = qkv.index_select(0, packing.spread)  # real tokens -> (B*T) rows
        qkv = qkv.reshape(batch, tokens, 3, nh, hd)
        q = qkv.select(2, 0).permute(0, 2, 1, 3)  # (B, nh, T, hd)
        k_t = qkv.select(2, 1).permute(0, 2, 3, 1)  # (B, nh, hd, T)
        v = qkv.select(2, 2).permute(0, 2, 1, 3)  # (B, nh, T, hd)
        scores = q.matmul(k_t)  # (B, nh, T, T), already scaled
        if mask_bias is not None:
            scores = scores + mask_bias  # (B, 1, 1, T) broadcast
        ctx = scores.softmax(-1).matmul(v)  # (B, nh, T, hd)
        ctx = ctx.permute(0, 2, 1, 3).reshape(batch * tokens, nh * hd)
        return ctx if packing is None else ctx.index_select(0, packing.keep)


class BertSelfOutput(Module):
    def __init__(self, cfg, vb=None):
        super().__init__()
        self.dense = Linear(cfg.hidden_size, cfg.hidden_size, vb=_sub(vb, "dense"))
        self.LayerNorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, vb=_sub(vb, "LayerNorm"))
        self.dropout = Dropout()

    def forward(self, h, residual):
        return self.LayerNorm(self.dense(h), residual=residual)


class BertAttention(Module):
    def __init__(self, cfg, vb=None):
        super().__init__()
        self.self = BertSelfAttention(cfg, _sub(vb, "self"))
        self.output = BertSelfOutput(cfg, _sub(vb, "output"))

    def forward(self, x2d, batch, tokens, mask_bias=None, packing=None):
        ctx = self._children["self"](x2d, batch, tokens, mask_bias, packing)
        return self.output(ctx, x2d)


class BertIntermediate(Module):
    def __init__(self, cfg, vb=None):
        super().__init__()
        self.dense = Linear(cfg.hidden_size, cfg.intermediate_size, vb=_sub(vb, "dense"))
        self._act = activation_op(cfg.hidden_act)

    def forward(self, h):
        return self.dense(h, activation=self._act)


class BertOutput(BertSelfOutput):
    def __init__(self, cfg, vb=None):
        Module.__init__(self)
        self.dense = Linear(cfg.intermediate_size, cfg.hidden_size, vb=_sub(vb, "dense"))
        self.LayerNorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, vb=_sub(vb, "LayerNorm"))
        self.dropout = Dropout()


class BertLayer(Module):
    def __init__(self, cfg, vb=None):
        super().__init__()
        self.attention = BertAttention(cfg, _sub(vb, "attention"))
        self.intermediate = BertIntermediate(cfg, _sub(vb, "intermediate"))
        self.output = BertOutput(cfg, _sub(vb, "output"))

    def forward(self, x2d, batch, tokens, mask_bias=None, packing=None):
        a = self.attention(x2d, batch, tokens, mask_bias, packing)
        return self.output(self.intermediate(a), a)


class BertEncoder(Module):
    def __init__(self, cfg, vb=None):
        super().__init__()
        self.layer = ModuleList(
            *[BertLayer(cfg, _sub(_sub(vb, "layer"), i)) for i in range(cfg.num_hidden_layers)]
        )

    def forward(self, x2d, batch, tokens, mask_bias=None, packing=None):
        for layer in self.layer:
            x2d = layer(x2d, batch, tokens, mask_bias, packing)
        return x2d


class BertModel(Module):
    """last_hidden_state = BertModel(...)(input_ids, attention_mask, token_type_ids)."""

    def __init__(self, cfg, vb=None):
        super().__init__()
        self.config = cfg
        if vb is not None:
            vb = checkpoint_root(vb)
        self.embeddings = BertEmbeddings(cfg, _sub(vb, "embeddings"))
        self.encoder = BertEncoder(cfg, _sub(vb, "encoder"))

    @classmethod
    def load_model(cls, cfg, vb):
        return cls(cfg, vb)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, lengths=None):
        """last_hidden_state (B, T, H).

        `lengths` (host ints, one per row, each row's real tokens first and its padding
        after) lets the model skip the padding: every token-wise step (embeddings, the
        linear layers, GELU, layer norms) runs on the real tokens only, and attention on
        the padded (B, T) layout with the padding masked. Padded positions of the result
        are then zeros (pooling ignores them) instead of the values computed there."""
        if input_ids.ndim != 2:
            raise ShapeMismatch(
                f"BertModel: input_ids must be (batch, tokens), got {fmt_shape(input_ids.shape)}",
                op="bert",
                shape=input_ids.shape,
            )
        b, t = input_ids.shape
        packing = None if lengths is None else Packing.of(lengths, b, t, input_ids.device)
        if packing is not None and packing.count == b * t:
            packing = None  # no padding to skip
        if packing is not None:
            x = self.embeddings.forward_packed(input_ids, packing, token_type_ids)
            attention_mask = packing.mask(x.dtype)
        else:
            x = self.embeddings(input_ids, token_type_ids).reshape(b * t, -1)
        h = x.shape[-1]
        bias = None if attention_mask is None else mask_to_bias(attention_mask, x.dtype)
        out = self.encoder(x, b, t, bias, packing)
        if packing is not None:
            out = packing.unpack(out)
        return out.reshape(b, t, h)


class Packing:
    """Where the real tokens of a padded (B, T) batch are, as index tensors: `keep` (N,)
    their flat positions, `positions` (N,) each one's position in its row, `spread`
    (B*T,) for every flat position the packed row to read (padding reads its row's first
    token: finite values, which the attention mask then ignores)."""

    def __init__(self, lengths, tokens, device):
        keep, positions, spread, unpack = [], [], [], []
        for row, n in enumerate(lengths):
            first = len(keep)
            for j in range(tokens):
                if j < n:
                    spread.append(len(keep))
                    unpack.append(len(keep))
                    keep.append(row * tokens + j)
                    positions.append(j)
                else:
                    spread.append(first if n else 0)
                    unpack.append(-1)
        self.count = len(keep)
        self.lengths = list(lengths)
        self.tokens = tokens
        self.device = device
        self._lists = (keep, positions, spread, unpack)
        self._tensors = None

    @classmethod
    def of(cls, lengths, rows, tokens, device):
        lengths = [int(n) for n in lengths]
        if len(lengths) != rows:
            raise ShapeMismatch(
                f"BertModel: {len(lengths)} lengths for a batch of {rows} rows",
                op="bert",
                shape=(rows, tokens),
            )
        if any(n < 0 or n > tokens for n in lengths):
            raise ShapeMismatch(
                f"BertModel: lengths {lengths} must lie in [0, {tokens}] for "
                f"{tokens} tokens per row",
                op="bert",
                shape=(len(lengths), tokens),
            )
        return cls(lengths, tokens, device)

    def _index(self, i):
        if self._tensors is None:
            keep, positions, spread, unpack = self._lists
            unpack = [self.count if u < 0 else u for u in unpack]  # padding -> a zero row
            self._tensors = tuple(
                tensor(v, dtype=dt.i64, device=self.device)
                for v in (keep, positions, spread, unpack)
            )
        return self._tensors[i]

    keep = property(lambda self: self._index(0))
    positions = property(lambda self: self._index(1))
    spread = property(lambda self: self._index(2))

    def mask(self, dtype):
        return tensor(
            [[1] * n + [0] * (self.tokens - n) for n in self.lengths],
            dtype=dtype,
            device=self.device,
        )

    def unpack(self, packed):
        """(N, H) -> (B*T, H) with zeros at the padding."""
        padded = cat(
            [packed, zeros(1, packed.shape[-1], dtype=packed.dtype, device=packed.device)], 0
        )
        return padded.index_select(0, self._index(3))


def checkpoint_root(vb):
    """BertModel checkpoints keep names at the root; BertFor* ones nest them under "bert."."""
    if not vb.contains("embeddings.word_embeddings.weight") and vb.contains(
        "bert.embeddings.word_embeddings.weight"
    ):
        return vb.pp("bert")
    return vb


def mask_to_bias(attention_mask, dtype):
    """(B, T) mask of 1 (attend) / 0 (padding) -> (B, 1, 1, T) additive bias of 0 / the
    dtype's most negative finite value, as transformers does."""
    if attention_mask.ndim != 2:
        raise ShapeMismatch(
            f"BertModel: attention_mask must be (batch, tokens), got "
            f"{fmt_shape(attention_mask.shape)}",
            op="bert",
            shape=attention_mask.shape,
        )
    neg = _MOST_NEGATIVE.get(dtype.name, -3.4028234663852886e38)
    m = attention_mask.to(dtype)
    b, t = attention_mask.shape
    # m * (-neg) + neg: exactly 0 where m == 1 and `neg` where m == 0.
    return m.affine(-neg, neg).reshape(b, 1, 1, t)


_MOST_NEGATIVE = {
    "f32": -3.4028234663852886e38,
    "f16": -65504.0,
    "bf16": -3.3895313892515355e38,
    "f64": -1.7976931348623157e308,
}
