"""The device: strings, stacking, pipelining, freeing, and composite ops against numpy."""

from __future__ import annotations

import ember
import numpy as np
import pytest

from ember_remote import RemoteConnectionError


def test_the_device_string_round_trips(server):
    d = ember.device(server.device())
    assert str(d) == server.device()
    assert ember.device(str(d)) is d
    ad = ember.device(f"autodiff<{server.device()}>")
    assert str(ad) == f"autodiff<{server.device()}>" and ad.inner is d


@pytest.mark.parametrize("text, message", [
    ("remote<127.0.0.1/cpu>", "expected remote<HOST:PORT/INNER>"),
    ("remote<127.0.0.1:99999/cpu>", "expected remote<HOST:PORT/INNER>"),
    ("remote<127.0.0.1:7878>", "expected remote<HOST:PORT/INNER>"),
    ("remote<127.0.0.1:7878/cpu,timeout=-1>", "timeout must be positive"),
    ("remote<127.0.0.1:7878/autodiff<cpu>>", r"write autodiff<remote<127.0.0.1:7878/cpu>>"),
])
def test_malformed_or_meaningless_strings_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        ember.device(text)


def test_a_device_the_server_does_not_serve_is_refused(server):
    with pytest.raises(RemoteConnectionError, match="not served here"):
        ember.device(server.device("opencl:0"))


def test_fusion_on_the_server(server):
    d = ember.device(server.device("fusion<cpu>"))
    x = np.linspace(-2, 2, 12).reshape(3, 4)
    got = (ember.tensor(x, device=d).exp() * 2 - 1).tanh().sum(dim=1).numpy()
    np.testing.assert_allclose(got, np.tanh(np.exp(x) * 2 - 1).sum(axis=1), rtol=1e-12)


def test_ops_are_queued_until_a_sync(server):
    d = ember.device(server.device())
    conn = d.backend.connection()
    x = ember.arange(5.0, device=d)
    conn.flush()
    for _ in range(10):
        x = x * 2 + 1
    assert len(conn.records) >= 20  # nothing sent yet: no round trip per op
    np.testing.assert_array_equal(x.numpy(), np.arange(5.0) * 1024 + 1023)
    assert len(conn.records) == 0


def test_large_results_go_to_the_server_early(server, monkeypatch):
    from ember_remote import _connection, backend

    monkeypatch.setattr(backend, "FLUSH_ELEMENTS", 1000)
    d = ember.device(server.device())
    conn = d.backend.connection()
    x = ember.ones((40, 40), device=d)  # 1,600 elements: the queue goes out with it
    assert len(conn.records) == 0 and _connection.FLUSH_RECORDS > 2
    y = ember.ones((4, 4), device=d)
    assert len(conn.records) == 1  # small results wait for more
    assert (x.sum() + y.sum()).item() == 1616.0


def test_reading_back_an_upload_needs_no_round_trip(server):
    d = ember.device(server.device())
    data = np.arange(6, dtype=np.int64).reshape(2, 3)
    x = ember.tensor(data, device=d)
    conn = d.backend.connection()

    def no_round_trip(sync=None):
        raise AssertionError(f"a round trip for {sync}")

    conn.flush, flush = no_round_trip, conn.flush  # type: ignore[method-assign]
    try:
        np.testing.assert_array_equal(x.numpy(), data)  # the client's copy of what it sent
        assert not x.numpy().flags.writeable
    finally:
        conn.flush = flush  # type: ignore[method-assign]
    np.testing.assert_array_equal((x * 2).numpy(), data * 2)  # the server has it too


def test_dropped_tensors_are_freed_on_the_server(server):
    d = ember.device(server.device())
    for i in range(10):  # the constants `* i` makes, which core keeps (cached per device)
        ember.ones((1,), device=d) * i
    before = d.backend.memory_stats()
    xs = [ember.ones((256, 256), device=d) * i for i in range(10)]
    held = d.backend.memory_stats()
    assert held["bytes"] - before["bytes"] >= 10 * 256 * 256 * 4
    del xs
    after = d.backend.memory_stats()
    assert after["tensors"] == before["tensors"] and after["bytes"] == before["bytes"]


def test_a_shape_without_a_rule_is_asked_of_the_server(server):
    d = ember.device(server.device())
    x = ember.tensor([[0.0, 1.0], [2.0, 0.0]], device=d)
    nz = x.nonzero()  # data-dependent shape
    assert nz.shape == (2, 2)
    np.testing.assert_array_equal(nz.numpy(), [[0, 1], [1, 0]])


def test_training_through_autodiff_matches_numpy(server):
    d = ember.device(f"autodiff<{server.device()}>")
    rng = np.random.default_rng(3)
    xs, w0 = rng.standard_normal((16, 4)), rng.standard_normal((4, 3))
    labels = rng.integers(0, 3, 16)
    w = ember.tensor(w0, device=d, requires_grad=True)
    loss = ember.nn.functional.cross_entropy(ember.tensor(xs, device=d) @ w,
                                             ember.tensor(labels, device=d))
    grad = loss.backward()[w].numpy()
    logits = xs @ w0
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.eye(3)[labels]
    want_loss = -np.log(p[np.arange(16), labels]).mean()
    np.testing.assert_allclose(loss.item(), want_loss, rtol=1e-10)
    np.testing.assert_allclose(grad, xs.T @ (p - onehot) / 16, rtol=1e-9, atol=1e-12)


def test_dtypes_travel_exactly(server):
    d = ember.device(server.device())
    for dtype in ember.backend.ALL_DTYPES:
        values = np.array([0, 1, 2, 3]).astype(ember.backend.numpy_dtype(dtype))
        got = ember.tensor(values, device=d, dtype=dtype).numpy()
        assert got.dtype == values.dtype
        np.testing.assert_array_equal(got, values)
