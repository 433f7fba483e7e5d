"""The compiler interface: a hand-built `FusedGroup` through both compilers."""

from __future__ import annotations

import ember
import numpy as np
import pytest
from ember import ops
from ember_cpu.fusion import CpuFusionCompiler

from ember_fusion import FusedGroup, GroupNode, ReferenceCompiler


def _group() -> FusedGroup:
    f64 = ember.float64
    # y = exp(x0 * x1) ; s = sum(y, dim=1, keepdim=True) ; out = y / s
    nodes = (
        GroupNode(ops.mul, {}, (), f64, (9, 4), (-1, -2)),
        GroupNode(ops.exp, {}, (), f64, (9, 4), (0,)),
        GroupNode(ops.sum, {"dims": (1,), "keepdim": True}, ((1,), True), f64, (9, 1), (1,)),
        GroupNode(ops.div, {}, (), f64, (9, 4), (1, 2)),
    )
    return FusedGroup(nodes=nodes, inputs=(((9, 4), f64), ((), f64)), outputs=(3, 2),
                      mode="rows", rows=9, cross=frozenset())


@pytest.mark.parametrize("compiler", [
    ReferenceCompiler(ember.device("cpu")),
    CpuFusionCompiler(),
    CpuFusionCompiler(chunk=8, threads=2),  # 2 rows a block: the blocked path
], ids=["reference", "cpu", "cpu-blocked"])
def test_compilers_compute_a_group_like_numpy(compiler: object) -> None:
    x = np.random.default_rng(3).standard_normal((9, 4))
    c = np.asarray(0.5)
    kernel = compiler.compile(_group())  # type: ignore[attr-defined]  # a FusionCompiler
    out, s = kernel([x, c])
    e = np.exp(x * 0.5)
    np.testing.assert_allclose(s, e.sum(axis=1, keepdims=True), rtol=1e-13)
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-13)


def test_cpu_compiler_writes_intermediates_to_block_buffers_only() -> None:
    kernel = CpuFusionCompiler(chunk=8).compile(_group())
    src: str = kernel.source  # type: ignore[attr-defined]  # the blocked kernel keeps its source
    assert "np.multiply(" in src and "out=" in src
    assert src.count("np.empty") == 0  # buffers come from the caller, one block each


def test_cpu_blocked_path_frees_a_buffer_read_twice_once() -> None:
    # v1 = v0 - v0 frees v0's block buffer; freeing it twice handed it to v1 and v2 both
    f32 = ember.float32
    nodes = (
        GroupNode(ops.neg, {}, (), f32, (9, 4), (-1,)),
        GroupNode(ops.sub, {}, (), f32, (9, 4), (0, 0)),
        GroupNode(ops.mul, {}, (), f32, (9, 4), (-1, -1)),
        GroupNode(ops.add, {}, (), f32, (9, 4), (1, 2)),
    )
    group = FusedGroup(nodes=nodes, inputs=(((9, 4), f32),), outputs=(3,), mode="rows", rows=9,
                       cross=frozenset())
    x = np.random.default_rng(5).standard_normal((9, 4)).astype(np.float32)
    (out,) = CpuFusionCompiler(chunk=8).compile(group)([x])
    np.testing.assert_array_equal(out, x * x)
