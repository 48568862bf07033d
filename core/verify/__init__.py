"""Parity checks against PyTorch: `compare` any ember module with any torch module
sub-module by sub-module (for people porting their own models), and `verify_model` for
the model families ember ships (what `ember verify MODEL` runs).

    import ember.verify
    report = ember.verify.compare(ember_mlp, torch_mlp, (x,), pairs={"fc1": "0", "fc2": "2"})
    print(report)                 # per pair: max abs / rel error; the first divergent one
    assert report.ok

torch and transformers are imported only here, and only when a comparison runs.
"""

from .compare import OUTPUT, PairResult, Report, compare
from .reference import INSTALL, MissingReference

__all__ = [
    "INSTALL",
    "OUTPUT",
    "MissingReference",
    "PairResult",
    "Report",
    "compare",
    "verify_model",
]


def verify_model(path, **kwargs):
    """Compare ember's model at `path` (a model directory or a GGUF file) with transformers'
    (see ember.verify.families.verify_model)."""
    from .families import verify_model as run

    return run(path, **kwargs)
