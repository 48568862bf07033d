"""Pieces the model commands share: opening a device, loading the embedder."""

import sys


def add_device_argument(p, default="best"):
    p.add_argument(
        "--device",
        default=default,
        help=f"cpu, wgpu[:N], webgpu, cuda[:N] or best (default {default})",
    )


def open_device(spec):
    from ..device import Device

    return Device.parse(spec)


def load_embedder(model, device, fetch_default=True):
    """SentenceEmbedder for `model` (None: the default all-MiniLM-L6-v2). The default model
    is fetched into ember's cache on first use (as `make models` does), with a note on
    stderr; other models must already resolve (see ember.hub.resolve)."""
    from ..hub import ModelNotFound, fetch_default_model
    from ..pipelines import SentenceEmbedder

    try:
        return SentenceEmbedder.from_pretrained(model, device=device)
    except ModelNotFound:
        if model is not None or not fetch_default:
            raise
    print(
        "ember: the default model is not in the cache yet; fetching it (same as `make models`)",
        file=sys.stderr,
    )
    fetch_default_model(log=lambda msg: print(msg, file=sys.stderr))
    return SentenceEmbedder.from_pretrained(model, device=device)


def rank(scores):
    """(index, score) pairs from best to worst."""
    return sorted(enumerate(scores), key=lambda p: -p[1])
