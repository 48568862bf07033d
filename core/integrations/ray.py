"""Ray Data: ember's sentence embedder as a callable class for `Dataset.map_batches`.

    import ray
    from ember.integrations.ray import EmbedBatch

    ds = ray.data.read_parquet("s3://bucket/docs/")
    ds = ds.map_batches(EmbedBatch, fn_constructor_kwargs={"model": "/models/minilm"},
                        batch_size=1024, concurrency=4)     # 4 actors, one model each
    ds.write_parquet("s3://bucket/vectors/")

Each actor loads the model once (in `__init__`) on its own device (`device="best"` picks
each node's), then embeds every batch it is given: the batch's `text` column in, the
same batch with a `vector` column (float32, one row per text) out. Ray is an optional
extra: `pip install 'ember[ray]'`.
"""
import itertools

import numpy as np

from ..errors import EmberError


def require_ray():
    try:
        import ray
        import ray.data  # noqa: F401 (the Data library is a separate extra of ray's)
    except ImportError as exc:
        raise EmberError(f"Ray Data is not installed here ({exc}); "
                         "pip install 'ember[ray]'  (or pip install 'ray[data]')") from None
    return ray


class EmbedBatch:
    """map_batches callable: one SentenceEmbedder per actor; `__call__` embeds a batch."""

    def __init__(self, model=None, device="best", text_column="text", vector_column="vector",
                 batch_size=32):
        from ..pipelines import SentenceEmbedder
        self.embedder = SentenceEmbedder.from_pretrained(model, device=device)
        self.text_column, self.vector_column = text_column, vector_column
        self.batch_size = batch_size

    def __call__(self, batch):
        """A dict of numpy columns (Ray's default batch format) or a pandas DataFrame."""
        texts = [str(t) for t in batch[self.text_column]]
        vectors = self.embedder.encode(texts, batch_size=self.batch_size).numpy()
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if hasattr(batch, "columns"):   # pandas: one array per cell
            batch = batch.copy()
            batch[self.vector_column] = list(vectors)
            return batch
        out = dict(batch)
        out[self.vector_column] = vectors
        return out


def connect(address, num_cpus=None):
    """ray.init for `ember embed --ray ADDRESS`: `local` starts a Ray instance in this
    process; anything else (`auto`, `ray://head:10001`, `head:6379`) joins a cluster."""
    ray = require_ray()
    if not ray.is_initialized():
        if address == "local":
            ray.init(num_cpus=num_cpus, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    return ray


def ray_windows(model, device="best", actors=2, batch_size=32, windows_per_round=16):
    """A corpus job's embedder (see ember.corpus.job.local_windows) running on Ray: rounds of
    `windows_per_round` windows go through map_batches(EmbedBatch, concurrency=actors),
    results in order; the driver holds one round of rows and vectors at a time."""
    ray = require_ray()
    gpus = 1 if str(device).startswith("cuda") else 0
    kwargs = {"model": model, "device": device, "batch_size": batch_size}

    def run(windows):
        ray.data.DataContext.get_current().execution_options.preserve_order = True
        windows = iter(windows)
        while True:
            group = list(itertools.islice(windows, windows_per_round))
            if not group:
                return
            texts = [{"text": text} for rows in group for _, text in rows]
            ds = ray.data.from_items(texts).map_batches(
                EmbedBatch, fn_constructor_kwargs=kwargs, batch_size=len(group[0]),
                concurrency=actors, num_gpus=gpus)
            vectors = np.concatenate([b["vector"] for b in
                                      ds.iter_batches(batch_size=None, batch_format="numpy")])
            start = 0
            for rows in group:
                yield rows, vectors[start:start + len(rows)]
                start += len(rows)
    return run
