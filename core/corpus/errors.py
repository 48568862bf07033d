"""The corpus errors: one for a job that cannot run, one for a row that cannot be read."""

from ..errors import EmberError, FormatError


class CorpusError(EmberError, ValueError):
    """A corpus job that cannot run as asked (an output that is not ember's, a partial
    run of other inputs, a missing column): nothing has been written."""


class BadRow(FormatError):
    """One row of an input that cannot be embedded; `--skip-bad-rows` logs it and goes on.
    `path`, `line` (1-based line or row number) and `field` say where."""

    def __init__(self, path, line, problem, field=None, unit="line"):
        where = f"{path} {unit} {line}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(
            f"{where}: {problem}", path=str(path), line=line, field=field, problem=problem
        )
