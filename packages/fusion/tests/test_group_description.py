"""The description every fusion compiler renders (`ember.backend.FusedGroup`): the facts it
derives from a group, the group after its matmul head, and the op-by-op runner."""

from __future__ import annotations

import ember
import numpy as np
from ember import ops
from ember.backend import FusedGroup, GroupNode, op_by_op
from ember_cpu.backend import KERNELS

F32 = ember.float32


def _head_group() -> FusedGroup:
    # h = x @ w ; r = exp(h + b) ; m = r.mean(0) (a cross node) ; out: h, r, m
    nodes = (
        GroupNode(ops.linalg.matmul, {}, (), F32, (6, 3), (-1, -2)),
        GroupNode(ops.add, {}, (), F32, (6, 3), (0, -3)),
        GroupNode(ops.exp, {}, (), F32, (6, 3), (1,)),
        GroupNode(ops.mean, {"dims": (0,), "keepdim": False}, ((0,), False), F32, (3,), (2,)),
    )
    return FusedGroup(nodes=nodes, inputs=(((6, 4), F32), ((4, 3), F32), ((3,), F32)),
                      outputs=(0, 2, 3), mode="rows", rows=6, cross=frozenset({3}))


def test_description_derives_what_renderers_read() -> None:
    g = _head_group()
    assert g.head and not g.flat
    assert [n.kind for n in g.nodes] == ["matmul", "elementwise", "elementwise", "reduction"]
    assert g.shape(-3) == (3,) and g.shape(2) == (6, 3) and g.dtype(-1) is F32
    assert g.numpy_dtype(0) == np.float32 and g.arg_dtypes(1) == [np.float32] * 2
    assert g.used_inputs == {0, 1, 2}
    assert g.slots == {0: 0, 2: 1, 3: 2}
    assert g.last_use == (1, 2, 3, -1)
    assert g.reduced_dims(3) == (0,) and g.reduced_count(3) == 6 and g.kept_count(3) == 3


def test_without_head_makes_the_heads_value_the_last_input() -> None:
    rest = _head_group().without_head()
    assert rest.inputs[-1] == ((6, 3), F32) and not rest.head
    assert [n.args for n in rest.nodes] == [(-4, -3), (0,), (1,)]
    assert rest.outputs == (1, 2) and rest.cross == frozenset({2})
    assert rest.used_inputs == {2, 3}  # x and w fed only the head


def test_op_by_op_runs_each_node_with_the_backends_kernel() -> None:
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((6, 4), (4, 3), (3,)))
    h, r, m = op_by_op(_head_group(), KERNELS)([x, w, b])
    np.testing.assert_allclose(h, x @ w, rtol=1e-6)
    np.testing.assert_allclose(r, np.exp(x @ w + b), rtol=1e-6)
    np.testing.assert_allclose(m, np.exp(x @ w + b).mean(0), rtol=1e-6)
