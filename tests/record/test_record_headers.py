"""Hostile safetensors headers: parsed in time linear in their size, and every malformed one
a `RecordError` naming the file (never a bare ValueError or RecursionError)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import RecordError, nn, optim, record


def _write(path: Path, header: bytes, data: bytes = b"") -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def _entry(shape: str, offsets: str = "[0, 4]") -> bytes:
    return f'{{"w": {{"dtype": "F32", "shape": {shape}, "data_offsets": {offsets}}}}}'.encode()


def test_a_long_shape_list_is_refused_in_linear_time(tmp_path: Path) -> None:
    # 2 MiB of "2," is a shape whose exact product has ~350,000 digits: quadratic to compute
    shape = "[" + ",".join(["2"] * (1 << 20)) + "]"
    path = _write(tmp_path / "long.safetensors", _entry(shape), b"\0" * 4)
    start = time.perf_counter()
    with pytest.raises(RecordError, match=r"long\.safetensors") as info:
        record.load_tensors(path)
    assert time.perf_counter() - start < 2.0
    assert "1048576 dimensions" in str(info.value)
    assert len(str(info.value)) < 1000  # the shape is shown cut short, not 2 MiB of it


@pytest.mark.parametrize("shape, offsets, why", [
    # 64 axes of 2**62: the product is past the file after two of them
    ("[" + ",".join([str(1 << 62)] * 64) + "]", "[0, 4]", "needs more bytes than the file"),
    ("[" + ",".join([str(1 << 62)] * 64) + "]", "[0, " + "9" * 4000 + "]",
     "needs data bytes 0..9999"),
    ("[" + ",".join(["1"] * 64) + "]", "[0, 8]", "needs 4 bytes, the offsets give 8"),
])
def test_a_shape_whose_size_lies_names_the_key(tmp_path: Path, shape: str, offsets: str,
                                               why: str) -> None:
    path = _write(tmp_path / "lie.safetensors", _entry(shape, offsets), b"\0" * 4)
    with pytest.raises(RecordError, match=r"lie\.safetensors: .*key 'w'") as info:
        record.load_tensors(path)
    assert why in str(info.value)


@pytest.mark.parametrize("header, why", [
    (_entry("[" + "9" * 4980 + "]"), "not valid JSON"),
    (_entry("[1]", "[0, " + "9" * 4980 + "]"), "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"w": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001, "nested too deeply"),
    (b"\xff\xfe{}", "not valid JSON"),
    (_entry("[4]", '"x"'), "invalid data_offsets"),
    (_entry("[-1]"), "invalid shape"),
    (b'{"w": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}', "not supported"),
])
def test_malformed_headers_are_record_errors_naming_the_file(tmp_path: Path, header: bytes,
                                                             why: str) -> None:
    path = _write(tmp_path / "bad.safetensors", header, b"\0" * 4)
    with pytest.raises(RecordError, match=r"bad\.safetensors") as info:
        record.load_tensors(path)
    assert why in str(info.value)


def _meta_file(tmp_path: Path, meta: dict[str, str]) -> Path:
    header = json.dumps({"__metadata__": meta, "w": {"dtype": "F32", "shape": [1],
                                                     "data_offsets": [0, 4]}}).encode()
    return _write(tmp_path / "meta.safetensors", header, b"\0" * 4)


@pytest.mark.parametrize("checksums", ["[" * 50_000 + "]" * 50_000, '{"w": ' + "9" * 4980 + "}",
                                       '{"w": [1]}'])
def test_malformed_checksum_metadata_is_a_record_error(tmp_path: Path, checksums: str) -> None:
    path = _meta_file(tmp_path, {"ember.checksums": checksums})
    with pytest.raises(RecordError, match=r"meta\.safetensors"):
        record.load_tensors(path)


def test_malformed_optimizer_metadata_is_a_record_error(tmp_path: Path) -> None:
    net = nn.Linear(2, 2)
    opt = optim.SGD(net.parameters(), lr=0.1)
    path = tmp_path / "opt.safetensors"
    record.save(opt, path)
    arrays, meta = record._format.read_file(path)
    meta["param_groups"] = "[" * 100_000 + "]" * 100_000
    record._format.write_file(path, arrays, meta)
    with pytest.raises(RecordError, match=r"opt\.safetensors"):
        record.load(opt, path)


def test_a_valid_record_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "ok.safetensors"
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    record.save_tensors(path, {"x": ember.tensor(x)})
    np.testing.assert_array_equal(record.load_tensors(path)[0]["x"].numpy(), x)
