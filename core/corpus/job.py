"""One corpus job: inputs -> windows of rows -> committed parts -> the final output.

Rows stream from the readers; every `window` rows are embedded together (the embedder
sorts them by length into micro-batches of up to `batch_size` rows and a bounded number
of tokens, so padding stays small), then
committed as one part of the journal. Memory holds one window (and the embedder's model),
whatever the corpus size. A rerun of the same job after an interruption skips the rows of
the committed parts and embeds the rest in the same windows, so it ends with the same file
as a run that was never interrupted.
"""

import hashlib
import itertools
import os
import sys
import time

from ..pipelines.sentence_embedder import BATCH_SIZE
from . import owned_files
from .assemble import assemble
from .errors import CorpusError
from .formats import output_files, output_format, sniff
from .parts import Parts
from .progress import Progress
from .readers import check_inputs, count_rows, read_rows

HASH_CHUNK = 1 << 20


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(HASH_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def local_windows(embedder, batch_size=BATCH_SIZE):
    """Embed windows in this process: (rows, float32 vectors) for each window of rows."""

    def run(windows):
        for rows in windows:
            yield rows, embedder.encode([text for _, text in rows], batch_size=batch_size).numpy()

    return run


class CorpusJob:
    def __init__(
        self,
        inputs,
        output,
        model_facts,
        text_field="text",
        id_field=None,
        window=1024,
        batch_size=BATCH_SIZE,
        skip_bad_rows=False,
        force=False,
        log=None,
        progress_stream=None,
    ):
        if window < 1 or batch_size < 1:
            raise CorpusError(f"window ({window}) and batch size ({batch_size}) must be >= 1")
        self.inputs = [os.fspath(p) for p in inputs]
        self.output = os.fspath(output)
        self.model_facts = dict(model_facts)
        self.text_field, self.id_field = text_field, id_field
        self.window, self.batch_size = window, batch_size
        self.skip_bad_rows, self.force = skip_bad_rows, force
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.progress_stream = progress_stream
        self.format = output_format(self.output)
        self.parts = Parts(self.output)
        self.skipped = 0

    # --- before any work ---------------------------------------------------------------
    def check(self):
        """Every refusal that does not need the model: inputs, formats, someone's files."""
        check_inputs(self.inputs, self.text_field, self.id_field)
        for path in output_files(self.output):
            why = owned_files.refusal(path)
            if why is None or self.force:
                continue
            found = sniff(path)
            if found is not None and found != self.format and path == self.output:
                why = (
                    f"{path} exists and holds {found[1:]} data, not {self.format[1:]}; "
                    "ember never overwrites a file it did not write (--force replaces it)"
                )
            raise CorpusError(why, path=path)
        self.parts.check_ours()
        directory = os.path.dirname(os.path.abspath(self.output))
        if not os.path.isdir(directory):
            raise CorpusError(f"{directory}: the output directory does not exist", path=directory)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise CorpusError(f"{directory}: the output directory is not writable", path=directory)

    def fingerprint(self):
        # Not --skip-bad-rows: the committed rows are the same either way up to the first
        # bad row, so a run stopped by one may be resumed with the flag.
        return {
            "inputs": [[p, os.path.getsize(p), file_sha256(p)] for p in self.inputs],
            "text_field": self.text_field,
            "id_field": self.id_field,
            "window": self.window,
            "batch_size": self.batch_size,
            "format": self.format,
            **self.model_facts,
        }

    # --- the run ---------------------------------------------------------------------------
    def run(self, embed_windows):
        """Embed every row not yet committed through `embed_windows` (see local_windows),
        then write the output. Returns a summary dict."""
        t0 = time.perf_counter()
        self.check()
        fingerprint = self.fingerprint()
        done = [owned_files.record(path) for path in output_files(self.output)]
        if (
            all(r is not None and r.get("fingerprint") == fingerprint for r in done)
            and not self.parts.exists()
            and not self.force
        ):
            self.log(f"{self.output} is already complete for these inputs; nothing to do")
            return {
                "output": self.output,
                "rows": done[0].get("rows"),
                "embedded": 0,
                "skipped": 0,
                "seconds": time.perf_counter() - t0,
            }
        try:
            self.parts.open(fingerprint, restart=self.force)
        except PermissionError as exc:
            raise CorpusError(
                f"{self.parts.dir}: cannot write the job's parts there ({exc.strerror or exc})",
                path=self.parts.dir,
            ) from None
        resumed = self.parts.rows_done
        if resumed:
            self.log(
                f"resuming {self.output}: {resumed:,} rows already embedded in "
                f"{len(self.parts.entries)} parts"
            )
        progress = Progress(self.progress_stream or sys.stderr, done=resumed)
        if progress.enabled:
            progress.total = count_rows(self.inputs)
        embedded = 0
        for rows, vectors in embed_windows(self._windows(resumed)):
            if vectors.shape[0] != len(rows):
                raise CorpusError(
                    f"the embedder returned {vectors.shape[0]} vectors for a "
                    f"window of {len(rows)} rows"
                )
            self.parts.commit(rows, vectors)
            embedded += len(rows)
            progress.update(len(rows))
        progress.close()
        rows = self.parts.rows_done
        if rows == 0:
            self.parts.remove()
            raise CorpusError(f"no rows to embed in {', '.join(self.inputs)}")
        dim = int(self.model_facts["dim"])
        assemble(self.parts, self.format, dim, {"fingerprint": fingerprint, "rows": rows})
        self.parts.remove()
        return {
            "output": self.output,
            "rows": rows,
            "embedded": embedded,
            "skipped": self.skipped,
            "seconds": time.perf_counter() - t0,
        }

    def _windows(self, skip):
        """Lists of `window` (id, text) rows after the first `skip` good rows (bad ones
        met while skipping were logged by the run that embedded them)."""
        quiet = [skip > 0]

        def on_bad(row):
            if not quiet[0]:
                self.skipped += 1
                self.log(f"skipped {row}")

        rows = read_rows(
            self.inputs,
            self.text_field,
            self.id_field,
            on_bad=on_bad if self.skip_bad_rows else None,
        )
        for _ in itertools.islice(rows, skip):
            pass
        quiet[0] = False
        while True:
            window = list(itertools.islice(rows, self.window))
            if not window:
                return
            yield window


def embed_corpus(inputs, output, embedder, batch_size=BATCH_SIZE, **options):
    """Embed the texts of `inputs` into `output` with a SentenceEmbedder in this process
    (CorpusJob's options: text_field, id_field, window, skip_bad_rows, force, log)."""
    job = CorpusJob(
        inputs, output, model_facts=embedder_facts(embedder), batch_size=batch_size, **options
    )
    return job.run(local_windows(embedder, batch_size))


def embedder_facts(embedder):
    """What identifies the model in a job's fingerprint."""
    return {
        "model": os.path.abspath(embedder.model_path) if embedder.model_path else None,
        "dim": embedder.dim,
    }
