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

import collections

import numpy as np

from ..errors import EmberError


def require_ray():
    try:
        import ray
        import ray.data  # the Data library is a separate extra of ray's
    except ImportError as exc:
        raise EmberError(
            f"Ray Data is not installed here ({exc}); "
            "pip install 'ember[ray]'  (or pip install 'ray[data]')"
        ) from None
    return ray


def _use_the_actors_cpus():
    """In a Ray actor, ember's CPU threads follow the CPUs Ray granted it (Ray already
    gives BLAS that many): without this every actor would split its work over all of the
    node's cores, side by side with the other actors."""
    import ray

    if not ray.is_initialized():
        return
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    if cpus and cpus >= 1:
        from ..device import set_cpu_threads

        set_cpu_threads(int(cpus))


class EmbedBatch:
    """map_batches callable: one SentenceEmbedder per actor; `__call__` embeds a batch."""

    def __init__(
        self, model=None, device="best", text_column="text", vector_column="vector", batch_size=None
    ):
        from ..pipelines import SentenceEmbedder

        _use_the_actors_cpus()
        self.embedder = SentenceEmbedder.from_pretrained(model, device=device)
        self.text_column, self.vector_column = text_column, vector_column
        # None: the embedder's own micro-batches (sentence_embedder.BATCH_SIZE texts, at
        # most BATCH_TOKENS padded tokens), as in a single process.
        self.batch_size = batch_size

    def embed(self, texts):
        """(len(texts), dim) float32 vectors, in order."""
        sized = {} if self.batch_size is None else {"batch_size": self.batch_size}
        vectors = self.embedder.encode([str(t) for t in texts], **sized)
        return np.ascontiguousarray(vectors.numpy(), dtype=np.float32)

    def __call__(self, batch):
        """A dict of numpy columns (Ray's default batch format) or a pandas DataFrame."""
        vectors = self.embed(batch[self.text_column])
        if hasattr(batch, "columns"):  # pandas: one array per cell
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


def ray_windows(model, device="best", actors=2, batch_size=None, in_flight_per_actor=2):
    """A corpus job's embedder (see ember.corpus.job.local_windows) on Ray: `actors` Ray
    actors of EmbedBatch (1 CPU each: Ray gives each one BLAS thread), started and their
    models loaded when this is called, take the windows in turn; results
    come back in order, with at most `in_flight_per_actor` windows queued per actor, so the
    driver holds a bounded number of windows however long the corpus.

    Ray Data's map_batches (the EmbedBatch example above) suits data the cluster reads
    itself; a job fed from the driver's files, resumable window by window, drives the same
    class as an actor pool directly instead of rebuilding a dataset (and its actors, and
    their models) for every stretch of the input."""
    ray = require_ray()
    gpus = 1 if str(device).startswith("cuda") else 0
    worker = ray.remote(num_cpus=1, num_gpus=gpus)(EmbedBatch)
    # Started, and their models loaded, here, before the job runs: as the single process
    # loads its model before the job, so the job's time (rows/s) is the embedding on both,
    # and a model that does not load fails before any journal is opened.
    pool = [worker.remote(model=model, device=device, batch_size=batch_size) for _ in range(actors)]
    try:
        ray.get([actor.embed.remote([]) for actor in pool])  # answered once the model loaded
    except BaseException:
        for actor in pool:
            ray.kill(actor)
        raise

    def run(windows):
        pending = collections.deque()
        try:
            for n, rows in enumerate(windows):
                texts = [text for _, text in rows]
                pending.append((rows, pool[n % actors].embed.remote(texts)))
                if len(pending) >= actors * in_flight_per_actor:
                    rows, ref = pending.popleft()
                    yield rows, ray.get(ref)
            while pending:
                rows, ref = pending.popleft()
                yield rows, ray.get(ref)
        finally:
            for actor in pool:
                ray.kill(actor)

    return run
