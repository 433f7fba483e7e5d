"""Eight clients, each running 500 ops at once, each checked against numpy in float64."""

from __future__ import annotations

import threading

import ember
import numpy as np

CLIENTS, OPS = 8, 500


def _client(device: str, seed: int, results: dict[int, object]) -> None:
    try:
        rng = np.random.default_rng(seed)
        d = ember.device(device)
        ref = rng.uniform(-1, 1, (4, 4))
        x = ember.tensor(ref.astype(np.float32), device=d)
        for i in range(OPS):
            k = rng.integers(5)
            c = float(rng.uniform(0.5, 1.5))
            if k == 0:
                x, ref = x * c, ref * c
            elif k == 1:
                x, ref = x + c, ref + c
            elif k == 2:
                x, ref = x.tanh(), np.tanh(ref)
            elif k == 3:
                m = rng.uniform(-0.5, 0.5, (4, 4))
                x, ref = x @ ember.tensor(m.astype(np.float32), device=d), ref @ m.astype(
                    np.float32).astype(np.float64)
            else:
                x, ref = x - x.mean(dim=1, keepdim=True), ref - ref.mean(axis=1, keepdims=True)
            if i % 100 == 99:  # a sync point now and then, as a training loop has
                np.testing.assert_allclose(x.numpy(), ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(x.numpy(), ref, rtol=1e-4, atol=1e-4)
        results[seed] = "ok"
    except BaseException as exc:  # reported by the main thread
        results[seed] = exc


def test_eight_clients_with_500_ops_each_are_all_correct(server):
    results: dict[int, object] = {}
    # each device string is its own session (the option makes the strings differ)
    threads = [threading.Thread(target=_client, args=(server.device(timeout=30 + i), i, results))
               for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert results == {i: "ok" for i in range(CLIENTS)}, results
    sessions = {ember.device(server.device(timeout=30 + i)).backend.connection().new_id
                for i in range(CLIENTS)}
    assert len(sessions) == CLIENTS
