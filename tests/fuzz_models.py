"""Tiny valid model directories written with ember alone (no torch): a Llama (config.json
+ model.safetensors) and a BERT sentence embedder (plus a WordPiece tokenizer.json), the
starting points the safetensors and config.json fuzz tests mutate."""
import json
import os

import numpy as np

import ember
from ember.io import save_safetensors

LLAMA_CONFIG = {"model_type": "llama", "vocab_size": 16, "hidden_size": 16,
                "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 32, "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 16},
                "bos_token_id": 1, "eos_token_id": [2, 3]}

BERT_CONFIG = {"model_type": "bert", "vocab_size": 16, "hidden_size": 8,
               "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
               "hidden_act": "gelu", "max_position_embeddings": 16, "type_vocab_size": 2,
               "layer_norm_eps": 1e-12, "pad_token_id": 0,
               "position_embedding_type": "absolute"}
BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "cat", "dog", "the", "##s", "is",
              "on", "mat", "car", "red", "big", "."]


def _f32(rng, *shape):
    return ember.from_numpy((rng.standard_normal(shape) * 0.2).astype(np.float32))


def llama_tensors(cfg=LLAMA_CONFIG, seed=0):
    rng = np.random.default_rng(seed)
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    p = "model.layers.0."
    return {"model.embed_tokens.weight": _f32(rng, v, h),
            p + "input_layernorm.weight": _f32(rng, h),
            p + "self_attn.q_proj.weight": _f32(rng, h, h),
            p + "self_attn.k_proj.weight": _f32(rng, kv, h),
            p + "self_attn.v_proj.weight": _f32(rng, kv, h),
            p + "self_attn.o_proj.weight": _f32(rng, h, h),
            p + "post_attention_layernorm.weight": _f32(rng, h),
            p + "mlp.gate_proj.weight": _f32(rng, f, h),
            p + "mlp.up_proj.weight": _f32(rng, f, h),
            p + "mlp.down_proj.weight": _f32(rng, h, f),
            "model.norm.weight": _f32(rng, h),
            "lm_head.weight": _f32(rng, v, h)}


def write_llama_dir(path, config=LLAMA_CONFIG):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    save_safetensors(llama_tensors(), os.path.join(path, "model.safetensors"))
    return str(path)


def bert_tensors(cfg=BERT_CONFIG, seed=0):
    rng = np.random.default_rng(seed)
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    out = {"embeddings.word_embeddings.weight": _f32(rng, cfg["vocab_size"], h),
           "embeddings.position_embeddings.weight": _f32(rng, cfg["max_position_embeddings"], h),
           "embeddings.token_type_embeddings.weight": _f32(rng, cfg["type_vocab_size"], h)}

    def norm(name):
        out[name + ".weight"] = _f32(rng, h)
        out[name + ".bias"] = _f32(rng, h)

    def linear(name, n_out, n_in):
        out[name + ".weight"] = _f32(rng, n_out, n_in)
        out[name + ".bias"] = _f32(rng, n_out)

    norm("embeddings.LayerNorm")
    p = "encoder.layer.0."
    for q in ("query", "key", "value"):
        linear(p + "attention.self." + q, h, h)
    linear(p + "attention.output.dense", h, h)
    norm(p + "attention.output.LayerNorm")
    linear(p + "intermediate.dense", i, h)
    linear(p + "output.dense", h, i)
    norm(p + "output.LayerNorm")
    return out


def bert_tokenizer_json():
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}
                             for i, t in enumerate(BERT_VOCAB[:4])],
            "normalizer": {"type": "BertNormalizer", "clean_text": True,
                           "handle_chinese_chars": True, "strip_accents": None,
                           "lowercase": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}},
                         {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                   "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                      "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                      "vocab": {t: i for i, t in enumerate(BERT_VOCAB)}}}


def write_bert_dir(path, config=BERT_CONFIG):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(bert_tokenizer_json(), f)
    save_safetensors(bert_tensors(), os.path.join(path, "model.safetensors"))
    return str(path)
