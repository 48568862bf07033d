"""Running fuzz cases: each one either succeeds or raises one of ember's own errors.

`run_cases(make, check, n, seed)` calls `make(rng)` -> (input, description) and
`check(input)` for each case and tallies outcomes by error class; anything that is not
an EmberError is collected with its seed and description, so the test can show every
offending case, not only the first.
"""
import collections
import random
import traceback

from ember.errors import EmberError


class Tally:
    def __init__(self):
        self.counts = collections.Counter()
        self.escapes = []          # (seed, description, formatted exception)

    def record(self, seed, description, exc):
        if exc is None:
            self.counts["ok"] += 1
        elif isinstance(exc, EmberError):
            self.counts[type(exc).__name__] += 1
        else:
            self.counts["ESCAPED " + type(exc).__name__] += 1
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
            self.escapes.append((seed, description, tb))

    def summary(self):
        return ", ".join(f"{k}: {v}" for k, v in sorted(self.counts.items(), key=lambda kv: -kv[1]))

    def assert_clean(self, what):
        shown = "\n\n".join(f"seed {s}: {d}\n{tb}" for s, d, tb in self.escapes[:5])
        assert not self.escapes, (f"{what}: {len(self.escapes)} cases raised something other "
                                  f"than an EmberError ({self.summary()}):\n{shown}")


def run_cases(make, check, n, seed):
    tally = Tally()
    for i in range(n):
        case_seed = seed * 1_000_003 + i
        rng = random.Random(case_seed)
        value, description = make(rng)
        try:
            check(value)
        except Exception as exc:   # noqa: BLE001 - classifying every outcome is the point
            tally.record(case_seed, description, exc)
        else:
            tally.record(case_seed, description, None)
    return tally
