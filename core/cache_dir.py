"""Where ember keeps what it makes for itself: $EMBER_CACHE, default ~/.cache/ember.

Models go under models/ (hub, packaged), compiled kernels under jit/ (backends.llvm_f16).
Everything in it is ember's own: it is created, replaced and removed only by ember.
"""

import os


def cache_dir():
    return os.environ.get("EMBER_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ember")
