"""Greedy decoding of several windows at once: one decoder pass per step for every row,
each row with its own prompt, its own positions and its own stop.

Prompts of different lengths are left-padded to the longest, so every row writes its keys
and values into the same cache slot at each step; a row's pad slots are hidden from its
attention by a mask, and its position embeddings count from its own first token. A row
that samples <|endoftext|> (or reaches its length limit) leaves the batch: its cache rows
are dropped. Each row therefore gets the tokens `whisper_decoding.greedy` gives it alone.

The decoder layers are run here rather than through `Decoder.forward` because a batch
needs per-row positions and a padding mask, which the single-sequence path does not take.
"""

import numpy as np

from .. import functional as F
from ..tensor import tensor
from .kv_cache import KVCache
from .whisper import DecoderCache
from .whisper_decoding import DecodeResult, LogitRules, _log_softmax, _logsumexp

NEG_INF = -np.inf


def _attend(attn, q, k, v, residual, mask):
    b, _, t, _ = q.shape
    out = F.scaled_dot_product_attention(q, k, v, mask=mask)
    out = out.transpose(1, 2).reshape(b, t, attn.n_heads * attn.head_dim)
    return attn.out_proj(out, residual=residual)


def _layer(layer, x, cache, mask):
    """DecoderLayer.forward with a self-attention mask instead of `is_causal`."""
    h = layer.self_attn_layer_norm(x)
    a = layer.self_attn
    if mask is None and x.shape[1] == 1 and a.fuses_step():  # a step of rows without pads
        x = a.step(h, cache.self_kv, layer.index, residual=x)
    else:
        q, k, v = a.qkv_heads(h)
        k, v = cache.self_kv.update(layer.index, k, v)
        x = _attend(a, q, k, v, x, mask)
    h = layer.encoder_attn_layer_norm(x)
    c = layer.encoder_attn
    ck, cv = cache.cross[layer.index]
    x = c.attend(c.heads(c.q_proj(h)), ck, cv, residual=x)
    h = layer.final_layer_norm(x)
    return layer.fc2(layer.fc1(h, activation="gelu"), residual=x)


class _Rows:
    """The decoder's state for the rows still decoding: cache, pads, device arrays."""

    def __init__(self, model, encoder_out, pads, max_len):
        cfg, w = model.cfg, model.decoder.layer_norm.weight
        self.model = model
        self.pads = np.array(pads, dtype=np.int64)
        self_kv = KVCache(
            cfg.decoder_layers,
            len(pads),
            cfg.decoder_attention_heads,
            max_len,
            cfg.d_model // cfg.decoder_attention_heads,
            dtype=w.dtype,
            device=w.device,
        )
        cross = [layer.encoder_attn.keys_values(encoder_out) for layer in model.decoder.layers]
        self.cache = DecoderCache(self_kv, cross)

    def forward(self, ids, allowed, picks):
        """ids [n, t] at the next cache slots; allowed [n, t, slots] which keys each query
        sees; logits f32 [len(picks), vocab] of the flattened (row, position) `picks`."""
        model, dec = self.model, self.model.decoder
        dev, n, t = model.device, *ids.shape
        start = self.cache.length
        positions = np.maximum(start + np.arange(t)[None, :] - self.pads[:, None], 0)
        x = dec.embed_tokens(tensor(ids, device=dev))
        pos = dec.embed_positions.weight.index_select(0, tensor(positions.reshape(-1), device=dev))
        x = x + pos.reshape(n, t, model.cfg.d_model)
        # a step of rows without pads sees every key: no mask (its additions of 0 change
        # nothing, and the backend's unmasked attention is the cheaper one: 0.2 ms a layer)
        mask = None
        if not (t == 1 and allowed.all()):
            mask = tensor(np.where(allowed, 0.0, NEG_INF)[:, None], dtype=x.dtype, device=dev)
        stepped = dec.run_fused(x, self.cache) if mask is None else None
        if stepped is not None:
            x = stepped
        else:
            for layer in dec.layers:
                x = _layer(layer, x, self.cache, mask)
        self.cache.self_kv.advance(t)
        h = x.reshape(n * t, model.cfg.d_model).index_select(0, tensor(picks, device=dev))
        return dec.logits(dec.layer_norm(h)).numpy()

    def keep(self, rows):
        """Only `rows` (indices into the current batch) go on decoding."""
        ids = tensor(rows, device=self.model.device)
        kv = self.cache.self_kv
        kv.keys = [k.index_select(0, ids) for k in kv.keys]
        kv.values = [v.index_select(0, ids) for v in kv.values]
        kv.batch = len(rows)
        self.cache.cross = [
            (k.index_select(0, ids), v.index_select(0, ids)) for k, v in self.cache.cross
        ]
        self.pads = self.pads[rows]


def greedy_batch(model, encoder_out, tokens, opts, prompts, sot_at, on_token=None):
    """Greedy decoding of every row of `encoder_out` [b, positions, d] after its prompt
    (prompts[i], whose <|startoftranscript|> is at index sot_at[i], where no_speech_prob is
    read); the results, one DecodeResult per row. `on_token(row, sampled, no_speech_prob)`,
    called after each row's new token, may give events to yield (a generator: `yield
    from` this one)."""
    cfg = model.cfg
    b = len(prompts)
    longest = max(len(p) for p in prompts)
    pads = [longest - len(p) for p in prompts]
    cap = cfg.max_target_positions // 2 if opts.max_new_tokens is None else opts.max_new_tokens
    limits = [min(cap, cfg.max_target_positions - len(p)) for p in prompts]
    rules = LogitRules(tokens, opts, cfg.vocab_size)
    rows = _Rows(model, encoder_out, pads, longest + max(limits))

    ids = np.full((b, longest), tokens.eot, dtype=np.int64)
    for i, p in enumerate(prompts):
        ids[i, pads[i] :] = p
    q = np.arange(longest)
    causal = q[None, :] <= q[:, None]
    # a pad query sees itself only (a row of nothing but -inf would be NaN); no real
    # query sees a pad key
    allowed = causal[None] & (
        (q[None, None, :] >= np.array(pads)[:, None, None]) | (q[None, :, None] == q[None, None, :])
    )
    picks = [i * longest + pads[i] + sot_at[i] for i in range(b)]
    picks += [i * longest + longest - 1 for i in range(b)]
    first = rows.forward(ids, allowed, picks)
    no_speech = [
        float(np.exp(_log_softmax(first[i].astype(np.float64))[tokens.no_speech])) for i in range(b)
    ]
    logits = first[b:]

    sampled = [[] for _ in range(b)]
    totals = [0.0] * b
    ended = [False] * b
    alive = [i for i in range(b) if limits[i] > 0]
    if len(alive) < b:
        rows.keep(alive)
        logits = logits[alive]
    while alive:
        going, step = [], []
        for j, i in enumerate(alive):
            masked = rules.apply(logits[j], sampled[i]).astype(np.float64)
            token = int(np.argmax(masked))
            totals[i] += float(masked[token] - _logsumexp(masked))  # its log-probability
            if token == tokens.eot:
                ended[i] = True
                continue
            sampled[i].append(token)
            if on_token is not None:
                yield from on_token(i, sampled[i], no_speech[i])
            if len(sampled[i]) < limits[i]:
                going.append(j)
                step.append(token)
        if not going:
            break
        if len(going) < len(alive):
            rows.keep(going)
            alive = [alive[j] for j in going]
        slots = rows.cache.length + 1
        allowed = (np.arange(slots)[None, :] >= rows.pads[:, None])[:, None, :]
        logits = rows.forward(
            np.array(step, dtype=np.int64)[:, None], allowed, list(range(len(alive)))
        )
    return [
        DecodeResult(sampled[i], totals[i] / (len(sampled[i]) + 1), ended[i], no_speech[i], 0.0)
        for i in range(b)
    ]


def finish(steps):
    """Run a decoding generator to its end, dropping its events; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value
