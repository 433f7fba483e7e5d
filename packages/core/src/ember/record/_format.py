"""The safetensors file format: written through the ``safetensors`` library, read by a strict
parser of our own so that every malformed file becomes a `RecordError` naming the file.

A file is an 8-byte little-endian header length, a JSON header
(``{key: {"dtype", "shape", "data_offsets"}, "__metadata__": {str: str}}``) and the raw
little-endian data.  Nothing is ever unpickled.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import RecordError

__all__ = ["SAFETENSORS_DTYPES", "read_file", "write_file"]

# safetensors dtype code -> numpy dtype name (bfloat16 through ml_dtypes)
SAFETENSORS_DTYPES: dict[str, str] = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
}
_CODE = {v: k for k, v in SAFETENSORS_DTYPES.items()}
MAX_HEADER = 100 * 1024 * 1024  # the limit safetensors itself enforces
CHECKSUMS = "ember.checksums"


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

    Raises
    ------
    RecordError
        For a missing, truncated or corrupted file, naming the file (and the key, if one).
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise RecordError(f"{p}: cannot read the record: {exc.strerror or exc}") from exc

    def bad(why: str) -> RecordError:
        return RecordError(f"{p}: not a valid safetensors record ({len(data)} bytes): {why}")

    if len(data) < 8:
        raise bad("the file is shorter than the 8-byte header length (truncated?)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or 8 + n > len(data):
        raise bad(f"the header claims {n} bytes but the file has {len(data) - 8} after the "
                  "length (truncated or not a safetensors file)")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"the header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    raw_meta = header.pop("__metadata__", None) or {}
    if not isinstance(raw_meta, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw_meta.items()):
        raise bad("__metadata__ must map strings to strings")
    body = memoryview(data)[8 + n:]
    entries = []
    for key, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise bad(f"key {key!r}: entry needs dtype, shape and data_offsets")
        code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if code not in SAFETENSORS_DTYPES:
            raise RecordError(f"{p}: key {key!r}: dtype {code!r} is not supported by ember "
                              f"(supported: {', '.join(SAFETENSORS_DTYPES)})")
        if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
            raise bad(f"key {key!r}: invalid shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(
                isinstance(o, int) for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            raise bad(f"key {key!r}: invalid data_offsets {offsets!r}")
        dtype = _np_dtype(SAFETENSORS_DTYPES[code])
        need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offsets[1] - offsets[0] != need:
            raise bad(f"key {key!r}: shape {shape} of {code} needs {need} bytes, the offsets "
                      f"give {offsets[1] - offsets[0]}")
        entries.append((offsets[0], offsets[1], key, shape, dtype))
    entries.sort(key=lambda e: (e[0], e[1]))
    pos = 0
    for start, end, key, _, _ in entries:
        if start != pos:
            raise bad(f"key {key!r}: data starts at byte {start}, expected {pos} "
                      "(overlapping or gapped tensors)")
        pos = end
    if pos != len(body):
        raise bad(f"the tensors cover {pos} data bytes but the file has {len(body)} "
                  "(truncated or extended)")
    sums = _checksums(p, raw_meta)
    arrays: dict[str, np.ndarray] = {}
    by_key = {e[2]: e for e in entries}
    for key in header:  # the file's order
        start, end, _, shape, dtype = by_key[key]
        chunk = body[start:end]
        if key in sums:
            got = f"{zlib.crc32(chunk) & 0xFFFFFFFF:08x}"
            if got != sums[key]:
                raise RecordError(f"{p}: key {key!r}: checksum mismatch (recorded {sums[key]}, "
                                  f"data gives {got}): the file is corrupted")
        arr = np.frombuffer(chunk, dtype=dtype.newbyteorder("<")).reshape(shape)
        arrays[key] = arr.astype(dtype, copy=False)
    return arrays, {k: v for k, v in raw_meta.items() if k != CHECKSUMS}


def _checksums(p: Path, meta: dict[str, str]) -> dict[str, str]:
    text = meta.get(CHECKSUMS)
    if text is None:
        return {}
    try:
        sums = json.loads(text)
    except json.JSONDecodeError:
        raise RecordError(f"{p}: the {CHECKSUMS} metadata is not valid JSON "
                          "(the file is corrupted)") from None
    if not isinstance(sums, dict):
        raise RecordError(f"{p}: the {CHECKSUMS} metadata is not a JSON object")
    return {str(k): str(v) for k, v in sums.items()}
