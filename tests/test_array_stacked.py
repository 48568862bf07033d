"""A stack of small products (attention's per-head q @ k^T) split over the CPU threads
gives numpy's own stacked matmul, bit for bit, for contiguous, transposed and
broadcast right-hand sides."""
import numpy as np

import ember
from ember.backends import array_stacked, row_parallel


def test_a_split_stack_gives_numpys_bits(monkeypatch):
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    ranges = []
    real = array_stacked.run_rows

    def spy(fn, rows, per_row):
        return real(lambda s, e: (ranges.append((s, e)), fn(s, e)), rows, per_row)
    monkeypatch.setattr(array_stacked, "run_rows", spy)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 4, 64, 48)).astype(np.float32)
    w = rng.standard_normal((8, 4, 48, 80)).astype(np.float32)
    w_rows = rng.standard_normal((8, 4, 80, 48)).astype(np.float32)   # k itself: k^T is a view
    shared = rng.standard_normal((1, 4, 48, 80)).astype(np.float32)   # broadcast over dim 0
    cases = {
        "contiguous": (ember.tensor(w), w),
        "transposed": (ember.tensor(w_rows).transpose(-1, -2), w_rows.swapaxes(-1, -2)),
        "broadcast": (ember.tensor(shared), shared),
    }
    for name, (rhs, want_rhs) in cases.items():
        ranges.clear()
        monkeypatch.setattr(row_parallel, "_choices", row_parallel._Choices())  # shares first
        got = (ember.tensor(x) @ rhs).numpy()
        np.testing.assert_array_equal(got, np.matmul(x, want_rhs), err_msg=name)
        # the stack went in several ranges, every matrix in one of them
        assert len(ranges) > 1 and sorted(i for s, e in ranges for i in range(s, e)) == list(
            range(8)), name
