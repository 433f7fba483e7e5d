"""The WebGPU backend (``wgpu:0``) side by side with PyTorch, in one process: matmul float32
(TF32 off on both sides) and float16, a 3x3 convolution (implicit GEMM and im2col, against
cuDNN with TF32 off) in float32 and float16, elementwise bandwidth against a device copy, a
fused chain, a row softmax and an RMS norm under ``fusion<wgpu:0>``, the host cost of a small
op, and the guide's training epoch on ``autodiff<wgpu:0>``.

    python benchmarks/gpu/wgpu_bench.py [--quick] [--device wgpu:0] [--no-torch] [--rounds 5]
                                        [--json PATH]

Timing.  ember and its peer take turns round by round (`_rounds.interleaved`), each keeping
its best round.  A round is ``reps`` calls and one wait for the device: ``device.synchronize()``
(a 4-byte read through the backend's staging buffer, which waits for every submission) on
ember's side, ``torch.cuda.synchronize()`` on torch's.  The wait's own cost, measured with
nothing queued (``sync_ms`` in the results), is taken off ember's rounds before dividing by
``reps``, so a slow map does not count as kernel time; ``reps`` is raised
(`Bench.enough_reps`) until a round's work is at least 10 times that wait.  Every GPU figure
is checked against numpy float64 on a slice.

PyTorch is the peer on CUDA where it has a GPU, on the CPU otherwise (said in the table);
``--no-torch`` leaves it out (the ratio columns are then empty), which is how it runs on a
machine whose adapter is software Vulkan (lavapipe): ``--quick --no-torch``.  The guide epoch
is also run on ``autodiff<cpu>``.  Needs no install: when ``import ember`` fails, the script
runs itself again with this checkout's packages on the path (``check.workspace_env``).
Prints a table at the end and a ``RESULT {...}`` JSON line; exit status 1 when a result is
wrong.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from _rounds import interleaved  # noqa: E402  (the helpers beside this script)

Fn = Callable[[], Any]


class Bench:
    """The devices, the peer and the timing rule shared by every section."""

    def __init__(self, args: argparse.Namespace) -> None:
        import ember

        self.ember = ember
        self.quick = args.quick
        self.rounds = args.rounds if args.rounds else (2 if args.quick else 5)
        self.name = args.device
        self.dev = ember.device(args.device)
        self.rt = self.dev._backend.runtime  # the wgpu Runtime: adapter, dispatch counter
        self.torch: Any = None
        self.tdev = "none"
        if not args.no_torch and importlib.util.find_spec("torch") is not None:
            import torch

            self.torch = torch
            self.tdev = "cuda" if torch.cuda.is_available() else "cpu"
            if self.tdev == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
            else:
                torch.set_num_threads(1)  # FACTS: shared cores, torch compared at one thread
        self.sync_ms = self.measure_sync()
        self.results: dict[str, Any] = {
            "device": self.name, "adapter": self.rt.name,
            "adapter_features": sorted(str(f) for f in self.rt.adapter.features),
            "torch": f"{self.torch.__version__} on {self.tdev}" if self.torch else "none",
            "sync_ms": round(self.sync_ms, 4), "quick": self.quick, "rounds": self.rounds}
        self.rows: list[tuple[str, str, str, str, str]] = []
        self.errors: list[str] = []

    def tsync(self) -> None:
        if self.tdev == "cuda":
            self.torch.cuda.synchronize()

    def measure_sync(self) -> float:
        """Milliseconds of ``synchronize()`` with nothing queued (median of 15)."""
        self.dev.synchronize()
        ts = []
        for _ in range(15):
            t = time.perf_counter()
            self.dev.synchronize()
            ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts)

    def time(self, ours: dict[str, Fn], peer: dict[str, Fn], reps: int,
             syncs: dict[str, Fn] | None = None) -> dict[str, float]:
        """Best milliseconds per call of each function, interleaved; ember's rounds less the
        cost of its wait (see the module docstring)."""
        fns = {**ours, **peer}
        sy: dict[str, Fn] = {k: self.dev.synchronize for k in ours}
        sy.update({k: self.tsync for k in peer})
        if syncs:
            sy.update(syncs)
        reps = self.enough_reps(ours, reps)
        times = interleaved(fns, sy, self.rounds, reps)
        out = {}
        for k, ts in times.items():
            best = min(ts)
            if k in ours:
                best = max(best - self.sync_ms / reps, 1e-6)
            out[k] = best
        return out

    def enough_reps(self, ours: dict[str, Fn], reps: int) -> int:
        """``reps``, raised (up to 20 times) until a round of ember's quickest function does
        at least 10 times the work of the wait that ends it, so the wait's jitter is small
        beside what is timed."""
        if not ours or self.sync_ms <= 0:
            return reps
        quickest = math.inf
        for fn in ours.values():
            fn()
            self.dev.synchronize()
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            self.dev.synchronize()
            quickest = min(quickest, ((time.perf_counter() - t) * 1e3 - self.sync_ms) / reps)
        need = math.ceil(10 * self.sync_ms / max(quickest, 1e-3))
        return int(min(max(reps, need), 20 * reps))

    def row(self, what: str, ours: str, peer: str, ratio: str, note: str = "") -> None:
        self.rows.append((what, ours, peer, ratio, note))
        print(f"    | {what} | {ours} | {peer} | {ratio} | {note} |", flush=True)  # as it comes

    def check(self, name: str, got: np.ndarray, want: np.ndarray, rtol: float,
              atol: float) -> None:
        err = float(np.max(np.abs(got.astype(np.float64) - want) / (atol + rtol * np.abs(want))))
        self.results[f"{name}_error_in_tolerances"] = round(err, 3)
        if not err <= 1:
            self.errors.append(f"{name}: {err:.2f} tolerances off numpy float64")


def _ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as the table's ratio (callers pass speeds, or peer time over ember's: the
    column is always ember's speed over torch's)."""
    return f"{a / b:.3g}x" if a and b else ""


def _g(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


# -- matmul ---------------------------------------------------------------------------------

def matmul_paths(b: Bench, n: int, dtype: str) -> tuple[str, list[str]]:
    """The kernel ``wgpu:N`` chooses for an n x n x n matmul of ``dtype``, and every kernel
    it could run instead (``ember_wgpu.linalg.path``, ``linalg.prefer``)."""
    from ember_wgpu import coopmat, linalg

    chosen = linalg.path(b.rt, n, n, n, np.dtype(dtype))
    coop = False
    if dtype == "float16":  # cooperative matrices where they fit and the self-check passed
        probe = b.rt.empty((n, n), np.dtype(dtype))
        coop = coopmat.eligible(probe, probe, ()) and coopmat.usable(b.rt)
        b.results["cooperative_matrix"] = b.rt.coop_status
        if coop:
            chosen = "coop"
    others = [p for p in linalg.PATHS
              if p != chosen and p != "simple" and (p != "coop" or coop)]
    return chosen, others


def bench_matmul(b: Bench, dtype: str) -> None:
    from ember_wgpu import linalg

    ember = b.ember
    n = 512 if b.quick else 4096
    key = f"matmul_{dtype}_{n}"
    edt = getattr(ember, dtype)
    if not b.dev.supports(edt):
        b.results[key] = f"skipped: {b.name} does not support {dtype}"
        b.row(f"matmul {n}^3 {dtype}", "unsupported", "", "")
        return
    rng = np.random.default_rng(0)
    a_h = rng.standard_normal((n, n)).astype(dtype)
    b_h = rng.standard_normal((n, n)).astype(dtype)
    x, y = ember.tensor(a_h, device=b.dev), ember.tensor(b_h, device=b.dev)
    chosen, others = matmul_paths(b, n, dtype)
    held: dict[str, Any] = {}

    def on(path: str | None) -> Fn:
        name = path or chosen

        def run() -> None:
            held[name] = None  # the previous product's buffer goes back to the pool first
            linalg.prefer = path
            try:
                held[name] = x @ y
            finally:
                linalg.prefer = None

        return run

    ours = {chosen: on(None), **{p: on(p) for p in others}}
    peer: dict[str, Fn] = {}
    if b.torch is not None:
        torch = b.torch
        tdt = getattr(torch, dtype)
        if b.tdev == "cpu" and dtype == "float16":
            tdt = None  # CPU half matmul is no peer for a GPU kernel
        if tdt is not None:
            ta = torch.from_numpy(a_h).to(b.tdev)
            tb = torch.from_numpy(b_h).to(b.tdev)
            peer["torch"] = lambda: torch.matmul(ta, tb)
    flops = 2.0 * n ** 3
    reps = 3 if b.quick else 10
    t = b.time(ours, peer, reps)
    want = a_h[:64].astype(np.float64) @ b_h.astype(np.float64)
    tol = (1e-4, 1e-3) if dtype == "float32" else (2e-2, 0.25)
    peer_tf = flops / t["torch"] / 1e9 if "torch" in t else None
    res: dict[str, Any] = {"path": chosen}
    if peer_tf:
        res.update(torch_TFLOPs=round(peer_tf, 3), torch_ms=round(t["torch"], 3))
    for p in ours:
        b.check(f"{key}_{p}", held[p][:64].numpy(), want, *tol)
        tf = flops / t[p] / 1e9
        res[p] = {"TFLOPs": round(tf, 3), "ms": round(t[p], 3)}
        if peer_tf:
            res[p]["ratio"] = round(tf / peer_tf, 3)
        goal = " (goal 0.4)" if dtype == "float32" else ""
        note = (f"torch {'TF32 off' if dtype == 'float32' else 'cuBLAS'}{goal}" if peer_tf
                else "")
        what = f"matmul {n}^3 {dtype}, {p}" + (" (chosen)" if p == chosen else "")
        b.row(what, f"{_g(tf)} TFLOP/s", f"{_g(peer_tf)} TFLOP/s" if peer_tf else "",
              _ratio(tf, peer_tf), note if p == chosen else "")
    b.results[key] = res


# -- conv -----------------------------------------------------------------------------------

def _conv3x3_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A 3x3 conv of one ``[C, H, W]`` image, padding 1, in float64: nine matrix products."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    return sum(np.einsum("oc,chw->ohw", w[:, :, ky, kx], xp[:, ky:ky + h, kx:kx + wd])
               for ky in range(3) for kx in range(3))


def bench_conv(b: Bench, dtype: str) -> None:
    """A ResNet-like 3x3 conv (stride 1, padding 1): the implicit-GEMM kernel the shape takes
    and the im2col fallback (``ember_wgpu.conv.prefer``), against torch's conv2d (cuDNN, TF32
    off); checked on the first image's first 16 output channels."""
    from ember_wgpu import conv

    ember = b.ember
    n, c, hw = (4, 64, 16) if b.quick else (32, 128, 56)
    key = f"conv3x3_{dtype}_{n}x{c}x{hw}x{hw}"
    edt = getattr(ember, dtype)
    if not b.dev.supports(edt):
        b.results[key] = f"skipped: {b.name} does not support {dtype}"
        b.row(f"conv 3x3 {n}x{c}x{hw}^2 {dtype}", "unsupported", "", "")
        return
    rng = np.random.default_rng(3)
    x_h = rng.standard_normal((n, c, hw, hw)).astype(dtype)
    w_h = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(dtype)
    x, w = ember.tensor(x_h, device=b.dev), ember.tensor(w_h, device=b.dev)
    chosen = conv.path(b.rt, c, n * hw * hw, c * 9, np.dtype(dtype))
    held: dict[str, Any] = {}

    def on(path: str) -> Fn:
        def run() -> None:
            held[path] = None  # the previous output's buffer goes back to the pool first
            conv.prefer = path
            try:
                held[path] = ember.nn.functional.conv2d(x, w, padding=1)
            finally:
                conv.prefer = None

        return run

    ours = {chosen: on(chosen), "im2col": on("im2col")}
    peer: dict[str, Fn] = {}
    if b.torch is not None and not (b.tdev == "cpu" and dtype == "float16"):
        torch = b.torch
        tx, tw = torch.from_numpy(x_h).to(b.tdev), torch.from_numpy(w_h).to(b.tdev)
        peer["torch"] = lambda: torch.nn.functional.conv2d(tx, tw, padding=1)
    res: dict[str, Any] = {"path": chosen}
    try:
        t = b.time(ours, peer, 2 if b.quick else 10)
    except ember.OutOfMemoryError as exc:  # the im2col matrix may pass the binding limit
        res["im2col"] = f"skipped: {str(exc)[:200]}"
        ours.pop("im2col")
        t = b.time(ours, peer, 2 if b.quick else 10)
    flops = 2.0 * n * c * hw * hw * c * 9
    want = _conv3x3_ref(x_h[0], w_h[:16])
    tol = (1e-4, 1e-4) if dtype == "float32" else (2e-3, 2e-2)
    peer_tf = flops / t["torch"] / 1e9 if "torch" in t else None
    if peer_tf:
        res.update(torch_TFLOPs=round(peer_tf, 3), torch_ms=round(t["torch"], 3))
    for p in ours:
        b.check(f"{key}_{p}", held[p][0, :16].numpy(), want, *tol)
        tf = flops / t[p] / 1e9
        res[p] = {"TFLOPs": round(tf, 4), "ms": round(t[p], 3)}
        if peer_tf:
            res[p]["ratio"] = round(tf / peer_tf, 3)
        note = "torch cuDNN, TF32 off" if peer_tf and b.tdev == "cuda" else ""
        what = f"conv 3x3 {n}x{c}x{hw}^2 {dtype}, {p}" + (" (chosen)" if p == chosen else "")
        b.row(what, f"{_g(tf)} TFLOP/s", f"{_g(peer_tf)} TFLOP/s ({b.tdev})" if peer_tf else "",
              _ratio(tf, peer_tf), note if p == chosen else "")
    b.results[key] = res


# -- bandwidth ------------------------------------------------------------------------------

def chain(v: Any, relu: Callable[[Any], Any], sigmoid: Callable[[Any], Any]) -> Any:
    """The 7-op chain of ``fusion_bandwidth.py``."""
    v = relu(v * 1.5 + 0.25) * 0.5 - 1
    return v * sigmoid(v)


def bench_bandwidth(b: Bench) -> None:
    ember = b.ember
    log2n = 20 if b.quick else 26
    n = 1 << log2n
    rng = np.random.default_rng(1)
    hs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    xa, xb, xc = (ember.tensor(h, device=b.dev) for h in hs)
    rt = b.rt
    held: list[Any] = [None, None]
    reps = 10 if b.quick else 50

    # the copy ceiling: the driver's buffer copy (recorded on the backend's open encoder, so
    # it is timed by the same wait), and the backend's own copy kernel
    dst = rt.empty((n,), np.dtype(np.float32))
    src_arr = xa._data

    def driver_copy() -> None:
        enc = rt._encoder_now()  # private: the benchmark borrows the open command encoder
        rt._end_pass()
        enc.copy_buffer_to_buffer(src_arr.buffer, 0, dst.buffer, 0, 4 * n)

    from ember_wgpu.strided import run_map

    def kernel_copy() -> None:
        held[0] = None
        held[0] = run_map(rt, "a", [src_arr])

    def fma() -> None:
        held[0] = None
        held[0] = xa * xb + xc

    ours = {"driver_copy": driver_copy, "kernel_copy": kernel_copy}
    peer: dict[str, Fn] = {}
    if b.torch is not None:
        torch = b.torch
        ta, tb, tc = (torch.from_numpy(h).to(b.tdev) for h in hs)
        tdst = torch.empty_like(ta)
        peer = {"torch_copy": lambda: tdst.copy_(ta), "torch_fma": lambda: ta * tb + tc}
    # a*b+c is two kernels on wgpu:N (mul, add) and on torch: time it as the user writes it
    t = b.time({**ours, "fma": fma}, peer, reps)
    got = held[0][:4096].numpy()
    b.check("fma", got, hs[0][:4096].astype(np.float64) * hs[1][:4096] + hs[2][:4096],
            1e-6, 1e-6)
    copy = 8 * n / t["driver_copy"] / 1e6
    # the device's copy ceiling: torch's copy_ where it runs on the same GPU (NVIDIA's
    # Vulkan buffer copy ran at 0.29x of it on an H100), else the driver's buffer copy
    tcopy = 8 * n / t["torch_copy"] / 1e6 if b.tdev == "cuda" else None
    res: dict[str, Any] = {"elements": n, "copy_GBps": round(copy, 1),
                           "device_copy_GBps": round(tcopy or copy, 1),
                           "kernel_copy_GBps": round(8 * n / t["kernel_copy"] / 1e6, 1),
                           "fma_GBps": round(16 * n / t["fma"] / 1e6, 1),
                           "fma_bytes_per_element": 16}
    res["fma_fraction_of_copy"] = round(res["fma_GBps"] / copy, 3)
    ceiling = tcopy or copy

    def of_copy(gbps: float) -> str:
        what = "torch's copy_" if tcopy else "the buffer copy"
        return f"{gbps / ceiling:.2f} of {what} (goal 0.8)"

    b.row(f"device copy 2^{log2n} f32 (driver) GB/s", _g(copy),
          _g(8 * n / t['torch_copy'] / 1e6) if "torch_copy" in t else "",
          _ratio(t.get("torch_copy"), t["driver_copy"]))
    b.row("copy kernel GB/s", _g(res['kernel_copy_GBps']), "", "",
          f"{res['kernel_copy_GBps'] / copy:.2f} of a copy")
    b.row(f"a*b+c 2^{log2n} f32 GB/s (16 B/elem, eager)", _g(res['fma_GBps']),
          _g(16 * n / t['torch_fma'] / 1e6) if "torch_fma" in t else "",
          _ratio(t.get("torch_fma"), t["fma"]), f"{res['fma_fraction_of_copy']:.2f} of a copy")

    # the 7-op chain: fusion<dev> (one kernel), eager dev (seven), torch eager; effective
    # bandwidth at 8 bytes per element (read x, write y); fusion computes only what is held
    # across its flush, so the result is held
    fdev = ember.device(f"fusion<{b.name}>")
    xf = xa.to(fdev)
    flush = fdev.backend.stream().flush
    import ember_fusion

    def fused() -> None:
        held[0] = None
        held[0] = chain(xf, lambda v: v.relu(), lambda v: v.sigmoid())
        flush()

    def eager() -> None:
        held[0] = None
        held[0] = chain(xa, lambda v: v.relu(), lambda v: v.sigmoid())

    fa, fb, fc = xa.to(fdev), xb.to(fdev), xc.to(fdev)

    def fused_fma() -> None:
        held[1] = None
        held[1] = fa * fb + fc
        flush()

    peer = {}
    if b.torch is not None:
        tx = b.torch.from_numpy(hs[0]).to(b.tdev)
        peer = {"torch_chain": lambda: chain(tx, b.torch.relu, b.torch.sigmoid)}
    ember_fusion.reset_stats(fdev)
    t2 = b.time({"fused": fused}, {}, reps)
    st = ember_fusion.stats(fdev)
    kernels = st.kernels_launched / max(st.flushes, 1)
    t2.update(b.time({"fused_fma": fused_fma}, {}, reps))
    b.check("fused_fma", held[1][:4096].numpy(),
            hs[0][:4096].astype(np.float64) * hs[1][:4096] + hs[2][:4096], 1e-6, 1e-6)
    t3 = b.time({"eager_chain": eager}, peer, reps)
    y = chain(xf, lambda v: v.relu(), lambda v: v.sigmoid())[:4096].numpy()
    v = np.maximum(hs[0][:4096].astype(np.float64) * 1.5 + 0.25, 0) * 0.5 - 1
    b.check("fused_chain", y, v / (1 + np.exp(-v)), 1e-5, 1e-6)
    fused_gb = 8 * n / t2["fused"] / 1e6
    res.update(fused_chain_GBps=round(fused_gb, 1), fused_kernels_per_run=kernels,
               fused_fraction_of_copy=round(fused_gb / copy, 3),
               eager_chain_GBps=round(8 * n / t3["eager_chain"] / 1e6, 1))
    if "torch_chain" in t3:
        res["torch_chain_GBps"] = round(8 * n / t3["torch_chain"] / 1e6, 1)
    res["fused_fma_GBps"] = round(16 * n / t2["fused_fma"] / 1e6, 1)
    res["fused_fma_fraction_of_copy"] = round(res["fused_fma_GBps"] / copy, 3)
    res["fused_fraction_of_device_copy"] = round(fused_gb / ceiling, 3)
    res["fused_fma_fraction_of_device_copy"] = round(res["fused_fma_GBps"] / ceiling, 3)
    b.results["bandwidth"] = res
    b.row(f"a*b+c fusion<{b.name}> GB/s (one kernel)", _g(res["fused_fma_GBps"]),
          _g(16 * n / t['torch_fma'] / 1e6) if "torch_fma" in t else "",
          _ratio(t.get("torch_fma"), t2["fused_fma"]),
          of_copy(res["fused_fma_GBps"]))
    b.row(f"7-op chain fusion<{b.name}> GB/s (8 B/elem, {kernels:g} kernel/run)",
          _g(fused_gb),
          f"{_g(res['torch_chain_GBps'])} (eager)" if "torch_chain_GBps" in res else "",
          _ratio(fused_gb, res.get("torch_chain_GBps")),
          of_copy(fused_gb))
    b.row(f"7-op chain {b.name} eager GB/s", _g(res['eager_chain_GBps']), "",
          _ratio(res["eager_chain_GBps"], res.get("torch_chain_GBps")))


# -- rows: fused groups with reductions -------------------------------------------------------

def bench_rows(b: Bench) -> None:
    """A row softmax and an RMS norm on ``fusion<dev>`` (one kernel each: each row a
    work-group) against the same ops on ``dev`` eagerly and torch; effective GB/s at 8 bytes
    per element (read x, write y).  Where the adapter offers subgroups, the kernels whose
    trees start with subgroup shuffles (the default) and those with workgroup-memory trees
    only (compiled on a second fusion device, ``fusion<dev,min_nodes=2>``, with
    ``fusion_reduce.SUBGROUPS`` off) are both timed."""
    from ember_wgpu import fusion_reduce

    ember = b.ember
    shape = (256, 1024) if b.quick else (8192, 4096)
    n = shape[0] * shape[1]
    a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    devs = {"fused": ember.device(f"fusion<{b.name}>")}
    if b.rt.subgroups:
        devs["fused_tree"] = ember.device(f"fusion<{b.name},min_nodes=2>")
    xs = {k: ember.tensor(a, device=d) for k, d in devs.items()}
    flushes = {k: d.backend.stream().flush for k, d in devs.items()}
    xe = ember.tensor(a, device=b.dev)
    reps = 5 if b.quick else 20
    held: dict[str, Any] = {}

    def softmax(v: Any) -> Any:
        return v.softmax(-1)

    def rms(v: Any) -> Any:
        return v * ((v * v).mean(-1, keepdim=True) + 1e-6).rsqrt()

    tx = b.torch.from_numpy(a).to(b.tdev) if b.torch is not None else None
    a64 = a[:64].astype(np.float64)
    e = np.exp(a64 - a64.max(-1, keepdims=True))
    wants = {"softmax": e / e.sum(-1, keepdims=True),
             "rms_norm": a64 / np.sqrt((a64 * a64).mean(-1, keepdims=True) + 1e-6)}
    for name, fn in (("softmax", softmax), ("rms_norm", rms)):
        def fused_on(key: str, fn: Callable[[Any], Any] = fn) -> Fn:
            def go() -> None:
                held[key] = None
                held[key] = fn(xs[key])
                flushes[key]()

            return go

        ours = {k: fused_on(k) for k in devs}

        def eager(fn: Callable[[Any], Any] = fn) -> None:
            held["eager"] = None
            held["eager"] = fn(xe)

        kernels = 0
        for k in ours:  # compile each variant (its plan keeps its kernel)
            fusion_reduce.SUBGROUPS = k == "fused"
            try:
                ours[k]()
                before = b.rt.dispatches  # once warm (the first run made the constants)
                ours[k]()
                kernels = b.rt.dispatches - before
            finally:
                fusion_reduce.SUBGROUPS = True
            b.check(f"{name}_{k}", held[k][:64].numpy(), wants[name], 1e-5, 1e-7)
        peer: dict[str, Fn] = {}
        if tx is not None:  # the same methods on a torch tensor
            peer["torch"] = lambda fn=fn: fn(tx)
        t = b.time({**ours, "eager": eager}, peer, reps)
        gbs = {k: 8 * n / v / 1e6 for k, v in t.items()}
        b.results[f"rows_{name}"] = {"shape": list(shape), "kernels": kernels,
                                     "subgroups": b.rt.subgroups,
                                     **{f"{k}_GBps": round(v, 1) for k, v in gbs.items()}}
        sub = ", subgroup trees" if b.rt.subgroups else ""
        b.row(f"{name} {shape[0]}x{shape[1]} f32 fusion<{b.name}> GB/s ({kernels} kernel{sub})",
              _g(gbs["fused"]), _g(gbs.get("torch")), _ratio(gbs["fused"], gbs.get("torch")),
              f"eager {b.name}: {_g(gbs['eager'])} GB/s")
        if "fused_tree" in gbs:
            b.row(f"{name} fused, workgroup-memory trees only GB/s", _g(gbs["fused_tree"]),
                  "", _ratio(gbs["fused_tree"], gbs.get("torch")))

    # eager reductions on dev: each row's sum, and the whole tensor's (two passes); GB/s at the
    # 4 bytes read an element
    sums: dict[str, Fn] = {"row_sum": lambda: xe.sum(-1), "sum": lambda: xe.sum()}
    for k, fn in sums.items():
        b.check(k, fn().numpy(), a.astype(np.float64).sum(-1) if k == "row_sum"
                else a.astype(np.float64).sum(), 1e-4, 1e-2)
    tpeer: dict[str, Fn] = {}
    if tx is not None:
        tpeer = {"torch_row_sum": lambda: tx.sum(-1), "torch_sum": lambda: tx.sum()}
    t = b.time(sums, tpeer, reps)
    for k in sums:
        ours_gb, peer_gb = 4 * n / t[k] / 1e6, (4 * n / t[f"torch_{k}"] / 1e6
                                               if f"torch_{k}" in t else None)
        b.results[f"rows_{k}_GBps"] = round(ours_gb, 1)
        b.row(f"{'x.sum(-1)' if k == 'row_sum' else 'x.sum()'} {shape[0]}x{shape[1]} f32 "
              f"{b.name} eager GB/s (4 B/elem)", _g(ours_gb), _g(peer_gb),
              _ratio(ours_gb, peer_gb))


# -- host cost ------------------------------------------------------------------------------

def bench_host(b: Bench) -> None:
    ember = b.ember
    ops = 200 if b.quick else 2000
    h = np.ones((8, 8), np.float32)
    out: dict[str, Any] = {"ops_per_call": ops}
    fdev = ember.device(f"fusion<{b.name}>")
    xs = {"eager": (ember.tensor(h, device=b.dev), ember.tensor(h, device=b.dev)),
          "fused": (ember.tensor(h, device=fdev), ember.tensor(h, device=fdev))}
    flush = fdev.backend.stream().flush
    held: list[Any] = [None]

    def chain_of(key: str) -> Fn:
        x, y = xs[key]

        def run() -> None:
            z = x
            for _ in range(ops):
                z = z + y
            held[0] = z
            if key == "fused":
                flush()

        return run

    def adds(z: Any, y: Any) -> Any:
        for _ in range(ops):
            z = z + y
        return z

    compiled = ember.compile(adds)  # replays recorded dispatches (ember_wgpu.replay)
    held_c: list[Any] = [None]

    def compiled_run() -> None:
        held_c[0] = compiled(*xs["eager"])

    peer: dict[str, Fn] = {}
    if b.torch is not None:
        tx = b.torch.from_numpy(h).to(b.tdev)

        def torch_run() -> None:
            z = tx
            for _ in range(ops):
                z = z + tx

        peer["torch"] = torch_run
    t = b.time({"eager": chain_of("eager"), "fused": chain_of("fused"),
                "compiled": compiled_run}, peer, 1)
    got = held[0].numpy()
    b.check("host_chain", got, np.full((8, 8), 1.0 + ops), 0, 0.5)
    b.check("host_chain_compiled", held_c[0].numpy(), np.full((8, 8), 1.0 + ops), 0, 0.5)
    for k, ms in t.items():
        out[f"{k}_us_per_op"] = round(ms * 1e3 / ops, 2)
    b.results["host_8x8_add"] = out
    peer_us = out.get("torch_us_per_op")
    b.row(f"8x8 add chain, {b.name} us/op", _g(out["eager_us_per_op"]),
          f"{_g(peer_us)} ({b.tdev})" if peer_us else "", _ratio(peer_us, out["eager_us_per_op"]))
    b.row(f"8x8 add chain, fusion<{b.name}> us/op (recorded, one kernel)",
          _g(out["fused_us_per_op"]), "", "")
    b.row(f"8x8 add chain, ember.compile on {b.name} us/op (replayed dispatches)",
          _g(out["compiled_us_per_op"]), "", _ratio(peer_us, out["compiled_us_per_op"]))


# -- the guide epoch ------------------------------------------------------------------------

def _batches(quick: bool) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
    """The guide's training batches (scikit-learn's digits: 70% of them, batch 32), or as
    many random images where scikit-learn is missing."""
    try:
        from ember.data import load_digits

        data = load_digits()
        xs = np.stack([np.asarray(data[i][0], np.float32) for i in range(len(data))])
        ys = np.asarray([int(data[i][1]) for i in range(len(data))], np.int64)
        source = "digits"
    except Exception:  # no scikit-learn: the timing needs only the shapes
        rng = np.random.default_rng(0)
        xs = rng.random((1797, 1, 8, 8), dtype=np.float32)
        ys = rng.integers(0, 10, 1797)
        source = "random (no scikit-learn)"
    order = np.random.default_rng(0).permutation(len(xs))[: int(0.7 * len(xs))]
    xs = xs.reshape(len(xs), 1, 8, 8)
    out = [(xs[order[i:i + 32]], ys[order[i:i + 32]]) for i in range(0, len(order) - 31, 32)]
    return (out[:4] if quick else out), source


def bench_guide(b: Bench) -> None:
    ember = b.ember
    sys.path.insert(0, str(ROOT / "examples" / "guide"))
    from model import GuideCNN

    F = ember.nn.functional
    batches, source = _batches(b.quick)

    def ember_epoch(name: str, compiled: bool = False) -> tuple[Fn, list[float]]:
        dev = ember.device(name)
        model = GuideCNN(8, dropout=0.0, generator=ember.Generator(0)).to(dev)
        opt = ember.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
        # the first batch's loss of the first epoch, then each epoch's last
        losses: list[float] = []

        def step(x: Any, y: Any) -> Any:
            loss = F.cross_entropy(model(x), y)
            opt.step(loss.backward())
            return loss

        train = ember.compile(step) if compiled else step

        def run() -> None:
            for i, (xb, yb) in enumerate(batches):
                loss = train(ember.tensor(xb, device=dev), ember.tensor(yb, device=dev))
                if i == 0 and not losses:
                    losses.append(float(loss.item()))
            losses.append(float(loss.item()))  # waits for the device: the epoch's end

        return run, losses

    ours_fn, ours_loss = ember_epoch(f"autodiff<{b.name}>")
    comp_fn, comp_loss = ember_epoch(f"autodiff<{b.name}>", compiled=True)
    cpu_fn, cpu_loss = ember_epoch("autodiff<cpu>")
    peer: dict[str, Fn] = {}
    if b.torch is not None:
        torch = b.torch
        torch.manual_seed(0)
        tm = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, 64), torch.nn.ReLU(),
            torch.nn.Linear(64, 10)).to(b.tdev)
        topt = torch.optim.AdamW(tm.parameters(), lr=1e-3, weight_decay=1e-4)

        def torch_epoch() -> None:
            for xb, yb in batches:
                topt.zero_grad()
                loss = torch.nn.functional.cross_entropy(
                    tm(torch.from_numpy(xb).to(b.tdev)), torch.from_numpy(yb).to(b.tdev))
                loss.backward()
                topt.step()
            b.tsync()

        peer["torch"] = torch_epoch
    nothing = dict.fromkeys(["ember", "ember_compiled", "ember_cpu"], lambda: None)
    t = b.time({}, {"ember": ours_fn, "ember_compiled": comp_fn, "ember_cpu": cpu_fn, **peer},
               1, syncs=nothing)
    # same initial weights and batches: the first step's loss agrees closely; after epochs
    # of AdamW the devices' different orders of float32 sums (tiles against BLAS) drift
    # apart by a percent or so.  The compiled step drifts from the eager one as well: traced,
    # AdamW counts its steps on the device and forms the bias corrections there in float32
    # (its capturable update), eagerly on the host in float64, so the updates differ in the
    # last bits from the fifth step on (the same on lavapipe) and training amplifies that
    first = cpu_loss[0]
    for what, got in ((b.name, ours_loss), (f"{b.name} compiled", comp_loss)):
        if not abs(got[0] - first) <= 1e-4 * max(1.0, abs(first)):
            b.errors.append(f"guide: first loss {got[0]} on {what} vs {first} on cpu")
        if not abs(got[-1] - cpu_loss[-1]) <= 0.03 * max(1.0, abs(cpu_loss[-1])):
            b.errors.append(f"guide: last loss {got[-1]} on {what} vs {cpu_loss[-1]} on cpu")
    if not abs(comp_loss[-1] - ours_loss[-1]) <= 0.03 * max(1.0, abs(ours_loss[-1])):
        b.errors.append(f"guide: last loss {comp_loss[-1]} compiled vs {ours_loss[-1]} eager")
    res = {"batches": len(batches), "data": source, "ember_ms": round(t["ember"], 1),
           "ember_compiled_ms": round(t["ember_compiled"], 1),
           "ember_cpu_ms": round(t["ember_cpu"], 1), "last_loss": round(ours_loss[-1], 5),
           "last_loss_compiled": round(comp_loss[-1], 5),
           "last_loss_cpu": round(cpu_loss[-1], 5)}
    if "torch" in t:
        res["torch_ms"] = round(t["torch"], 1)
    b.results["guide_epoch"] = res
    b.row(f"guide epoch ({len(batches)} batches) autodiff<{b.name}> ms", _g(t["ember"]),
          f"{_g(t.get('torch'))} ({b.tdev})" if "torch" in t else "",
          _ratio(t.get("torch"), t["ember"]))
    b.row(f"guide epoch ({len(batches)} batches) autodiff<{b.name}> ember.compile ms",
          _g(t["ember_compiled"]),
          f"{_g(t.get('torch'))} ({b.tdev})" if "torch" in t else "",
          _ratio(t.get("torch"), t["ember_compiled"]))
    b.row("guide epoch autodiff<cpu> ms (same model, ember's CPU backend)",
          _g(t["ember_cpu"]), "", "", f"{b.name} runs at {_ratio(t['ember_cpu'], t['ember'])} "
          "of cpu's speed")


SECTIONS = {"matmul32": lambda b: bench_matmul(b, "float32"),
            "matmul16": lambda b: bench_matmul(b, "float16"),
            "conv32": lambda b: bench_conv(b, "float32"),
            "conv16": lambda b: bench_conv(b, "float16"),
            "bandwidth": bench_bandwidth, "rows": bench_rows, "host": bench_host,
            "guide": bench_guide}


def run(args: argparse.Namespace) -> int:
    b = Bench(args)
    print(f"{b.name}: {b.rt.name}; peer torch: {b.results['torch']}; "
          f"empty sync {b.sync_ms:.3f} ms", flush=True)
    for name in args.only or list(SECTIONS):
        t = time.perf_counter()
        try:
            SECTIONS[name](b)
        except Exception as exc:  # reported in the table, the other sections still run
            b.errors.append(f"{name}: {type(exc).__name__}: {exc}"[:600])
            b.row(name, "error", "", "")
        print(f"  {name}: {time.perf_counter() - t:.1f} s", flush=True)
    b.results["errors"] = b.errors
    print("\n| what | ember | torch | ember speed / torch's | note |\n|---|---|---|---|---|")
    for what, ours, peer, ratio, note in b.rows:
        print(f"| {what} | {ours} | {peer} | {ratio} | {note} |")
    for e in b.errors:
        print(f"ERROR {e}")
    line = json.dumps(b.results)
    print("RESULT " + line)
    if args.json:
        Path(args.json).write_text(line + "\n")
    return 1 if b.errors else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (a minute on lavapipe)")
    p.add_argument("--device", default="wgpu:0", help="the wgpu device (default wgpu:0)")
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    p.add_argument("--rounds", type=int, default=0, help="interleaved rounds (5; quick 2)")
    p.add_argument("--only", nargs="*", choices=list(SECTIONS), help="run only these sections")
    p.add_argument("--json", default=None, help="also write the RESULT line to this file")
    args = p.parse_args(argv)
    if importlib.util.find_spec("ember") is None or importlib.util.find_spec(
            "ember_wgpu") is None:
        from check import workspace_env

        with tempfile.TemporaryDirectory() as tmp:
            return subprocess.run([sys.executable, __file__, *(argv or sys.argv[1:])],
                                  env=workspace_env(Path(tmp)), check=False).returncode
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
