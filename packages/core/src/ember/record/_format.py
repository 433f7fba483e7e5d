"""The safetensors file format: written through the ``safetensors`` library, read by a strict
parser of our own so that every malformed file becomes a `RecordError` naming the file.

A file is an 8-byte little-endian header length, a JSON header
(``{key: {"dtype", "shape", "data_offsets"}, "__metadata__": {str: str}}``) and the raw
little-endian data.  Nothing is ever unpickled.
"""

from __future__ import annotations

import io
import json
import os
import reprlib
import stat
import struct
import tempfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import RecordError

__all__ = ["SAFETENSORS_DTYPES", "parse_json", "read_file", "write_file"]

# safetensors dtype code -> numpy dtype name (bfloat16 through ml_dtypes)
SAFETENSORS_DTYPES: dict[str, str] = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
}
_CODE = {v: k for k, v in SAFETENSORS_DTYPES.items()}
MAX_HEADER = 100 * 1024 * 1024  # the limit safetensors itself enforces
CHECKSUMS = "ember.checksums"


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxlong = 3, 12, 8, 80, 40


def _short(value: Any) -> str:
    """A value from a file for a message: bounded in length and depth however large it is."""
    return _SHORT.repr(value)


def parse_json(p: Path | str | os.PathLike[str], text: str | bytes, what: str) -> Any:
    """``text`` (``what`` in file ``p``) as JSON, in time linear in its length; anything
    malformed (bad syntax, a number of thousands of digits, nesting deeper than Python's
    recursion limit) is a `RecordError` naming the file."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        # JSONDecodeError and the int-digits limit are ValueErrors; deep nesting recurses
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise RecordError(f"{p}: {what} is not valid JSON: {why}") from None


def _nbytes(shape: list[int], itemsize: int, cap: int) -> int | None:
    """``itemsize`` times the product of ``shape`` (ints >= 0) if at most ``cap``, else None;
    linear in the shape's length (the exact product of a long shape is a huge integer whose
    computation takes quadratic time)."""
    if 0 in shape:
        return 0
    n = itemsize
    for d in shape:
        n *= d
        if n > cap:
            return None
    return n


def _np_dtype(name: str) -> np.dtype[Any]:
    if name == "bfloat16":
        import ml_dtypes

        bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bf16
    return np.dtype(name)


def write_file(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray],
               metadata: Mapping[str, str] | None = None) -> None:
    """Write ``arrays`` atomically: a temporary file in the same folder, fsync, rename.

    A crash at any moment leaves either the old file or the complete new one.  A CRC-32 of each
    tensor's bytes goes into the metadata so that corruption is detected on load.
    """
    import safetensors

    target = Path(path)
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    keep: list[np.ndarray] = []
    specs = {}
    sums = {}
    for key, arr in arrays.items():
        a = np.require(arr, requirements="C")
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        name = "bfloat16" if a.dtype.name == "bfloat16" else a.dtype.name
        if name not in _CODE:
            raise RecordError(f"{target}: key {key!r}: dtype {name} cannot be stored")
        keep.append(a)
        specs[key] = safetensors.TensorSpec(dtype=name, shape=list(a.shape),
                                            data_ptr=a.ctypes.data, data_len=a.nbytes)
        crc = zlib.crc32(a.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # a buffer
        sums[key] = f"{crc & 0xFFFFFFFF:08x}"
    meta[CHECKSUMS] = json.dumps(sums, sort_keys=True)
    data = bytes(safetensors.serialize(specs, metadata=meta))
    del keep
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:  # make the rename itself durable
        dfd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def read_file(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read and check a safetensors file: arrays in file order, and the metadata.

    Only a regular file is read (a symbolic link to one is followed, as PyTorch and safetensors
    do); a FIFO, a device, a socket or a folder is refused before a byte is read, so that a
    path to ``/dev/zero`` or a pipe cannot make the reader wait or allocate without end.  The
    header is checked against the file's size, and every tensor's offsets against its dtype and
    shape, before the data is read: no allocation is larger than the file.

    Raises
    ------
    RecordError
        For a missing, non-regular, truncated or corrupted file, naming the file (and the key,
        if one).
    """
    p = Path(path)
    with _open_regular(p) as f:
        size = os.fstat(f.fileno()).st_size

        def bad(why: str) -> RecordError:
            return RecordError(f"{p}: not a valid safetensors record ({size} bytes): {why}")

        if size < 8:
            raise bad("the file is shorter than the 8-byte header length (truncated?)")
        (n,) = struct.unpack("<Q", _read_exactly(p, f, 8))
        if n > MAX_HEADER or 8 + n > size:
            raise bad(f"the header claims {n} bytes but the file has {size - 8} after the "
                      "length (truncated or not a safetensors file)")
        try:
            header = json.loads(_read_exactly(p, f, n).decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, a 5,000-digit
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
            raise bad(f"the header is not valid JSON: {why}") from None  # number, deep nesting
        if not isinstance(header, dict):
            raise bad("the header is not a JSON object")
        raw_meta = header.pop("__metadata__", None) or {}
        if not isinstance(raw_meta, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in raw_meta.items()):
            raise bad("__metadata__ must map strings to strings")
        entries = []
        for key, info in header.items():
            if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
                raise bad(f"key {_short(key)}: entry needs dtype, shape and data_offsets")
            code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
            if not isinstance(code, str) or code not in SAFETENSORS_DTYPES:
                raise RecordError(f"{p}: key {_short(key)}: dtype {_short(code)} is not "
                                  f"supported by ember (supported: "
                                  f"{', '.join(SAFETENSORS_DTYPES)})")
            if not (isinstance(shape, list) and all(
                    type(s) is int and s >= 0 for s in shape)):
                raise bad(f"key {_short(key)}: invalid shape {_short(shape)}")
            if len(shape) > 64:
                raise bad(f"key {_short(key)}: a shape of {len(shape)} dimensions (numpy holds "
                          "at most 64)")
            if not (isinstance(offsets, list) and len(offsets) == 2 and all(
                    type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1]):
                raise bad(f"key {_short(key)}: invalid data_offsets {_short(offsets)}")
            dtype = _np_dtype(SAFETENSORS_DTYPES[code])
            # exact integers, stopped once past the file (numpy's int64 product would wrap
            # for a header that lies, Python's exact one takes quadratic time for long shapes)
            need = _nbytes(shape, dtype.itemsize, size)
            if need is None and offsets[1] <= size - 8 - n:
                raise bad(f"key {_short(key)}: shape {_short(shape)} of {code} needs more "
                          f"bytes than the file's {size}, the offsets give "
                          f"{offsets[1] - offsets[0]}")
            if need is not None and offsets[1] - offsets[0] != need:
                raise bad(f"key {_short(key)}: shape {_short(shape)} of {code} needs {need} "
                          f"bytes, the offsets give {offsets[1] - offsets[0]}")
            if offsets[1] > size - 8 - n:
                raise bad(f"key {_short(key)}: shape {_short(shape)} of {code} needs data bytes "
                          f"{offsets[0]}..{offsets[1]} but the file has {size - 8 - n} "
                          "after the header (truncated, or a header that lies)")
            entries.append((offsets[0], offsets[1], key, shape, dtype))
        entries.sort(key=lambda e: (e[0], e[1]))
        pos = 0
        for start, end, key, _, _ in entries:
            if start != pos:
                raise bad(f"key {_short(key)}: data starts at byte {start}, expected {pos} "
                          "(overlapping or gapped tensors)")
            pos = end
        if pos != size - 8 - n:
            raise bad(f"the tensors cover {pos} data bytes but the file has {size - 8 - n} "
                      "(truncated or extended)")
        body = memoryview(_read_exactly(p, f, pos))
    sums = _checksums(p, raw_meta)
    arrays: dict[str, np.ndarray] = {}
    by_key = {e[2]: e for e in entries}
    for key in header:  # the file's order
        start, end, _, shape, dtype = by_key[key]
        chunk = body[start:end]
        if key in sums:
            got = f"{zlib.crc32(chunk) & 0xFFFFFFFF:08x}"
            if got != sums[key]:
                raise RecordError(f"{p}: key {key!r}: checksum mismatch (recorded "
                                  f"{_short(sums[key])}, data gives {got}): the file is "
                                  "corrupted")
        arr = np.frombuffer(chunk, dtype=dtype.newbyteorder("<")).reshape(shape)
        arrays[key] = arr.astype(dtype, copy=False)
    return arrays, {k: v for k, v in raw_meta.items() if k != CHECKSUMS}


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character "
                       "device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(p: Path) -> io.FileIO:
    """Open ``p`` for reading if it is (or links to) a regular file; else a `RecordError`.

    The mode is checked before opening (opening a FIFO for reading waits for a writer) and again
    on the open descriptor, which is opened non-blocking, so that a file swapped for a FIFO or a
    device in between is refused too instead of hanging.
    """
    def refuse(mode: int) -> RecordError:
        what = _kind(mode)
        via = ""
        if p.is_symlink():
            via = f"a symbolic link to {os.path.realpath(p)}, which is "
        return RecordError(f"{p}: cannot read the record: the path is {via}{what}, not a "
                           "regular file (records are read only from regular files)")

    try:
        st = os.stat(p)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(st.st_mode)
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise RecordError(f"{p}: cannot read the record: {exc.strerror or exc}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise refuse(mode)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _read_exactly(p: Path, f: io.FileIO, n: int) -> bytearray:
    """``n`` bytes from ``f``; a file that shrank since its size was taken is a `RecordError`."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = f.readinto(view[got:])
        if not k:
            raise RecordError(f"{p}: the record ended after {got} of {n} expected bytes "
                              "(truncated while being read?)")
        got += k
    return buf


def _checksums(p: Path, meta: dict[str, str]) -> dict[str, str]:
    text = meta.get(CHECKSUMS)
    if text is None:
        return {}
    sums = parse_json(p, text, f"the {CHECKSUMS} metadata (the file is corrupted)")
    if not isinstance(sums, dict):
        raise RecordError(f"{p}: the {CHECKSUMS} metadata is not a JSON object")
    if not all(isinstance(v, str) for v in sums.values()):
        raise RecordError(f"{p}: the {CHECKSUMS} metadata holds a checksum that is not a string "
                          "(the file is corrupted)")
    return sums
