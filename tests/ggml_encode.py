"""Writing test GGUF files: a Q4_K encoder (the `gguf` package only decodes Q4_K) and a
writer that stores a transformers Llama as llama.cpp does (tensor names, metadata keys,
q/k rows permuted for interleaved rope, tokenizer.ggml.* from a tokenizer.json).

The encoder follows the public block layout (d, dmin, 12 bytes of 6-bit scales/mins,
128 bytes of nibbles); its output is checked by decoding with the `gguf` package.
"""
import json

import numpy as np

QK_K = 256


def quantize_q4_k(w):
    """A simple (min/max per 32-weight sub-block) Q4_K encoding of a float32 matrix whose
    rows are multiples of 256; returns uint8 [rows, cols / 256 * 144]."""
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape
    assert cols % QK_K == 0, cols
    x = w.reshape(-1, 8, 32)
    n = x.shape[0]
    lo = np.minimum(x.min(-1), 0.0)
    hi = x.max(-1)
    scale = (hi - lo) / 15.0                                # per sub-block
    offset = -lo
    d = (scale.max(-1) / 63.0).astype(np.float16)
    dmin = (offset.max(-1) / 63.0).astype(np.float16)
    df, dminf = d.astype(np.float32), dmin.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df[:, None] > 0, np.rint(scale / df[:, None]), 0).clip(0, 63).astype(np.uint8)
        mn = np.where(dminf[:, None] > 0, np.rint(offset / dminf[:, None]), 0).clip(0, 63).astype(np.uint8)
        eff_scale = df[:, None] * sc.astype(np.float32)
        eff_min = dminf[:, None] * mn.astype(np.float32)
        q = np.where(eff_scale[..., None] > 0,
                     np.rint((x + eff_min[..., None]) / eff_scale[..., None]), 0)
    q = q.clip(0, 15).astype(np.uint8)                       # (n, 8, 32)
    scales = np.empty((n, 12), np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, 128)   # chunk j: sub-blocks 2j, 2j+1
    block = np.empty((n, 144), np.uint8)
    block[:, 0:2] = d.reshape(n, 1).view(np.uint8)
    block[:, 2:4] = dmin.reshape(n, 1).view(np.uint8)
    block[:, 4:16] = scales
    block[:, 16:] = qs
    return block.reshape(rows, cols // QK_K * 144)


def permute_for_interleaved_rope(w, n_heads):
    """Rows of a q/k projection reordered so each head's rotary pairs are adjacent
    (what llama.cpp's converter does for the llama architecture)."""
    out, inp = w.shape
    hd = out // n_heads
    return w.reshape(n_heads, 2, hd // 2, inp).swapaxes(1, 2).reshape(out, inp)


def write_llama_gguf(path, hf_model, qtypes, tokenizer_json=None, gguf=None, rope_freqs=None,
                     chat_template=None):
    """Write a transformers LlamaForCausalLM to GGUF. `qtypes` maps "linear", "embed",
    "output" (and optionally "v", for attn_v alone) to a type name ("F32", "Q8_0", "Q4_K", ...). Returns {gguf name: the
    f32 values ember should see} (dequantized by the `gguf` package). `rope_freqs`
    (per-frequency divisors of the inverse frequencies) is written as rope_freqs.weight."""
    import gguf as _gguf
    gguf = gguf or _gguf
    cfg = hf_model.config
    sd = {k: v.detach().float().numpy() for k, v in hf_model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    hd = cfg.head_dim
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_rope_dimension_count(hd)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_vocab_size(cfg.vocab_size)
    if tokenizer_json is not None:
        _add_tokenizer(w, tokenizer_json, cfg)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    seen = {}

    def put(name, arr, kind):
        qname = qtypes.get(kind, "F32") if arr.ndim == 2 else "F32"
        t = gguf.GGMLQuantizationType[qname]
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if qname == "F32":
            w.add_tensor(name, arr)
            seen[name] = arr
            return
        if qname in ("Q2_K", "Q3_K"):  # types the gguf package does not write: ember's encoder
            from ember.io.quant import dequantize
            from ember.io.quantize import quantize

            raw = quantize(arr, qname)
            w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=t)
            seen[name] = dequantize(raw.reshape(-1), qname, arr.shape)
            return
        raw = quantize_q4_k(arr) if qname == "Q4_K" else gguf.quants.quantize(arr, t)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=t)
        seen[name] = gguf.quants.dequantize(raw, t).reshape(arr.shape)

    put("token_embd.weight", sd["model.embed_tokens.weight"], "embed")
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        put(b + "attn_norm.weight", sd[p + "input_layernorm.weight"], "norm")
        put(b + "attn_q.weight", permute_for_interleaved_rope(sd[p + "self_attn.q_proj.weight"],
                                                              cfg.num_attention_heads), "linear")
        put(b + "attn_k.weight", permute_for_interleaved_rope(sd[p + "self_attn.k_proj.weight"],
                                                              cfg.num_key_value_heads), "linear")
        put(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"], "v" if "v" in qtypes else "linear")
        put(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"], "linear")
        put(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"], "norm")
        put(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"], "linear")
        put(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"], "linear")
        put(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"], "linear")
    if rope_freqs is not None:   # llama3 rope scaling, stored as llama.cpp does
        put("rope_freqs.weight", np.asarray(rope_freqs, np.float32), "norm")
    put("output_norm.weight", sd["model.norm.weight"], "norm")
    if not cfg.tie_word_embeddings:
        put("output.weight", sd["lm_head.weight"], "output")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return seen


def _add_tokenizer(w, tokenizer_json, cfg):
    tj = json.loads(tokenizer_json) if isinstance(tokenizer_json, str) else tokenizer_json
    vocab = dict(tj["model"]["vocab"])
    for a in tj.get("added_tokens", []):
        vocab[a["content"]] = a["id"]
    n = cfg.vocab_size
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [5] * n                                  # UNUSED until filled
    for t, i in vocab.items():
        if i < n:
            tokens[i] = t
            types[i] = 1
    for a in tj.get("added_tokens", []):
        if a["id"] < n:
            types[a["id"]] = 3 if a.get("special") else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if cfg.bos_token_id is not None:
        w.add_bos_token_id(cfg.bos_token_id)
    if cfg.eos_token_id is not None:
        w.add_eos_token_id(cfg.eos_token_id)
    w.add_add_bos_token(False)
