"""`ember embed --input FILE... --output FILE`: the corpus form of `ember embed`, in this
process or (`--ray ADDRESS`) on a Ray cluster. See docs/corpus.md."""

import json
import os
import sys

from .common import load_embedder, open_device


def run_corpus(args, out):
    if not args.input or not args.output:
        print("ember embed: --input and --output go together", file=sys.stderr)
        return 2
    if args.texts or args.query is not None:
        print("ember embed: give TEXT arguments or --input files, not both", file=sys.stderr)
        return 2
    from ..corpus import BadRow

    try:
        return _run(args, out)
    except BadRow as exc:
        print(
            f"ember embed: {exc} (--skip-bad-rows logs such rows and goes on; rerunning "
            "resumes after the rows already embedded)",
            file=sys.stderr,
        )
        return 1
    except OSError as exc:  # a full disk, a file that vanished: said, not a traceback
        print(f"ember embed: {exc.filename or args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1


def _run(args, out):
    from ..corpus.job import CorpusJob, embedder_facts, local_windows

    def make_job(model_facts):
        return CorpusJob(
            args.input,
            args.output,
            model_facts,
            text_field=args.text_field,
            id_field=args.id_field,
            window=args.window,
            batch_size=args.batch_size,
            skip_bad_rows=args.skip_bad_rows,
            force=args.force,
        )

    if args.ray is not None:
        from ..integrations.ray import connect, ray_windows, require_ray

        require_ray()  # before any work: without Ray the option says how to get it
        facts = _model_facts(args.model)
        job = make_job(facts)
        job.check()
        connect(args.ray)
        summary = job.run(
            ray_windows(
                facts["model"],
                device=args.device,
                actors=args.ray_actors,
                batch_size=args.batch_size,
            )
        )
    else:
        job = make_job({"model": None, "dim": 0})
        job.check()  # refuse someone's files before loading the model
        embedder = load_embedder(args.model, open_device(args.device))
        job.model_facts = embedder_facts(embedder)
        summary = job.run(local_windows(embedder, args.batch_size))
    if args.json:
        json.dump(summary, out)
        out.write("\n")
    else:
        skipped = f", {summary['skipped']} bad rows skipped" if summary["skipped"] else ""
        print(
            f"ember embed: {summary['output']}: {summary['rows']:,} rows "
            f"({summary['embedded']:,} embedded now{skipped}) in {summary['seconds']:.1f} s",
            file=sys.stderr,
        )
    return 0


def _model_facts(model):
    """The model's path and width without loading it (the Ray actors load it)."""
    from ..hub import resolve
    from ..models.bert import BertConfig

    path = resolve(model)
    return {
        "model": os.path.abspath(path),
        "dim": BertConfig.from_json(os.path.join(path, "config.json")).hidden_size,
    }
