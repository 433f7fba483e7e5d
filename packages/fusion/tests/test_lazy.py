"""Laziness, liveness, sync points, caches, logging and threads of fusion<cpu>."""

from __future__ import annotations

import gc
import logging
import threading

import ember
import numpy as np
import pytest
from ember._apply import apply
from ember.backend import set_payload
from ember.ops import reduction as red

import ember_fusion


def test_ops_are_recorded_until_a_sync_point(fused: ember.Device) -> None:
    x = ember.arange(6.0, device=fused)
    y = (x + 1) * 2
    assert y.shape == (6,)  # known without running anything
    assert ember_fusion.stats(fused).flushes == 0
    assert y.tolist() == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    assert ember_fusion.stats(fused).flushes == 1


def test_unheld_intermediates_are_never_written(fused: ember.Device) -> None:
    x = ember.ones((8, 8), device=fused)
    y = ((x * 2 + 1).exp() - 3).abs()
    y.numpy()
    s = ember_fusion.stats(fused)
    assert s.values_written == 1  # only y: the four intermediates lived in registers/blocks


def test_held_intermediates_are_materialised(fused: ember.Device) -> None:
    x = ember.ones((8, 8), device=fused)
    a = x * 2 + 1
    y = (a.exp() - 3).abs()
    y.numpy()
    assert ember_fusion.stats(fused).values_written == 2  # a and y
    # a was computed by the same kernel: reading it runs nothing more
    assert a.numpy()[0, 0] == 3.0
    assert ember_fusion.stats(fused).flushes == 1


def test_a_rebound_payload_keeps_its_value(fused: ember.Device) -> None:
    x = ember.ones(4, device=fused)
    y = ember.zeros(4, device=fused)
    set_payload(y, (x * 5).payload)  # what optimizers do to parameters (nn._values.rebind)
    gc.collect()
    assert y.tolist() == [5.0] * 4


def test_setitem_on_a_lazy_tensor(fused: ember.Device) -> None:
    x = ember.arange(5.0, device=fused) * 2
    x[1:3] = -1.0
    assert x.tolist() == [0.0, -1.0, -1.0, 6.0, 8.0]


def test_non_fusible_op_runs_eagerly_on_pending_inputs(fused: ember.Device) -> None:
    x = ember.tensor([3.0, 1.0, 2.0], device=fused) * 2
    values, indices = x.sort()
    assert values.tolist() == [2.0, 4.0, 6.0]
    assert indices.tolist() == [1, 2, 0]
    assert ember_fusion.stats(fused).eager_ops >= 1


def test_printing_and_item_are_sync_points(fused: ember.Device) -> None:
    x = ember.tensor([1.5, 2.5], device=fused) * 2
    assert "5." in repr(x) and "fusion<cpu" in repr(x)
    assert (x.sum() * 1).item() == 8.0


def test_device_move_materialises(fused: ember.Device) -> None:
    x = ember.tensor([1.0, 2.0], device=fused).exp()
    y = x.to("cpu")
    assert y.device == ember.device("cpu")
    np.testing.assert_allclose(y.numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


def test_recurring_stream_hits_the_plan_cache(fused: ember.Device) -> None:
    w = ember.ones((16, 4), device=fused)
    for _ in range(5):
        w = ((w * 0.5).tanh() + 1) / 2
        w.numpy()
    s = ember_fusion.stats(fused)
    assert s.flushes == 5
    assert s.plan_misses <= 2  # the first step's inputs differ (a creation value)
    assert s.plan_hits >= 3
    assert s.kernels_compiled <= 2


def test_same_group_in_another_stream_reuses_its_kernel(fused: ember.Device) -> None:
    a = ember.ones((3, 3), device=fused)
    (a * 3 + 1).numpy()
    b = ember.ones((3, 3), device=fused) * 2
    _ = b.numpy()
    ember_fusion.reset_stats(fused)
    c = (b * 3 + 1).reshape(9)  # a new stream (a view follows), holding the same group
    c.numpy()
    s = ember_fusion.stats(fused)
    assert s.plan_misses == 1
    assert s.kernels_compiled == 0 and s.kernel_cache_hits == 1
    assert c.tolist() == [7.0] * 9


def test_fusion_log_reports_groups(fused: ember.Device, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="ember_fusion"):
        (ember.ones(4, device=fused) * 2 + 1).numpy()
    assert any("1 kernel(s)" in r.getMessage() and "mul+add" in r.getMessage()
               for r in caplog.records)


def test_a_tensor_pending_on_another_thread_is_computed(fused: ember.Device) -> None:
    made: list[ember.Tensor] = []

    def produce() -> None:
        made.append(ember.arange(4.0, device=fused) * 3)

    t = threading.Thread(target=produce)
    t.start()
    t.join()
    y = made[0] + 1  # recorded on this thread, input pending on the other one's stream
    assert y.tolist() == [1.0, 4.0, 7.0, 10.0]


def test_fusion_of_a_decorated_device_is_refused() -> None:
    with pytest.raises(ValueError, match=r"autodiff<fusion<cpu>>"):
        ember.device("fusion<autodiff<cpu>>")


def test_unknown_compiler_option_is_an_error() -> None:
    with pytest.raises(TypeError):
        ember.device("fusion<cpu,colour=3>")


def test_int_and_bool_programs_match_cpu(blocked: ember.Device) -> None:
    a = np.arange(-40, 40, dtype=np.int64).reshape(20, 4)
    out = []
    for dev in ("cpu", blocked):
        x = ember.tensor(a, device=dev)
        y = ((x * 3) // 7 + (x % 5)).maximum(x > 2)
        out.append((y.numpy(), ember.logical_and(x > 0, x < 9).sum(dim=0).numpy()))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])


def test_low_precision_blocks_match_cpu(blocked: ember.Device, rng: np.random.Generator) -> None:
    a = rng.standard_normal((20, 6)).astype(np.float16)
    res = []
    for dev in ("cpu", blocked):
        x = ember.tensor(a, device=dev)
        res.append(((x * 2).sigmoid() + x.sum(dim=0, keepdim=True)).numpy())
    np.testing.assert_array_equal(res[0], res[1])


def test_a_long_stream_flushes_itself_and_keeps_held_values(
        fused: ember.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    from ember_fusion import _stream

    monkeypatch.setattr(_stream, "MAX_PENDING", 5)
    x = ember.ones(3, device=fused)
    for _ in range(12):
        x = x * 2
    assert ember_fusion.stats(fused).flushes == 2  # at 5 and 10 pending ops
    assert x.tolist() == [4096.0] * 3


def test_a_failing_kernel_raises_at_the_sync_point_and_after(fused: ember.Device) -> None:
    x = ember.zeros((0, 3), device=fused)
    keep = ember.ones((4, 3), device=fused) * 2  # not empty: recorded, not run at once
    # the max of nothing as the bare primitive (ember.amax refuses it before recording): the
    # cpu kernel raises, at the flush
    bad = apply(red.max, x + 1, dims=(0, 1), keepdim=False)
    with pytest.raises(ValueError):
        bad.numpy()
    with pytest.raises(RuntimeError, match="flush that failed"):
        keep.numpy()
    assert (ember.ones(2, device=fused) * 3).tolist() == [3.0, 3.0]  # the device still works


def test_small_ops_on_computed_inputs_run_eagerly() -> None:
    """By default an op whose inputs are computed and whose tensors fit ``eager`` elements
    (2 blocks) runs at once; bigger ones, and ops on pending values, are recorded."""
    d = ember.device("fusion<cpu,chunk=64,threads=1>")
    assert d.backend.eager_below == 128
    d.synchronize()
    ember_fusion.reset_stats(d)
    small = ember.ones(128, device=d)
    y = (small * 2).reshape(2, 64)
    assert d.backend.peek(y) is not None  # computed already
    big = ember.ones(129, device=d)
    z = big * 2
    assert d.backend.peek(z) is None  # recorded
    w = (z + 1).sum()
    assert w.item() == 129 * 3.0 and y.sum().item() == 256.0
    off = ember.device("fusion<cpu,eager=0>")
    assert off.backend.peek(ember.ones(4, device=off) * 2) is None


def test_eager_results_are_the_inner_kernels_own_arrays() -> None:
    """An op run eagerly hands out the cpu kernel's array itself: no wrapper, no copy, the
    same layout as on plain cpu."""
    d = ember.device("fusion<cpu,threads=1>")
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = ember.tensor(a, device=d)
    y = (x * 2).permute(1, 0) + 1
    plain = (ember.tensor(a) * 2).permute(1, 0) + 1
    assert type(y.payload) is np.ndarray
    assert y.payload.flags.c_contiguous == plain.payload.flags.c_contiguous
    assert d.backend.unwrap(y).payload is y.payload  # unwrapping copies nothing
    np.testing.assert_array_equal(y.numpy(), plain.numpy())


def test_a_reduction_of_a_big_computed_input_to_a_small_result_runs_eagerly() -> None:
    d = ember.device("fusion<cpu,chunk=64,threads=1>")
    d.synchronize()
    x = ember.ones((100, 10), device=d)  # 1000 elements > eager (128)
    s = x.sum(0)
    assert d.backend.peek(s) is not None
    assert s.tolist() == [100.0] * 10


def test_an_op_a_flush_ran_alone_runs_eagerly_next_time() -> None:
    d = ember.device("fusion<cpu,chunk=64,threads=1>")
    d.synchronize()
    a = ember.ones((20, 30), device=d)
    b = ember.ones((30, 20), device=d)

    def step() -> ember.Tensor:
        c = a @ b  # a 400-element result: recorded, then synced by a non-fusible op
        return c.sort(dim=1)[0]

    first = step()
    assert d.backend.peek(a @ b) is not None  # learnt: it ran as a group of its own
    assert step().tolist() == first.tolist()
    chain = ((a @ b) * 2 + 1).exp()  # a longer group on computed inputs is not affected
    assert d.backend.peek(chain) is None


def test_a_chain_on_a_big_held_input_is_one_kernel() -> None:
    """Pending ops keep a big input alive that its tensor holds anyway: no early flush."""
    d = ember.device("fusion<cpu,threads=1>")
    x = ember.ones(2**22, device=d)  # 16 MiB
    d.synchronize()
    ember_fusion.reset_stats(d)
    y = (((x * 1.5 + 0.25).relu() * 0.5 - 1).sigmoid() * x).sum()
    assert y.item() > 0
    assert ember_fusion.stats(d).flushes == 1


def test_dropped_big_inputs_of_pending_ops_flush_the_stream() -> None:
    """Computed tensors that only pending ops still hold are bounded (MAX_EXTERNAL_BYTES)."""
    d = ember.device("fusion<cpu,threads=1>")
    acc = ember.zeros(2**20, device=d) * 1  # pending
    d.synchronize()
    ember_fusion.reset_stats(d)
    for i in range(12):
        acc = acc + ember.full((2**20,), float(i), device=d)  # 4 MiB each, dropped at once
    assert ember_fusion.stats(d).flushes >= 4
    assert acc.numpy()[0] == sum(range(12))


def test_ops_on_values_a_flush_computed_decide_as_on_eager_values() -> None:
    d = ember.device("fusion<cpu,chunk=64,threads=1>")
    d.synchronize()
    y = ember.ones(200, device=d) * 3  # recorded: its payload is a handle
    z = ember.zeros(200, device=d)
    set_payload(z, y.payload)  # z shares y's handle, as a parameter rebound to an update does
    assert z.tolist()[0] == 3.0  # flushed: computed, z still holds the handle
    small = z[:10] + 1  # a view and a small op on it: eager, on z's array
    assert d.backend.peek(small) is not None
    assert type(small.payload) is np.ndarray
    big = z * 2 + y  # big: recorded, z and y read as one external input
    assert d.backend.peek(big) is None
    assert big.tolist() == [9.0] * 200 and small.tolist() == [4.0] * 10


def test_a_flush_gives_the_recording_tensor_its_computed_payload(fused: ember.Device) -> None:
    x = ember.ones(4, device=fused)
    y = x * 5
    p = ember.zeros(4, device=fused)
    set_payload(p, y.payload)  # shares y's handle (nn._values.rebind)
    assert fused.backend.peek(y) is None
    assert y.tolist() == [5.0] * 4
    # y now holds the inner array itself, as an eagerly computed tensor does; p reads the
    # very same array through the handle
    assert type(y.payload) is np.ndarray
    shared = fused.backend.peek(p)
    assert shared is not None and shared.payload is y.payload
    assert (p + y * 2).tolist() == [15.0] * 4
