"""Operators of the ``ai.onnx.ml`` domain (Binarizer, ArrayFeatureExtractor, LabelEncoder) and
of ``ai.onnx.preview.training`` (the optimizer steps Adagrad, Adam, Momentum), as composites
of ember ops or, for LabelEncoder's lookups of strings and numbers, on the host.

``DOMAIN_OPS`` names the operators the loader accepts from each extra domain (with
``ai.onnx.preview``'s from `_preview`); any other one is refused naming its domain.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember as E
from ember import Tensor

from ._preview import PREVIEW, PREVIEW_DOMAIN
from ._registry import Node, Run, op

ML, TRAINING = "ai.onnx.ml", "ai.onnx.preview.training"
DOMAIN_OPS: dict[str, frozenset[str]] = {
    PREVIEW_DOMAIN: PREVIEW,
    ML: frozenset({"Binarizer", "ArrayFeatureExtractor", "LabelEncoder", "TreeEnsemble"}),
    TRAINING: frozenset({"Adagrad", "Adam", "Momentum"}),
}


# -- ai.onnx.ml ----------------------------------------------------------------------------------

@op("Binarizer", note="domain ai.onnx.ml: 1 above threshold, else 0, in the input's dtype")
def binarizer(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return (t > float(node.attrs.get("threshold", 0.0))).to(t.dtype)


@op("ArrayFeatureExtractor", note="domain ai.onnx.ml: columns of the last axis (a vector "
    "gives one row, as onnxruntime)")
def array_feature_extractor(r: Run, node: Node, x: Any, indices: Any) -> Tensor:
    t = r.tensor(x)
    idx = r.tensor(indices).reshape(-1).to(E.int64)
    n = t.shape[-1]
    if idx.numel():
        lo, hi = int(E.amin(idx).item()), int(E.amax(idx).item())
        if lo < 0 or hi >= n:
            raise IndexError(f"{node.where()}: index {hi if hi >= n else lo} is outside the "
                             f"last axis of size {n}")
    y = E.index_select(t, t.ndim - 1, idx)
    return y.reshape(1, idx.numel()) if t.ndim == 1 else y


_LABEL_KINDS = ("floats", "int64s", "strings", "tensor")


def _label_host(node: Node, x: np.ndarray) -> np.ndarray:
    at = node.attrs
    keys = next((at[f"keys_{k}"] for k in _LABEL_KINDS if f"keys_{k}" in at), None)
    kind = next((k for k in _LABEL_KINDS if f"values_{k}" in at), None)
    if keys is None or kind is None:
        raise ValueError(f"{node.where()}: one keys_* and one values_* attribute are needed")
    values = at[f"values_{kind}"]
    keys = list(np.asarray(keys).reshape(-1).tolist())
    values = list(np.asarray(values).reshape(-1).tolist())
    if len(keys) != len(values):
        raise ValueError(f"{node.where()}: {len(keys)} keys for {len(values)} values")
    table = dict(zip(keys, values, strict=True))
    if kind == "tensor":
        vt = np.asarray(at["values_tensor"])
        dtype: Any = object if vt.dtype.kind in "OUS" else vt.dtype
        default = np.asarray(at["default_tensor"]).reshape(-1)[0] if "default_tensor" in at \
            else ("_Unused" if dtype is object else -1 if vt.dtype.kind in "iu" else -0.0)
    elif kind == "strings":
        dtype, default = object, at.get("default_string", "_Unused")
    elif kind == "int64s":
        dtype, default = np.int64, at.get("default_int64", -1)
    else:
        dtype, default = np.float32, at.get("default_float", -0.0)
    a = np.asarray(x)
    if isinstance(default, bytes):
        default = default.decode()
    flat = [table.get(v.decode() if isinstance(v, bytes) else v, default)
            for v in a.reshape(-1).tolist()]
    return np.array(flat, dtype=dtype).reshape(a.shape)


@op("LabelEncoder", host=_label_host, note="domain ai.onnx.ml: keys and values as lists or "
    "tensors (strings, int64, float), defaults; on the host")
def label_encoder(r: Run, node: Node, x: Any) -> Any:
    out = _label_host(node, r.host(x))
    return out if out.dtype == object else r.tensor(out)


# -- ai.onnx.preview.training: one optimizer step per (X, G, state) group -------------------------

def _groups(node: Node, xs: tuple[Any, ...], per: int) -> list[list[Any]]:
    if len(xs) < 2 + per or (len(xs) - 2) % per:
        raise ValueError(f"{node.where()}: {len(xs)} inputs are not R, T and groups of {per}")
    n = (len(xs) - 2) // per
    return [[xs[2 + j * n + i] for j in range(per)] for i in range(n)]


def _scalar(r: Run, v: Any) -> float:
    return float(r.host(v).reshape(-1)[0])


@op("Adagrad", host_inputs=(0, 1), note="domain ai.onnx.preview.training: decay_factor, "
    "epsilon, norm_coefficient; any number of tensors")
def adagrad(r: Run, node: Node, *xs: Any) -> tuple[Tensor, ...]:
    at = node.attrs
    lr, t = _scalar(r, xs[0]), _scalar(r, xs[1])
    decay, eps = float(at.get("decay_factor", 0.0)), float(at.get("epsilon", 0.0))
    norm = float(at.get("norm_coefficient", 0.0))
    rate = lr / (1 + t * decay)
    new_x, new_h = [], []
    for x, g, h in _groups(node, xs, 3):
        tx, tg, th = r.tensor(x), r.tensor(g), r.tensor(h)
        gr = tx * norm + tg
        h2 = th + gr * gr
        new_x.append((tx - gr * rate / (E.sqrt(h2) + eps)).to(tx.dtype))
        new_h.append(h2.to(th.dtype))
    return (*new_x, *new_h)


@op("Adam", host_inputs=(0, 1), note="domain ai.onnx.preview.training: alpha, beta, epsilon, "
    "norm_coefficient(_post), bias correction from T; any number of tensors")
def adam(r: Run, node: Node, *xs: Any) -> tuple[Tensor, ...]:
    at = node.attrs
    lr, t = _scalar(r, xs[0]), _scalar(r, xs[1])
    alpha, beta = float(at.get("alpha", 0.9)), float(at.get("beta", 0.999))
    eps = float(at.get("epsilon", 0.0))
    norm, post = float(at.get("norm_coefficient", 0.0)), float(at.get("norm_coefficient_post",
                                                                      0.0))
    rate = lr * np.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else lr
    outs: list[list[Tensor]] = [[], [], []]
    for x, g, v, h in _groups(node, xs, 4):
        tx, tg, tv, th = (r.tensor(a) for a in (x, g, v, h))
        gr = tx * norm + tg
        v2 = tv * alpha + gr * (1 - alpha)
        h2 = th * beta + gr * gr * (1 - beta)
        x2 = (tx - (v2 / (E.sqrt(h2) + eps)) * float(rate)) * (1 - post)
        outs[0].append(x2.to(tx.dtype))
        outs[1].append(v2.to(tv.dtype))
        outs[2].append(h2.to(th.dtype))
    return (*outs[0], *outs[1], *outs[2])


@op("Momentum", host_inputs=(0, 1), note="domain ai.onnx.preview.training: standard and "
    "nesterov modes, alpha, beta, norm_coefficient; any number of tensors")
def momentum(r: Run, node: Node, *xs: Any) -> tuple[Tensor, ...]:
    at = node.attrs
    lr, t = _scalar(r, xs[0]), _scalar(r, xs[1])
    alpha, beta = float(at["alpha"]), float(at["beta"])
    norm = float(at["norm_coefficient"])
    mode = at.get("mode", "standard")
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"{node.where()}: mode must be standard or nesterov, got {mode!r}")
    b = beta if t > 0 else 1.0
    new_x, new_v = [], []
    for x, g, v in _groups(node, xs, 3):
        tx, tg, tv = r.tensor(x), r.tensor(g), r.tensor(v)
        gr = tx * norm + tg
        v2 = tv * alpha + gr * b
        step = v2 if mode == "standard" else gr + v2 * alpha
        new_x.append((tx - step * lr).to(tx.dtype))
        new_v.append(v2.to(tv.dtype))
    return (*new_x, *new_v)


# -- TreeEnsemble (ai.onnx.ml 5) -----------------------------------------------------------------

def _tree_host(node: Node, x: np.ndarray) -> np.ndarray:
    at = node.attrs

    def arr(name: str) -> list[Any]:
        v = at.get(name)
        return [] if v is None else np.asarray(v).reshape(-1).tolist()

    if int(at.get("post_transform", 0)) != 0:
        raise NotImplementedError(f"{node.where()}: post_transform "
                                  f"{at['post_transform']} is not supported (0, none)")
    agg = int(at.get("aggregate_function", 1))
    if agg not in (0, 1, 2, 3):
        raise ValueError(f"{node.where()}: aggregate_function {agg} is not 0-3")
    splits, feats, modes = arr("nodes_splits"), arr("nodes_featureids"), arr("nodes_modes")
    tnode, fnode = arr("nodes_truenodeids"), arr("nodes_falsenodeids")
    tleaf, fleaf = arr("nodes_trueleafs"), arr("nodes_falseleafs")
    ltarget, lweight = arr("leaf_targetids"), arr("leaf_weights")
    roots, missing = arr("tree_roots"), arr("nodes_missing_value_tracks_true")
    members = iter(arr("membership_values"))
    n_targets = int(at["n_targets"])
    sets: dict[int, set[float]] = {}
    for i, m in enumerate(modes):  # MEMBER nodes take the NaN-separated runs, in order
        if m == 6:
            group: set[float] = set()
            for v in members:
                if np.isnan(v):
                    break
                group.add(v)
            sets[i] = group
    a = np.asarray(x)
    if a.ndim != 2:
        raise ValueError(f"{node.where()}: input of shape {a.shape} is not [N, features]")

    def goes_true(i: int, v: float) -> bool:
        if np.isnan(v) and missing and missing[i]:
            return True
        m, s = modes[i], splits[i]
        return bool({0: v <= s, 1: v < s, 2: v >= s, 3: v > s, 4: v == s, 5: v != s,
                     6: v in sets.get(i, set())}[m])

    def leaf_of(root: int, row: np.ndarray) -> int:
        if tleaf[root] and fleaf[root] and tnode[root] == fnode[root]:
            return root
        i = root
        for _ in range(len(modes) + 1):
            t = goes_true(i, float(row[feats[i]]))
            nxt, is_leaf = (tnode[i], tleaf[i]) if t else (fnode[i], fleaf[i])
            if is_leaf:
                return int(nxt)
            i = int(nxt)
        raise ValueError(f"{node.where()}: a tree loops (node {root})")

    dtype = a.dtype if a.dtype.kind == "f" else np.float32
    start = {0: 0.0, 1: 0.0, 2: np.finfo(dtype).max, 3: np.finfo(dtype).min}[agg]
    out = np.full((a.shape[0], n_targets), start, dtype=dtype)
    for b, row in enumerate(a):
        for root in roots:
            leaf = leaf_of(int(root), row)
            t, w = int(ltarget[leaf]), lweight[leaf]
            if agg == 1:
                out[b, t] += w
            elif agg == 0:
                out[b, t] += w / len(roots)
            elif agg == 2:
                out[b, t] = min(out[b, t], w)
            else:
                out[b, t] = max(out[b, t], w)
    return out


@op("TreeEnsemble", host=_tree_host, note="domain ai.onnx.ml 5: every node mode (set "
    "membership too), missing values, SUM/AVERAGE/MIN/MAX; post_transform none; on the host")
def tree_ensemble(r: Run, node: Node, x: Any) -> Any:
    return r.tensor(_tree_host(node, r.host(x)))
