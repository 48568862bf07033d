"""Ray Data: EmbedBatch through map_batches with 2 actors on a local Ray (2 CPUs), and
`ember embed --ray`, give the single process's vectors; without Ray the option says how
to install it."""
import sys

import numpy as np
import pytest

from corpus_fixtures import sentences, tiny_model_dir, write_jsonl  # noqa: F401 (a fixture)
from ember.cli import main
from ember.corpus.search import index_chunks
from ember.pipelines import SentenceEmbedder
from helpers import require


@pytest.fixture(scope="module")
def local_ray():
    ray = require("ray")
    require("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _cosines(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.slow
def test_map_batches_with_two_actors_equals_the_single_process(local_ray, tiny_model_dir):
    from ember.integrations.ray import EmbedBatch
    texts = sentences(2000, seed=21)
    ctx = local_ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ds = local_ray.data.from_items([{"text": t, "n": i} for i, t in enumerate(texts)])
    out = ds.map_batches(EmbedBatch, fn_constructor_kwargs={"model": str(tiny_model_dir),
                                                            "device": "cpu"},
                         batch_size=256, concurrency=2, num_cpus=1)
    rows = out.take_all()
    assert [r["n"] for r in rows] == list(range(2000))
    got = np.stack([r["vector"] for r in rows])
    single = SentenceEmbedder.from_pretrained(str(tiny_model_dir), device="cpu").encode(texts)
    assert got.dtype == np.float32 and got.shape == (2000, 32)
    assert _cosines(got, single.numpy()).min() >= 0.99999


def test_an_actor_of_one_cpu_splits_its_work_over_one_thread(local_ray, tiny_model_dir):
    from ember.integrations.ray import EmbedBatch

    @local_ray.remote(num_cpus=1)
    def threads_in_an_actor(model):
        from ember.backends import row_parallel

        EmbedBatch(model=model, device="cpu")
        return row_parallel.workers()

    assert local_ray.get(threads_in_an_actor.remote(str(tiny_model_dir))) == 1


@pytest.mark.slow
def test_ember_embed_on_ray_writes_the_single_process_file(local_ray, capsys, tmp_path,
                                                            tiny_model_dir):
    src = write_jsonl(tmp_path / "docs.jsonl", sentences(700, seed=22))
    argv = ["embed", "--device", "cpu", "--model", str(tiny_model_dir), "--input", str(src),
            "--window", "64"]
    assert main(argv + ["--output", str(tmp_path / "one.npy")]) == 0
    assert main(argv + ["--output", str(tmp_path / "ray.npy"), "--ray", "local",
                        "--ray-actors", "2"]) == 0, capsys.readouterr().err
    (ids_a, texts_a, a), = [next(index_chunks(str(tmp_path / "one.npy"), chunk_rows=10**6))]
    (ids_b, texts_b, b), = [next(index_chunks(str(tmp_path / "ray.npy"), chunk_rows=10**6))]
    assert ids_a == ids_b and texts_a == texts_b
    assert _cosines(a, b).min() >= 0.99999


def test_without_ray_the_option_says_how_to_install_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)   # import ray fails as if not installed
    src = write_jsonl(tmp_path / "docs.jsonl", ["the cat"])
    code = main(["embed", "--input", str(src), "--output", str(tmp_path / "o.npy"),
                 "--ray", "auto"])
    err = capsys.readouterr().err
    assert code == 1 and "pip install 'ember[ray]'" in err and not (tmp_path / "o.npy").exists()
