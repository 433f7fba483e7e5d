"""Datasets that need no download: scikit-learn's digits, and MNIST from local IDX files."""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .._creation import tensor
from .dataset import TensorDataset

__all__ = ["MNIST", "load_digits", "read_idx", "write_idx"]

# IDX type codes (LeCun's format description) and the big-endian numpy types they store
_IDX_TYPES: dict[int, str] = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
                              0x0E: ">f8"}


def load_digits(*, images: bool = True, normalize: bool = True) -> TensorDataset:
    """The 1,797 8x8 handwritten digits that scikit-learn ships (needs scikit-learn installed;
    its data file is read directly, which is much faster than importing scikit-learn).

    Returns a `TensorDataset` of ``(x, label)``: ``x`` is float32 ``[1, 8, 8]`` (``images``) or
    ``[64]``, scaled to ``[0, 1]`` when ``normalize``; labels are int64 in ``0..9``.

    Examples
    --------
    >>> from ember.data import load_digits
    >>> ds = load_digits()
    >>> len(ds), ds[0][0].shape
    (1797, (1, 8, 8))
    """
    table = np.loadtxt(_sklearn_file("digits.csv.gz"), delimiter=",", dtype=np.float32)
    x, target = table[:, :-1], table[:, -1].astype(np.int64)
    if normalize:
        x = x / np.float32(16.0)
    if images:
        x = x.reshape(-1, 1, 8, 8)
    return TensorDataset(tensor(np.ascontiguousarray(x)), tensor(target))


def _sklearn_file(name: str) -> Path:
    """A data file scikit-learn ships, found without importing scikit-learn (seconds)."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise ImportError("load_digits reads scikit-learn's shipped copy: pip install scikit-learn")
    path = Path(spec.origin).parent / "datasets" / "data" / name
    if not path.exists():
        raise FileNotFoundError(f"scikit-learn is installed but has no {path}")
    return path


def _open(path: Path) -> Any:
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")  # closed by caller


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Parse an IDX file (plain or gzip-compressed) into a numpy array of its native type.

    Raises
    ------
    ValueError
        When the magic number, the type code or the size does not fit, naming the file.
    """
    p = Path(path)
    try:
        with _open(p) as f:
            data = f.read()
    except (OSError, EOFError) as exc:
        raise ValueError(f"{p}: cannot read IDX data: {exc}") from exc
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{p}: not an IDX file (the magic number must start with two zero "
                         f"bytes, got {data[:4]!r})")
    code, ndim = data[2], data[3]
    if code not in _IDX_TYPES:
        raise ValueError(f"{p}: unknown IDX type code 0x{code:02X}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{p}: truncated IDX header ({len(data)} bytes, {ndim} dimensions)")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    dtype = np.dtype(_IDX_TYPES[code])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - header != expected:
        raise ValueError(f"{p}: IDX shape {list(shape)} of {dtype.name} needs {expected} bytes "
                         f"of data, the file has {len(data) - header}")
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="))


def write_idx(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` as an IDX file (gzip-compressed if the name ends in ``.gz``)."""
    arr = np.asarray(array)
    codes = [c for c, name in _IDX_TYPES.items() if np.dtype(name).newbyteorder("=") == arr.dtype]
    if not codes:
        raise ValueError(f"IDX cannot hold dtype {arr.dtype}")
    code, name = codes[0], _IDX_TYPES[codes[0]]
    head = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    body = arr.astype(np.dtype(name)).tobytes()
    opener: Any = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(head + body)


class MNIST(TensorDataset):
    """MNIST (or Fashion-MNIST) from the four IDX files in ``root``, plain or ``.gz``.

    Samples are ``(image, label)``: float32 ``[1, 28, 28]`` in ``[0, 1]`` and int64 labels.
    Nothing is downloaded.
    """

    files: ClassVar[dict[bool, tuple[str, str]]] = {
        True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
        False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
    }

    def __init__(self, root: str | os.PathLike[str], train: bool = True) -> None:
        base = Path(root)
        paths = [self._find(base, name) for name in self.files[train]]
        images, labels = read_idx(paths[0]), read_idx(paths[1])
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"{base}: images {images.shape} and labels {labels.shape} do not "
                             "form an MNIST split ([N, H, W] and [N])")
        x = (images.astype(np.float32) / np.float32(255.0))[:, None]
        super().__init__(tensor(x), tensor(labels.astype(np.int64)))

    @staticmethod
    def _find(base: Path, name: str) -> Path:
        for candidate in (base / name, base / f"{name}.gz", base / name.replace("-idx", ".idx")):
            if candidate.exists():
                return candidate
        raise FileNotFoundError(f"MNIST file {name}[.gz] not found in {base}")
