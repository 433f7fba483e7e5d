"""Per-client isolation: ids are looked up in the client's own session only."""

from __future__ import annotations

import ember
import numpy as np
import pytest
from rawclient import ask, open_raw


def test_a_second_client_cannot_read_the_first_clients_tensors(server, remote_token):
    d = ember.device(server.device())
    secret = ember.tensor([[1.5, -2.0], [3.0, 4.25]], device=d)
    doubled = secret * 2
    np.testing.assert_array_equal(doubled.numpy(), [[3.0, -4.0], [6.0, 8.5]])
    ids = [secret.payload.id, doubled.payload.id]
    ws, _ = open_raw(server.port, remote_token)
    for k, tid in enumerate([*ids, *range(1, max(ids) + 3)]):
        reply = ask(ws, ["get", tid])
        assert reply[0] == "error" and "unknown tensor id" in reply[2], reply
        # nor through an op on it
        reply = ask(ws, ["op", "add", (tid, tid), {}, (10_000 + k,)], ["get", 10_000 + k])
        assert reply[0] == "error" and "unknown tensor id" in reply[2], reply
    ws.close()
    # the owner still reads its own data
    np.testing.assert_array_equal(secret.numpy(), [[1.5, -2.0], [3.0, 4.25]])


def test_two_remote_devices_do_not_mix_tensors(server):
    a = ember.ones(3, device=server.device())
    b = ember.ones(3, device=server.device(timeout=9))  # another device: another session
    with pytest.raises(ember.DeviceMismatchError, match="timeout=9"):
        a + b
    np.testing.assert_array_equal((a + b.to(a.device)).numpy(), [2.0, 2.0, 2.0])


def test_remote_and_local_tensors_do_not_mix(server):
    a = ember.ones(3, device=server.device())
    with pytest.raises(ember.DeviceMismatchError, match="remote<"):
        a + ember.ones(3, device="cpu")


def test_an_unsupported_dtype_names_the_device_and_the_dtype(server):
    d = ember.device(server.device(timeout=8))
    d.backend.dtypes = d.backend.dtypes - {ember.float16}
    with pytest.raises(ember.DTypeError, match=r"remote<.*float16"):
        ember.zeros(2, dtype=ember.float16, device=d)
    with pytest.raises(ember.DTypeError, match=r"remote<.*float16"):
        ember.ones(2, device=d).to(ember.float16)
