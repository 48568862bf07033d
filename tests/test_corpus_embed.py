"""`ember embed --input ... --output ...` and `ember search` on a tiny random model (and a
real-weight check on all-MiniLM-L6-v2): outputs equal each text embedded alone, someone
else's files are never overwritten, an interrupted job resumes to the same file."""
import json
import os

import numpy as np
import pytest

from corpus_fixtures import sentences, tiny_model_dir, write_jsonl, write_txt  # noqa: F401
from ember.cli import main
from ember.corpus.job import CorpusJob, embedder_facts, local_windows
from ember.corpus.search import index_chunks, top_k
from ember.pipelines import SentenceEmbedder
from helpers import missing
from minilm_fixtures import SENTENCES, minilm_dir, minilm_reference  # noqa: F401 (fixtures)


def _embed(capsys, model, *argv):
    code = main(["embed", "--device", "cpu", "--model", str(model), *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _read_index(path):
    ids, texts, vectors = [], [], []
    for i, t, v in index_chunks(str(path)):
        ids += i
        texts += t
        vectors.append(v)
    return ids, texts, np.concatenate(vectors)


def _cosines(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return SentenceEmbedder.from_pretrained(str(tiny_model_dir), device="cpu")


def _pyarrow():
    try:
        import pyarrow  # noqa: F401
    except ImportError as exc:
        missing("pyarrow (ember[parquet])", str(exc))


@pytest.mark.parametrize("fmt", [".npy", ".jsonl", ".parquet"])
def test_output_equals_each_text_embedded_alone(capsys, tmp_path, tiny_model_dir, tiny, fmt):
    if fmt == ".parquet":
        _pyarrow()
    texts = sentences(150, seed=1)
    src = write_jsonl(tmp_path / "docs.jsonl", texts)
    out = tmp_path / f"vectors{fmt}"
    # windows of 32 rows sorted into micro-batches of 4: every batch mixes padded lengths
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out,
                          "--window", 32, "--batch-size", 4)
    assert code == 0, err
    ids, got_texts, vectors = _read_index(out)
    assert ids == [f"{src}:{i + 1}" for i in range(150)] and got_texts == texts
    alone = np.concatenate([tiny.encode([t]).numpy() for t in texts])
    assert vectors.dtype == np.float32 and vectors.shape == (150, 32)
    assert _cosines(vectors, alone).min() >= 0.99999
    assert not os.path.exists(tmp_path / f".vectors{fmt}.ember-parts")


def test_txt_and_csv_inputs_with_id_field(capsys, tmp_path, tiny_model_dir, tiny):
    txt = write_txt(tmp_path / "a.txt", ["the cat sat", "a dog ran"])
    csv = tmp_path / "b.csv"
    csv.write_text('doc,body\nd1,"the red bird, it sings"\nd2,big house\n')
    code, _, err = _embed(capsys, tiny_model_dir, "--input", txt, "--output", tmp_path / "o.npy")
    assert code == 0, err
    code, _, err = _embed(capsys, tiny_model_dir, "--input", csv, "--output", tmp_path / "o.jsonl",
                          "--text-field", "body", "--id-field", "doc")
    assert code == 0, err
    assert _read_index(tmp_path / "o.npy")[0] == [f"{txt}:1", f"{txt}:2"]
    ids, texts, vectors = _read_index(tmp_path / "o.jsonl")
    assert ids == ["d1", "d2"] and texts == ["the red bird, it sings", "big house"]
    assert _cosines(vectors, tiny.encode(texts).numpy()).min() >= 0.99999


def test_someone_elses_output_is_refused_and_kept(capsys, tmp_path, tiny_model_dir):
    src = write_txt(tmp_path / "a.txt", ["the cat", "a dog"])
    out = tmp_path / "o.npy"
    out.write_bytes(b"PAR1 someone's parquet")
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out)
    assert code == 1 and "o.npy exists and holds parquet data, not npy" in err
    assert out.read_bytes() == b"PAR1 someone's parquet"
    out.unlink()
    sidecar = tmp_path / "o.rows.jsonl"
    sidecar.write_text("mine\n")
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out)
    assert code == 1 and "o.rows.jsonl exists and was not written by ember" in err
    assert sidecar.read_text() == "mine\n" and not out.exists()
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out, "--force")
    assert code == 0, err
    assert _read_index(out)[1] == ["the cat", "a dog"]


def test_someone_elses_directory_in_the_place_of_the_parts_is_kept(capsys, tmp_path,
                                                                  tiny_model_dir):
    src = write_txt(tmp_path / "a.txt", ["the cat"])
    theirs = tmp_path / ".o.npy.ember-parts"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", tmp_path / "o.npy",
                          "--force")
    assert code == 1 and "was not made by ember" in err
    assert os.listdir(theirs) == ["notes.txt"] and not (tmp_path / "o.npy").exists()


def test_ember_replaces_its_own_output_but_not_once_changed(capsys, tmp_path, tiny_model_dir):
    src = write_txt(tmp_path / "a.txt", ["the cat", "a dog"])
    out = tmp_path / "o.jsonl"
    assert _embed(capsys, tiny_model_dir, "--input", src, "--output", out)[0] == 0
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out)
    assert code == 0 and "already complete" in err
    write_txt(src, ["the cat", "a dog", "a bird"])
    assert _embed(capsys, tiny_model_dir, "--input", src, "--output", out)[0] == 0
    assert len(_read_index(out)[0]) == 3
    with open(out, "a") as fh:
        fh.write("\n")   # someone edited it: no longer ember's
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out)
    assert code == 1 and "was not written by ember (or was changed since)" in err


def test_bad_rows_stop_the_job_or_are_skipped(capsys, tmp_path, tiny_model_dir):
    src = tmp_path / "a.jsonl"
    src.write_bytes(b'{"text": "the cat"}\n{"title": "x"}\n{"text": "caf\xe9"}\n'
                    b'{"text": "a dog"}\n')
    out = tmp_path / "o.jsonl"
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out)
    assert code == 1 and f"{src} line 2, field 'text': no field 'text'" in err
    assert "--skip-bad-rows" in err and not out.exists()
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out,
                          "--skip-bad-rows")
    assert code == 0, err
    assert f"skipped {src} line 2" in err and f"skipped {src} line 3: not UTF-8" in err
    assert _read_index(out)[:2] == ([f"{src}:1", f"{src}:4"], ["the cat", "a dog"])


def test_unwritable_output_directory_is_named(capsys, tmp_path, tiny_model_dir, monkeypatch):
    src = write_txt(tmp_path / "a.txt", ["the cat"])
    locked = tmp_path / "locked"
    locked.mkdir()
    # Root (as on CI) ignores mode bits, so the check is made to see what a user would.
    real_access = os.access
    monkeypatch.setattr(os, "access",
                        lambda p, mode: False if str(p) == str(locked) else real_access(p, mode))
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", locked / "o.npy")
    assert code == 1 and f"{locked}: the output directory is not writable" in err
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output",
                          tmp_path / "absent" / "o.npy")
    assert code == 1 and "the output directory does not exist" in err
    assert os.listdir(locked) == []


class _Crash(Exception):
    pass


def _interrupted(job, embedder, after):
    """Run `job` but die after `after` committed windows, as a killed process would."""
    def run(windows):
        for n, item in enumerate(local_windows(embedder, job.batch_size)(windows)):
            if n == after:
                raise _Crash
            yield item
    with pytest.raises(_Crash):
        job.run(run)


def test_resume_skips_committed_parts_and_ends_with_the_same_file(tmp_path, tiny):
    texts = sentences(100, seed=3)
    src = str(write_jsonl(tmp_path / "a.jsonl", texts))
    whole, resumed = str(tmp_path / "whole.npy"), str(tmp_path / "resumed.npy")
    kw = dict(window=16, batch_size=4, log=lambda m: None)
    CorpusJob([src], whole, embedder_facts(tiny), **kw).run(local_windows(tiny, 4))
    job = CorpusJob([src], resumed, embedder_facts(tiny), **kw)
    _interrupted(job, tiny, after=3)
    assert not os.path.exists(resumed) and len(job.parts.entries) == 3
    logs = []
    seen = []

    def counting(windows):
        for rows, vectors in local_windows(tiny, 4)(windows):
            seen.extend(rows)
            yield rows, vectors
    summary = CorpusJob([src], resumed, embedder_facts(tiny), window=16, batch_size=4,
                        log=logs.append).run(counting)
    assert summary["embedded"] == 100 - 48 and len(seen) == 52
    assert logs == [f"resuming {resumed}: 48 rows already embedded in 3 parts"]
    for a, b in ((whole, resumed), (whole[:-4] + ".rows.jsonl", resumed[:-4] + ".rows.jsonl")):
        assert open(a, "rb").read() == open(b, "rb").read()


def test_resume_with_other_inputs_or_options_is_refused(capsys, tmp_path, tiny, tiny_model_dir):
    src = str(write_jsonl(tmp_path / "a.jsonl", sentences(60, seed=4)))
    out = str(tmp_path / "o.npy")
    _interrupted(CorpusJob([src], out, embedder_facts(tiny), window=16, log=lambda m: None),
                 tiny, after=2)
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out,
                          "--window", 8)
    assert code == 1 and "holds an interrupted run of" in err and "other window" in err
    write_jsonl(tmp_path / "a.jsonl", sentences(61, seed=4))
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out,
                          "--window", 16)
    assert code == 1 and "other inputs" in err
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out,
                          "--window", 16, "--force")
    assert code == 0, err
    assert len(_read_index(out)[0]) == 61


def test_search_is_exact_cosine_top_k_over_chunks(capsys, tmp_path, tiny_model_dir, tiny):
    texts = sentences(90, seed=5)
    src = write_jsonl(tmp_path / "a.jsonl", texts)
    out = tmp_path / "idx.npy"
    assert _embed(capsys, tiny_model_dir, "--input", src, "--output", out)[0] == 0
    vectors = np.load(out)
    query = tiny.encode(["the big red house"]).numpy()[0]
    scores = vectors @ query / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query))
    expected = np.argsort(-scores, kind="stable")[:5]
    got = top_k(query, index_chunks(str(out), chunk_rows=7), k=5)   # 13 chunks, merged
    assert [r[1] for r in got] == [f"{src}:{i + 1}" for i in expected]
    np.testing.assert_allclose([r[0] for r in got], scores[expected], rtol=1e-5)
    assert [r[2] for r in got] == [texts[i] for i in expected]
    code = main(["search", str(out), "the big red house", "-k", "3", "--json",
                 "--model", str(tiny_model_dir)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [r["id"] for r in doc["results"]] == [f"{src}:{i + 1}" for i in expected[:3]]
    assert main(["search", str(out), "the big red house", "-k", "2",
                 "--model", str(tiny_model_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{scores[expected[0]]:.4f}  {src}:{expected[0] + 1}  {texts[expected[0]]}"


def test_search_names_a_missing_index_or_a_width_mismatch(capsys, tmp_path, tiny_model_dir):
    assert main(["search", str(tmp_path / "none.npy"), "q", "--model", str(tiny_model_dir)]) == 1
    assert "none.npy: no such index" in capsys.readouterr().err
    np.save(tmp_path / "w.npy", np.ones((2, 5), np.float32))
    (tmp_path / "w.rows.jsonl").write_text('{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n')
    assert main(["search", str(tmp_path / "w.npy"), "q", "--model", str(tiny_model_dir)]) == 1
    assert "5-wide vectors, the query's model makes 32-wide" in capsys.readouterr().err


def test_parquet_input_and_output_search(capsys, tmp_path, tiny_model_dir, tiny):
    _pyarrow()
    import pyarrow as pa
    import pyarrow.parquet as pq
    texts = sentences(40, seed=6)
    src = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"body": texts, "key": [f"k{i}" for i in range(40)]}), src)
    out = tmp_path / "v.parquet"
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out,
                          "--text-field", "body", "--id-field", "key", "--window", 16)
    assert code == 0, err
    table = pq.read_table(out)
    assert table.column_names == ["id", "text", "vector"]
    assert table.column("id").to_pylist() == [f"k{i}" for i in range(40)]
    vectors = np.array(table.column("vector").to_pylist(), np.float32)
    assert _cosines(vectors, tiny.encode(texts).numpy()).min() >= 0.99999


def test_minilm_corpus_matches_the_reference_and_each_text_alone(capsys, tmp_path, minilm_dir,
                                                                 minilm_reference):
    keep = [i for i, t in enumerate(SENTENCES) if t.strip()]   # the empty one is a bad row
    src = write_jsonl(tmp_path / "s.jsonl", SENTENCES)
    out = tmp_path / "s.npy"
    code, _, err = _embed(capsys, minilm_dir, "--input", src, "--output", out, "--window", 8,
                          "--skip-bad-rows")
    assert code == 0 and "the text is empty" in err
    ids, texts, vectors = _read_index(out)
    assert texts == [SENTENCES[i] for i in keep]
    emb = SentenceEmbedder.from_pretrained(minilm_dir, device="cpu")
    alone = np.concatenate([emb.encode([t]).numpy() for t in texts])
    assert _cosines(vectors, alone).min() >= 0.99999
    assert _cosines(vectors, minilm_reference[keep]).min() >= 0.9999


def test_a_corpus_with_no_good_rows_is_an_error_and_leaves_nothing(capsys, tmp_path,
                                                                   tiny_model_dir):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": ""}\n{"other": 1}\n')
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", tmp_path / "o.npy",
                          "--skip-bad-rows")
    assert code == 1 and "no rows to embed" in err
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl"]


def test_a_deleted_sidecar_is_written_again(capsys, tmp_path, tiny_model_dir):
    src = write_txt(tmp_path / "a.txt", ["the cat", "a dog"])
    out = tmp_path / "o.npy"
    assert _embed(capsys, tiny_model_dir, "--input", src, "--output", out)[0] == 0
    (tmp_path / "o.rows.jsonl").unlink()
    code, _, err = _embed(capsys, tiny_model_dir, "--input", src, "--output", out)
    assert code == 0 and "already complete" not in err
    assert _read_index(out)[1] == ["the cat", "a dog"]
