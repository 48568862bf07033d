"""sentence-transformers' pooling and normalization, read from a model directory.

modules.json lists the pipeline (Transformer, Pooling, optionally Normalize); the Pooling
module's config.json (usually 1_Pooling/config.json) picks the mode: mean over the real
tokens, the CLS token, the max over real tokens, or the mean times sqrt(length).
"""

import dataclasses
import os

from ..errors import EmberError, FormatError
from ..io.files import path_inside, read_json

MODES = ("mean", "cls", "max", "mean_sqrt_len")
_MODE_FIELDS = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
}


@dataclasses.dataclass
class PoolingConfig:
    mode: str = "mean"
    normalize: bool = False
    max_seq_length: int = None


def _read_json(path, want=dict):
    d = read_json(path, "pooling: config")
    if not isinstance(d, want):
        raise FormatError(f"pooling: {path} must be a JSON {want.__name__}", path=path)
    return d


def read_pooling_config(model_dir):
    """The pooling of a sentence-transformers directory; a plain transformers directory
    (no modules.json) gets mean pooling without normalization, as sentence-transformers
    itself would give it."""
    cfg = PoolingConfig()
    st_config = os.path.join(model_dir, "sentence_bert_config.json")
    if os.path.isfile(st_config):
        value = _read_json(st_config).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            cfg.max_seq_length = value
    modules_path = os.path.join(model_dir, "modules.json")
    if not os.path.isfile(modules_path):
        return cfg
    modules = _read_json(modules_path, list)
    for i, module in enumerate(modules):
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        if kind.endswith(".Pooling"):
            folder = module.get("path") or "."
            pool_dir = path_inside(model_dir, folder, modules_path, f"[{i}].path")
            pool_path = os.path.join(pool_dir, "config.json")
            cfg.mode = _mode_from(_read_json(pool_path), pool_path)
        elif kind.endswith(".Normalize"):
            cfg.normalize = True
        elif kind.endswith(".Transformer") or not kind:
            continue
        else:
            raise FormatError(
                f"pooling: module {i} of {modules_path} has type {kind!r}, which "
                "ember does not run (Transformer, Pooling, Normalize)",
                path=modules_path,
                field=f"[{i}].type",
            )
    return cfg


def _mode_from(d, path):
    chosen = [mode for field, mode in _MODE_FIELDS.items() if d.get(field)]
    if "pooling_mode" in d and isinstance(d["pooling_mode"], str):
        chosen = [d["pooling_mode"].replace("mean_tokens", "mean").replace("cls_token", "cls")]
    if len(chosen) != 1 or chosen[0] not in MODES:
        raise FormatError(
            f"pooling: {path} must enable exactly one of {', '.join(_MODE_FIELDS)} "
            f"(got {chosen or 'none'}); concatenated modes are not supported",
            path=path,
            field="pooling_mode",
        )
    return chosen[0]


def pool(hidden, mask, mode):
    """(B, T, H) hidden states and a (B, T) 0/1 mask in hidden's dtype (None: no padding)
    -> (B, H)."""
    if mode == "cls":
        return hidden.select(1, 0)
    if mode == "max":
        if mask is not None:
            hidden = hidden + (mask.unsqueeze(-1).affine(1e9, -1e9))  # padding -> -1e9
        return hidden.max(1)
    if mode in ("mean", "mean_sqrt_len"):
        if mask is None:
            total = hidden.sum(1)
            count = float(hidden.shape[1])
            return total * (1.0 / count if mode == "mean" else 1.0 / count**0.5)
        # (B, 1, T) @ (B, T, H): the masked sum as one batched GEMM.
        total = mask.unsqueeze(1).matmul(hidden).squeeze(1)
        count = mask.sum(1, keepdim=True).clamp(min=1e-9)
        return total / (count if mode == "mean" else count.sqrt())
    raise EmberError(
        f"pool: unknown mode {mode!r} (expected one of {', '.join(MODES)})", op="pool", mode=mode
    )


def l2_normalize(x, eps=1e-12):
    """Rows divided by their L2 norm (at least eps), as torch.nn.functional.normalize."""
    return x / x.square().sum(-1, keepdim=True).sqrt().clamp(min=eps)
