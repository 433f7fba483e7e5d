"""A compiled launcher: one C call packs a kernel's arguments and calls ``cuLaunchKernel``.

`ember_cuda.launcher.DriverLaunch` packs arguments with ``struct`` under a lock and then calls
CuPy's binding of ``cuLaunchKernel``: three Python-level steps, about 0.7 µs on the H200's host
on top of the binding's own argument conversion.  This module compiles (once per machine, with
the C compiler Triton itself needs and through Triton's build cache) a small extension whose
``launch(state, grid, stream, raw)`` does all of it in C while holding the GIL (so a launch's
parameter buffer needs no lock), and `make_launch` returns that call bound to one compiled
kernel's state.

The state is a block of memory per kernel: the ``CUfunction``, block size, shared memory, one
type code per argument, the driver's array of parameter pointers and one 8-byte slot per
argument (the parameter pointers point at the slots of non-``constexpr`` arguments, then at two
zeroed slots for Triton 3.6's scratch pointers).  ``cuLaunchKernel`` is found in the process's
``libcuda`` and handed to the extension as an address; the extension links nothing.  The same
extension issues cuBLASLt's recorded matmuls (``lt_matmul``, `ember_cuda.cublaslt`), from a
state holding ``cublasLtMatmul``'s address and the problem's descriptors.

Anything this module cannot do (no C compiler, an argument type without a code) leaves the
kernel on `DriverLaunch`.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["CODES", "MAX_ARGS", "build", "load", "make_launch", "make_state"]

#: type codes by Triton signature type (``constexpr`` arguments are packed nowhere)
CODES = {
    "constexpr": "c", "i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u1": "B",
    "u8": "B", "u16": "H", "u32": "I", "u64": "Q", "fp32": "f", "f32": "f", "fp64": "d",
}
#: arguments one state describes at most
MAX_ARGS = 96

_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_ARGS @MAX_ARGS@

typedef int (*cu_launch_t)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shared, void *stream,
                           void **params, void **extra);
static cu_launch_t cu_launch = NULL;

typedef struct {
    void *function;
    uint32_t block, shared;
    uint32_t nraw, pad;
    char codes[MAX_ARGS];
    void *params[MAX_ARGS + 2];
    uint64_t slots[MAX_ARGS + 2];
} state_t;

static PyObject *set_driver(PyObject *self, PyObject *arg) {
    void *p = PyLong_AsVoidPtr(arg);
    if (p == NULL && PyErr_Occurred()) return NULL;
    cu_launch = (cu_launch_t)p;
    Py_RETURN_NONE;
}

static PyObject *state_size(PyObject *self, PyObject *unused) {
    return PyLong_FromSsize_t((Py_ssize_t)sizeof(state_t));
}

/* fill in the parameter pointers of a state whose header and codes are written */
static PyObject *prepare(PyObject *self, PyObject *arg) {
    state_t *s = (state_t *)PyLong_AsVoidPtr(arg);
    if (s == NULL) return NULL;
    if (s->nraw > MAX_ARGS) return PyErr_Format(PyExc_ValueError, "too many arguments");
    unsigned n = 0;
    for (unsigned i = 0; i < s->nraw; i++)
        if (s->codes[i] != 'c') s->params[n++] = &s->slots[i];
    s->params[n++] = &s->slots[MAX_ARGS];      /* Triton's global scratch: null */
    s->params[n++] = &s->slots[MAX_ARGS + 1];  /* and profile scratch: null */
    s->slots[MAX_ARGS] = s->slots[MAX_ARGS + 1] = 0;
    return PyLong_FromUnsignedLong(n);
}

static int put(char code, PyObject *v, uint64_t *slot) {
    *slot = 0;
    switch (code) {
    case 'c': return 0;
    case 'f': {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) return -1;
        float f = d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
        memcpy(slot, &f, sizeof f);
        return 0;
    }
    case 'd': {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) return -1;
        memcpy(slot, &d, sizeof d);
        return 0;
    }
    case 'Q': {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) return -1;
        *slot = (uint64_t)u;
        return 0;
    }
    default: break;
    }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    switch (code) {
    case 'q': { int64_t y = (int64_t)x; memcpy(slot, &y, 8); return 0; }
    case 'i': if (x < INT32_MIN || x > INT32_MAX) break;
              { int32_t y = (int32_t)x; memcpy(slot, &y, 4); return 0; }
    case 'I': if (x < 0 || x > UINT32_MAX) break;
              { uint32_t y = (uint32_t)x; memcpy(slot, &y, 4); return 0; }
    case 'h': if (x < INT16_MIN || x > INT16_MAX) break;
              { int16_t y = (int16_t)x; memcpy(slot, &y, 2); return 0; }
    case 'H': if (x < 0 || x > UINT16_MAX) break;
              { uint16_t y = (uint16_t)x; memcpy(slot, &y, 2); return 0; }
    case 'b': if (x < INT8_MIN || x > INT8_MAX) break;
              { int8_t y = (int8_t)x; memcpy(slot, &y, 1); return 0; }
    case 'B': if (x < 0 || x > UINT8_MAX) break;
              { uint8_t y = (uint8_t)x; memcpy(slot, &y, 1); return 0; }
    default:
        PyErr_Format(PyExc_ValueError, "unknown argument code %c", code);
        return -1;
    }
    PyErr_Format(PyExc_OverflowError, "argument %lld does not fit type code %c", x, code);
    return -1;
}

/* launch(state, grid, stream, raw) */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "launch(state, grid, stream, raw)");
        return NULL;
    }
    state_t *s = (state_t *)PyLong_AsVoidPtr(args[0]);
    if (s == NULL) return NULL;
    PyObject *grid = args[1], *raw = args[3];
    if (!PyTuple_Check(grid) || PyTuple_GET_SIZE(grid) < 1 || PyTuple_GET_SIZE(grid) > 3) {
        PyErr_SetString(PyExc_TypeError, "grid must be a tuple of 1 to 3 ints");
        return NULL;
    }
    unsigned long g[3] = {1, 1, 1};
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(grid); i++) {
        g[i] = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(grid, i));
        if (g[i] == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    }
    void *stream = PyLong_AsVoidPtr(args[2]);
    if (stream == NULL && PyErr_Occurred()) return NULL;
    PyObject *seq = PySequence_Fast(raw, "raw must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n != (Py_ssize_t)s->nraw) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_TypeError, "kernel takes %u arguments, got %zd",
                            s->nraw, n);
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (put(s->codes[i], items[i], &s->slots[i]) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    if (cu_launch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no cuLaunchKernel set");
        return NULL;
    }
    int status = cu_launch(s->function, (unsigned)g[0], (unsigned)g[1], (unsigned)g[2],
                           s->block, 1, 1, s->shared, stream, s->params, NULL);
    if (status != 0)
        return PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed with CUDA error %d",
                            status);
    Py_RETURN_NONE;
}

typedef int (*lt_matmul_t)(void *handle, void *desc, const void *alpha, const void *a,
                           void *a_layout, const void *b, void *b_layout, const void *beta,
                           const void *c, void *c_layout, void *d, void *d_layout,
                           const void *algo, void *workspace, size_t workspace_size,
                           void *stream);

/* a cuBLASLt problem as `cublaslt.LtGemm` made it: its function, handle, descriptors, the
   scale factors' addresses, one algorithm, the workspace's size */
typedef struct {
    lt_matmul_t matmul;
    void *handle, *desc, *alpha, *a_layout, *b_layout, *beta, *c_layout, *algo;
    uint64_t workspace_size;
} lt_state_t;

/* lt_matmul(state, c, a, b, stream, workspace) -> status: row-major C = A @ B as cuBLASLt's
   column-major C^T = B^T A^T (its A is our B), written in place (D = C) */
static PyObject *lt_matmul(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "lt_matmul(state, c, a, b, stream, workspace)");
        return NULL;
    }
    void *p[6];
    for (Py_ssize_t i = 0; i < 6; i++) {
        p[i] = PyLong_AsVoidPtr(args[i]);
        if (p[i] == NULL && PyErr_Occurred()) return NULL;
    }
    lt_state_t *s = (lt_state_t *)p[0];
    if (s == NULL || s->matmul == NULL) {
        PyErr_SetString(PyExc_ValueError, "no cuBLASLt state");
        return NULL;
    }
    int status = s->matmul(s->handle, s->desc, s->alpha, p[3], s->a_layout, p[2], s->b_layout,
                           s->beta, p[1], s->c_layout, p[1], s->c_layout, s->algo, p[5],
                           (size_t)s->workspace_size, p[4]);
    return PyLong_FromLong(status);
}

static PyMethodDef methods[] = {
    {"set_driver", set_driver, METH_O, "set the address of cuLaunchKernel"},
    {"state_size", state_size, METH_NOARGS, "bytes of one kernel's state"},
    {"prepare", prepare, METH_O, "point a state's parameters at its slots"},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(state, grid, stream, raw)"},
    {"lt_matmul", (PyCFunction)(void (*)(void))lt_matmul, METH_FASTCALL,
     "lt_matmul(state, c, a, b, stream, workspace) -> cublasLtMatmul's status"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ember_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit_ember_launch(void) { return PyModule_Create(&module); }
""".replace("@MAX_ARGS@", str(MAX_ARGS))

_LOCK = threading.Lock()
_BUILT: list[Any] = []
_LOADED: list[Any] = []


def build() -> Any:
    """The compiled extension, built on first use through Triton's build cache (``None``
    where it cannot be built: no C compiler or no Python headers)."""
    with _LOCK:
        if not _BUILT:
            try:
                from triton.runtime.build import compile_module_from_src

                _BUILT.append(compile_module_from_src(
                    src=_SOURCE, name="ember_launch", library_dirs=[], include_dirs=[],
                    libraries=[]))
            except Exception:
                _BUILT.append(None)
        return _BUILT[0]


def load() -> Any:
    """`build`'s extension launching through the process's ``cuLaunchKernel`` (``None``
    without one of the two)."""
    if not _LOADED:
        mod = build()
        if mod is not None:
            try:
                cuda = ctypes.CDLL("libcuda.so.1")
                mod.set_driver(ctypes.cast(cuda.cuLaunchKernel, ctypes.c_void_p).value)
            except (OSError, AttributeError):
                mod = None
        _LOADED.append(mod)
    return _LOADED[0]


def make_state(mod: Any, function: int, block: int, shared: int,
               types: Sequence[str]) -> ctypes.Array[ctypes.c_char] | None:
    """One kernel's state for ``mod.launch`` (kept alive by the caller), or ``None`` where a
    type has no code or there are too many arguments."""
    codes = [CODES.get(t, "Q" if t.startswith("*") else "") for t in types]
    if len(codes) > MAX_ARGS or not all(codes):
        return None
    state = ctypes.create_string_buffer(int(mod.state_size()))
    header = ctypes.c_uint64.from_buffer(state, 0)
    header.value = function
    ctypes.c_uint32.from_buffer(state, 8).value = block
    ctypes.c_uint32.from_buffer(state, 12).value = shared
    ctypes.c_uint32.from_buffer(state, 16).value = len(codes)
    ctypes.memmove(ctypes.addressof(state) + 24, "".join(codes).encode(), len(codes))
    mod.prepare(ctypes.addressof(state))
    return state


def make_launch(compiled: Any, types: Sequence[str]) -> Any:
    """``entry(grid, stream, raw)`` launching ``compiled`` through the extension (the state
    rides along on the entry), or ``None`` where `DriverLaunch` must do it."""
    mod = load()
    if mod is None:
        return None
    state = make_state(mod, int(compiled.function), 32 * int(compiled.metadata.num_warps),
                       int(compiled.metadata.shared), types)
    if state is None:
        return None
    entry = functools.partial(mod.launch, ctypes.addressof(state))
    entry.state = state  # type: ignore[attr-defined]  # alive as long as the entry
    entry.compiled, entry.types = compiled, tuple(types)  # type: ignore[attr-defined]
    entry.function = int(compiled.function)  # type: ignore[attr-defined]
    return entry
