"""One wgpu device shared by threads (issue 10.5): ops recorded from several threads at
once give numpy's results, and a failure in one thread leaves the device working."""
import threading

import numpy as np

import ember
from wgpu_device import wgpu  # noqa: F401  (fixture)


def _work(device, seed, rounds, failures):
    rng = np.random.default_rng(seed)
    try:
        for i in range(rounds):  # noqa: B007 (the failure message names the round)
            a = rng.standard_normal((9, 17), dtype=np.float32)
            b = rng.standard_normal((17, 5), dtype=np.float32)
            ta, tb = ember.tensor(a, device=device), ember.tensor(b, device=device)
            np.testing.assert_allclose((ta * 2.0 + 1.0).numpy(), a * 2 + 1, rtol=1e-6)
            np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(ta.sum(-1).numpy(), a.sum(-1), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(ta.softmax(-1).numpy(),
                                       np.exp(a) / np.exp(a).sum(-1, keepdims=True),
                                       rtol=1e-5, atol=1e-6)
    except Exception as exc:  # reported to the main thread, which fails the test
        failures.append(f"thread {seed}, round {i}: {exc!r}")


def test_four_threads_share_one_device(wgpu):
    failures = []
    threads = [threading.Thread(target=_work, args=(wgpu, s, 60, failures)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_a_driver_failure_in_one_thread_does_not_poison_the_next_call(wgpu, monkeypatch):
    """A dispatch that the driver rejects (simulated: the real driver's validation errors
    arrive the same way) raises a DeviceError in its thread; the work recorded before it
    still completes and every later op, in any thread, is right."""
    driver = wgpu.backend.driver
    x = np.arange(12, dtype=np.float32)
    before = ember.tensor(x, device=wgpu) * 3.0         # recorded, not yet submitted
    real = driver.dispatch
    calls = []

    def failing_dispatch(*args):
        calls.append(1)
        raise RuntimeError("simulated validation error")

    monkeypatch.setattr(driver, "dispatch", failing_dispatch)
    errors = []

    def doomed():
        try:
            ember.tensor(x, device=wgpu) + 1.0
        except ember.DeviceError as exc:
            errors.append(exc)

    t = threading.Thread(target=doomed)
    t.start()
    t.join()
    monkeypatch.setattr(driver, "dispatch", real)
    assert calls and len(errors) == 1 and "simulated validation error" in str(errors[0])
    np.testing.assert_array_equal(before.numpy(), x * 3)
    failures = []
    _work(wgpu, 7, 3, failures)
    assert failures == []
