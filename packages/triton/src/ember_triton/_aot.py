"""Compile, for a real GPU target, every kernel the interpreter ran: no GPU needed.

Triton's interpreter runs a kernel's Python body with numpy; it never runs Triton's front end,
which rejects things the interpreter accepts (a global it may not read, a helper without a
module, a type it cannot infer).  A CI machine has no GPU but does have Triton's compiler and
``ptxas``, so this module closes the gap:

1. ``record(path)`` (or ``EMBER_TRITON_RECORD=path``): every launch on an interpreter device
   appends the kernel's origin (a kernel module and name, or generated source), its argument
   signature and its constexprs to ``path`` (one JSON line per distinct specialisation).
2. ``python -m ember_triton._aot path [--arch 90]`` (in a process *without*
   ``TRITON_INTERPRET``): rebuilds each kernel in compiled mode and compiles it through
   ``triton.compile`` down to a cubin for ``sm_<arch>``, in parallel; prints each failure
   with its source and exits 1 if any.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

__all__ = ["compile_specs", "record"]

#: numpy dtype names (as pointers carry them) -> Triton signature types
_POINTER_TYPES = {
    "float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "i1",
}

_LOCK = threading.Lock()
_SEEN: set[str] = set()
_PATH: str | None = os.environ.get("EMBER_TRITON_RECORD") or None


def recording() -> bool:
    return _PATH is not None


@contextmanager
def record(path: str) -> Iterator[None]:
    """Record the kernels launched on interpreter devices inside the block into ``path``."""
    global _PATH
    old, _PATH = _PATH, path
    seen = set(_SEEN)
    _SEEN.clear()  # a new file: every specialisation is new to it
    try:
        yield
    finally:
        _PATH = old
        _SEEN.clear()
        _SEEN.update(seen)


def _arg_type(value: Any) -> str:
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -0x80000000 <= value <= 0x7FFFFFFF else "i64"
    if isinstance(value, float):
        return "fp32"
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "data_ptr"):
        return "*" + _POINTER_TYPES[str(dtype)]
    raise TypeError(f"kernel argument of type {type(value).__name__} has no Triton type")


def _encode(value: Any) -> Any:
    import triton.language as tl

    if isinstance(value, tl.dtype):
        return {"tl.dtype": value.name}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "tl.dtype" in value:
        import triton.language as tl

        return tl.dtype(value["tl.dtype"])
    return value


def note_launch(origin: tuple[Any, ...] | None, kernel: Any, call: list[Any],
                meta: dict[str, Any]) -> None:
    """Called by the interpreter backend before each launch while recording."""
    if _PATH is None:
        return
    if origin is None:
        raise RuntimeError(f"kernel {getattr(kernel, '__name__', kernel)!r} was not created by "
                           "a KernelLibrary, so it cannot be rebuilt in compiled mode")
    names = list(kernel.arg_names)
    signature = {n: _arg_type(v) for n, v in zip(names, call, strict=False)}
    constexprs = {n: _encode(v) for n, v in meta.items() if n in names}
    options = {n: v for n, v in meta.items() if n not in names}
    for n in constexprs:
        signature[n] = "constexpr"
    line = json.dumps({"origin": list(origin), "signature": signature,
                       "constexprs": constexprs, "options": options}, sort_keys=True)
    with _LOCK:
        if line in _SEEN:
            return
        _SEEN.add(line)
        with open(_PATH, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def _rebuild(origin: list[Any]) -> Any:
    from ._jit import KernelLibrary

    lib = KernelLibrary.get(False)
    if origin[0] == "module":
        return getattr(lib.module(origin[1]), origin[2])
    _, name, source = origin
    return lib.generated(("aot", source), name, source, lib.scope)


def _compile_one(args: tuple[str, int]) -> str | None:
    line, arch = args
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = json.loads(line)
    try:
        fn = _rebuild(spec["origin"])
        constexprs = {k: _decode(v) for k, v in spec["constexprs"].items()}
        src = ASTSource(fn, signature=spec["signature"], constexprs=constexprs)
        options = {"num_warps": spec["options"].get("num_warps", 4)}
        if "num_stages" in spec["options"]:
            options["num_stages"] = spec["options"]["num_stages"]
        # the GPU launches compile with FP fusion (FMA contraction), Triton's default there;
        # say so rather than leave it to a default that Triton >= 3.9 warns about in every
        # worker process and means to change
        options["enable_fp_fusion"] = spec["options"].get("enable_fp_fusion", True)
        triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as exc:  # reported with the spec: the point of this tool
        origin = spec["origin"]
        where = (f"{origin[1]}.{origin[2]}" if origin[0] == "module"
                 else f"generated {origin[1]}:\n{origin[2]}")
        return (f"{where}\n  signature {spec['signature']}\n  constexprs "
                f"{spec['constexprs']}\n  {type(exc).__name__}: {exc}")
    return None


def compile_specs(lines: list[str], arch: int = 90, jobs: int = 0) -> list[str]:
    """Compile each recorded kernel for ``sm_<arch>``; the failures, described."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("compile_specs needs a process without TRITON_INTERPRET")
    work = [(ln, arch) for ln in dict.fromkeys(ln.strip() for ln in lines) if ln]
    jobs = jobs or min(len(work), os.cpu_count() or 1) or 1
    if jobs == 1:
        results = [_compile_one(w) for w in work]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_compile_one, work, chunksize=4))
    return [r for r in results if r is not None]


def sample(lines: list[str], n: int) -> list[str]:
    """At most ``n`` specs, deterministically: every kernel-module kernel once per set of
    constexprs, then generated sources (one signature each) in hash order."""
    import hashlib

    modules: dict[str, str] = {}
    generated: dict[str, str] = {}
    for line in lines:
        spec = json.loads(line)
        origin = spec["origin"]
        if origin[0] == "module":
            modules.setdefault(json.dumps([origin, spec["constexprs"]], sort_keys=True), line)
        else:
            generated.setdefault(hashlib.sha1(origin[2].encode()).hexdigest(), line)
    picked = list(modules.values())[:n]
    picked += [generated[k] for k in sorted(generated)][:max(0, n - len(picked))]
    return picked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="compile recorded Triton kernels for a GPU target")
    p.add_argument("paths", nargs="+", help="files written by EMBER_TRITON_RECORD")
    p.add_argument("--arch", type=int, default=90, help="CUDA compute capability (90: H100/H200)")
    p.add_argument("--jobs", type=int, default=0)
    p.add_argument("--sample", type=int, default=0,
                   help="compile at most this many (every kernel module's kernels first)")
    args = p.parse_args(argv)
    lines: list[str] = []
    for path in args.paths:
        with open(path, encoding="utf-8") as f:
            lines += f.readlines()
    lines = list(dict.fromkeys(ln.strip() for ln in lines if ln.strip()))
    total = len(lines)
    if total == 0:
        print(f"no kernels recorded in {', '.join(args.paths)}", file=sys.stderr)
        return 1
    if args.sample:
        lines = sample(lines, args.sample)
    n = len(lines)
    failures = compile_specs(lines, args.arch, args.jobs)
    for failure in failures:
        print("FAILED", failure, "\n")
    print(f"{n - len(failures)} of {n} kernel specialisations compiled for sm_{args.arch} "
          f"({total} recorded)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
