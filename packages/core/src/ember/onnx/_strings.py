"""String operators: StringNormalizer, StringSplit, StringConcat, RegexFullMatch (and Equal
on strings, through its numpy host rule).

ember has no string dtype: a STRING value stays a numpy object array on the host, which these
operators compute on with Python's ``str`` and ``re`` (RE2 patterns that Python's ``re`` reads
the same way; the ONNX reference does the same).  `ember.onnx.load`'s module takes and returns
such values as numpy arrays; they never reach a device.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ._registry import Node, Run, op

STRING = 8


def _strings(node: Node, x: Any, what: str = "input") -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "OUS":
        raise TypeError(f"{node.where()}: {what} of dtype {a.dtype}; strings expected")
    return a.astype(object)


def _normalizer_host(node: Node, x: np.ndarray) -> np.ndarray:
    """As the operator's definition and onnxruntime: elements equal to a stopword (compared
    ignoring case unless is_case_sensitive) are removed, the others change case; an input
    left empty gives one empty string.  (onnx's reference evaluator also strips accents and
    removes stopwords inside strings, which the definition does not say.)"""
    at = node.attrs
    case = at.get("case_change_action", "NONE")
    if case not in ("LOWER", "UPPER", "NONE"):
        raise ValueError(f"{node.where()}: case_change_action must be LOWER, UPPER or NONE, "
                         f"got {case!r}")
    sensitive = bool(at.get("is_case_sensitive", 0))
    stops = set(at.get("stopwords", []))
    if not sensitive:
        stops = {w.lower() for w in stops}
    a = _strings(node, x)
    if (a.ndim == 2 and a.shape[0] != 1) or a.ndim not in (1, 2):
        raise ValueError(f"{node.where()}: input of shape {a.shape} is not [C] or [1, C]")
    kept = []
    for v in a.reshape(-1).tolist():
        s = str(v)
        if (s if sensitive else s.lower()) in stops:
            continue
        kept.append(s.lower() if case == "LOWER" else s.upper() if case == "UPPER" else s)
    out = np.array(kept or [""], dtype=object)
    return out if a.ndim == 1 else out.reshape(1, -1)


def _split_host(node: Node, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = _strings(node, x)
    sep = node.attrs.get("delimiter") or None
    maxsplit = node.attrs.get("maxsplit")
    limit = -1 if maxsplit is None else int(maxsplit)
    parts = [str(s).split(sep, limit) for s in a.reshape(-1).tolist()]
    width = max((len(p) for p in parts), default=0)
    y = np.array([p + [""] * (width - len(p)) for p in parts], dtype=object)
    y = y.reshape(*a.shape, width)
    counts = np.array([len(p) for p in parts], np.int64).reshape(a.shape)
    return y, counts


def _concat_host(node: Node, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    a, b = _strings(node, x, "X"), _strings(node, y, "Y")
    return np.asarray(np.vectorize(lambda p, q: str(p) + str(q), otypes=[object])(a, b))


def _regex_host(node: Node, x: np.ndarray) -> np.ndarray:
    pattern = node.attrs.get("pattern", "")
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{node.where()}: pattern {pattern!r} does not compile: {exc}") from None
    a = _strings(node, x)
    return np.vectorize(lambda s: rx.fullmatch(str(s)) is not None, otypes=[np.bool_])(a) \
        if a.size else np.zeros(a.shape, bool)


def _host_only(fn: Any) -> Any:
    def device(r: Run, node: Node, *xs: Any) -> Any:
        return fn(node, *[r.host(v) for v in xs])
    return device


for _name, _fn, _note in (
        ("StringNormalizer", _normalizer_host, "case change, stopword elements removed "
         "(case-sensitive or not); locale not consulted (Python's Unicode case rules)"),
        ("StringSplit", _split_host, "delimiter (whitespace runs when empty), maxsplit"),
        ("StringConcat", _concat_host, "broadcasting"),
        ("RegexFullMatch", _regex_host, "Python's re on the pattern")):
    op(_name, host=_fn, note=f"on the host: {_note}")(_host_only(_fn))
