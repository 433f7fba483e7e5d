"""Records: bit-exact round trips, precise load errors, corrupted files, atomic writes."""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ember
from ember import RecordError, nn, optim, record

AD = "autodiff<cpu>"


def _model(seed: int = 0) -> nn.Module:
    g = ember.Generator(seed)
    return nn.Sequential(nn.Conv2d(1, 2, 3, generator=g), nn.BatchNorm2d(2), nn.Flatten(),
                         nn.Linear(8, 3, generator=g))


def _snapshot(m: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.numpy().copy() for k, v in m.state_dict().items()}


def test_module_round_trips_bit_exactly(tmp_path: Path) -> None:
    src, dst = _model(0), _model(1)
    path = tmp_path / "m.safetensors"
    record.save(src, path)
    record.load(dst, path)
    a, b = _snapshot(src), _snapshot(dst)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int8", "uint8", "bool"])
def test_tensors_of_every_dtype_round_trip_bit_exactly(tmp_path: Path, dtype: str) -> None:
    t = (ember.arange(12) - 5).reshape(3, 4).to(dtype=dtype) if dtype != "bool" else (
        ember.arange(6) % 2 == 0)
    path = tmp_path / "t.safetensors"
    record.save_tensors(path, {"t": t, "empty": ember.zeros(0, 3)})
    out, meta = record.load_tensors(path)
    assert out["t"].dtype is t.dtype and out["t"].numpy().tobytes() == t.numpy().tobytes()
    assert out["empty"].shape == (0, 3)
    assert json.loads(meta["dtypes"]) == {"t": dtype, "empty": "float32"}


def test_metadata_names_version_kind_dtypes_and_paths(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    record.save(nn.Linear(2, 1), path, metadata={"note": "hello"})
    meta = record.read_metadata(path)
    assert meta["ember_version"] == ember.__version__ and meta["kind"] == "module"
    assert json.loads(meta["paths"]) == ["weight", "bias"]
    assert json.loads(meta["dtypes"]) == {"weight": "float32", "bias": "float32"}
    assert meta["note"] == "hello"


def test_ember_records_are_standard_safetensors_files(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    m = nn.Linear(3, 2)
    record.save(m, tmp_path / "m.safetensors")
    arrays = load_file(str(tmp_path / "m.safetensors"))
    np.testing.assert_array_equal(arrays["weight"], m.weight.numpy())


def test_missing_key_error_names_file_key_and_both_values_and_changes_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "small.safetensors"
    record.save_tensors(path, {"weight": ember.ones(2, 3)})
    m = nn.Linear(3, 2)
    before = _snapshot(m)
    with pytest.raises(RecordError) as info:
        record.load(m, path)
    text = str(info.value)
    assert str(path) in text and "missing key 'bias'" in text and "float32 [2]" in text
    assert all(np.array_equal(before[k], v) for k, v in _snapshot(m).items())
    result = record.load(m, path, strict=False)
    assert result.missing_keys == ["bias"]
    assert m.weight.tolist() == [[1.0] * 3] * 2


def test_extra_key_error_names_the_key_and_its_value(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    record.save_tensors(path, {**nn.Linear(3, 2).state_dict(), "head.weight": ember.ones(4)})
    with pytest.raises(RecordError, match=r"unexpected key 'head.weight': the file has "
                                          r"float32 \[4\]"):
        record.load(nn.Linear(3, 2), path)


def test_wrong_shape_and_dtype_errors_name_both_values_and_change_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    record.save_tensors(path, {"weight": ember.ones(3, 3),
                               "bias": ember.ones(2, dtype=ember.float16)})
    m = nn.Linear(3, 2)
    before = _snapshot(m)
    with pytest.raises(RecordError) as info:
        record.load(m, path)
    text = str(info.value)
    assert "key 'weight': shape mismatch: the module has float32 [2, 3], the file has " \
           "float32 [3, 3]" in text
    assert "key 'bias': dtype mismatch: the module has float32 [2], the file has " \
           "float16 [2]" in text
    assert all(np.array_equal(before[k], v) for k, v in _snapshot(m).items())


def test_cast_on_load_converts_dtypes(tmp_path: Path) -> None:
    src = nn.Linear(3, 2).to(ember.float16)
    path = tmp_path / "half.safetensors"
    record.save(src, path)
    dst = nn.Linear(3, 2)
    record.load(dst, path, cast=True)
    assert dst.weight.dtype is ember.float32
    np.testing.assert_array_equal(dst.weight.numpy(), src.weight.numpy().astype(np.float32))


def test_loading_into_an_autodiff_module_keeps_parameters_trainable(tmp_path: Path) -> None:
    src = _model(0)
    record.save(src, tmp_path / "m.safetensors")
    dst = _model(1).to(AD)
    weight = dst[3].weight
    record.load(dst, tmp_path / "m.safetensors")
    assert dst[3].weight is weight and weight.requires_grad
    np.testing.assert_array_equal(weight.numpy(), src[3].weight.numpy())


def _good_file(tmp_path: Path) -> Path:
    path = tmp_path / "good.safetensors"
    record.save(_model(0), path)
    return path


@pytest.mark.parametrize("keep", [0, 5, 8, 40, -1])
def test_truncated_file_is_a_record_error_naming_the_file(tmp_path: Path, keep: int) -> None:
    path = _good_file(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[:-3])
    m = _model(1)
    before = _snapshot(m)
    with pytest.raises(RecordError, match=str(path).replace(".", r"\.")):
        record.load(m, path)
    assert all(np.array_equal(before[k], v) for k, v in _snapshot(m).items())


def test_flipped_data_byte_is_caught_by_the_checksum(tmp_path: Path) -> None:
    path = _good_file(tmp_path)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RecordError, match=r"checksum mismatch .* the file is corrupted"):
        record.load(_model(1), path)


@pytest.mark.parametrize("header", [b"{not json", b"[1, 2]",
                                    b'{"a": {"dtype": "F32", "shape": [4], '
                                    b'"data_offsets": [0, 8]}}',
                                    b'{"a": {"dtype": "C64", "shape": [1], '
                                    b'"data_offsets": [0, 8]}}',
                                    b'{"a": {"dtype": "F32", "shape": [-1], '
                                    b'"data_offsets": [0, 4]}}'])
def test_corrupted_header_is_a_clear_record_error(tmp_path: Path, header: bytes) -> None:
    path = tmp_path / "h.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 8)
    with pytest.raises(RecordError, match=r"h\.safetensors"):
        record.load_tensors(path)


def test_garbage_and_missing_files_are_record_errors(tmp_path: Path) -> None:
    path = tmp_path / "garbage.safetensors"
    path.write_bytes(os.urandom(64))
    with pytest.raises(RecordError, match="not a valid safetensors record"):
        record.load_tensors(path)
    with pytest.raises(RecordError, match="cannot read"):
        record.load_tensors(tmp_path / "absent.safetensors")


def test_a_pickle_file_is_rejected_without_being_unpickled(tmp_path: Path) -> None:
    import pickle

    class Bomb:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, ("touch " + str(tmp_path / "exploded"),))

    path = tmp_path / "evil.safetensors"
    path.write_bytes(pickle.dumps(Bomb()))
    with pytest.raises(RecordError):
        record.load(_model(0), path)
    assert not (tmp_path / "exploded").exists()


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    record.save(_model(0), path)
    record.save(_model(1), path)  # overwrite
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]
    record.load(_model(2), path)


def test_failed_save_keeps_the_previous_file(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.safetensors"
    record.save(_model(0), path)
    old = path.read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        record.save(_model(1), path)
    assert path.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]


def test_remapping_renames_and_drops_keys(tmp_path: Path) -> None:
    src = nn.Linear(3, 2)
    path = tmp_path / "other.safetensors"
    record.save_tensors(path, {"module.fc.weight": src.weight, "module.fc.bias": src.bias,
                               "module.step": ember.zeros(1)})
    dst = nn.Linear(3, 2)
    record.load(dst, path, remap=[*record.strip_prefix("module."), (r"^fc\.", ""),
                                  (r"^step$", None)])
    assert dst.weight.tolist() == src.weight.tolist()


def test_remapping_two_keys_onto_one_is_an_error() -> None:
    with pytest.raises(RecordError, match=r"sends both 'a\.x' and 'b\.x' to 'x'"):
        record.remap_keys({"a.x": 1, "b.x": 2}, [(r"^\w\.", "")])


def test_optimizer_state_round_trips_and_resumes_identically(tmp_path: Path) -> None:
    def run(model: nn.Module, opt: optim.Optimizer, steps: int) -> None:
        x = ember.ones(2, 1, 4, 4, device=AD)
        for _ in range(steps):
            opt.step((model(x) ** 2).mean().backward())

    torch_free = _model(0).to(AD)
    opt = optim.Adam(torch_free.parameters(), lr=1e-2, amsgrad=True)
    run(torch_free, opt, 3)
    record.save(torch_free, tmp_path / "m.safetensors")
    record.save(opt, tmp_path / "o.safetensors")
    run(torch_free, opt, 2)

    resumed = _model(5).to(AD)
    record.load(resumed, tmp_path / "m.safetensors")
    opt2 = optim.Adam(resumed.parameters(), lr=0.5)
    record.load(opt2, tmp_path / "o.safetensors")
    assert opt2.param_groups[0]["lr"] == 1e-2 and opt2.param_groups[0]["betas"] == (0.9, 0.999)
    run(resumed, opt2, 2)
    for k, v in torch_free.state_dict().items():
        assert v.numpy().tobytes() == resumed.state_dict()[k].numpy().tobytes(), k


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_state_round_trips_and_resumes_identically(tmp_path: Path,
                                                         line_search_fn: str | None) -> None:
    # LBFGS keeps flat vectors, lists of them (the curvature history) and host numbers
    g = ember.Generator(3)
    x = ember.randn(16, 4, generator=g, device=AD)
    y = ember.randn(16, 2, generator=g, device=AD)

    def start(seed: int) -> tuple[nn.Module, optim.LBFGS]:
        model = nn.Sequential(nn.Linear(4, 3, generator=ember.Generator(seed)), nn.Tanh(),
                              nn.Linear(3, 2, generator=ember.Generator(seed + 1))).to(AD)
        model = model.to(ember.float64)
        return model, optim.LBFGS(model.parameters(), lr=0.5, max_iter=3, history_size=4,
                                  line_search_fn=line_search_fn)

    def run(model: nn.Module, opt: optim.LBFGS, steps: int) -> list[float]:
        def closure() -> Any:
            loss = ((model(x.to(ember.float64)) - y.to(ember.float64)) ** 2).mean()
            return loss, loss.backward()
        return [float(opt.step(closure).item()) for _ in range(steps)]

    model, opt = start(0)
    first = run(model, opt, 3)
    assert len(opt.state[id(opt.param_groups[0]["params"][0])]["old_dirs"]) == 4  # it rotated
    record.save(model, tmp_path / "m.safetensors")
    record.save(opt, tmp_path / "o.safetensors")
    straight = run(model, opt, 3)
    assert straight[-1] < first[0]  # it trains

    resumed, opt2 = start(7)
    record.load(resumed, tmp_path / "m.safetensors")
    record.load(opt2, tmp_path / "o.safetensors")
    assert run(resumed, opt2, 3) == straight
    for k, v in model.state_dict().items():
        assert v.numpy().tobytes() == resumed.state_dict()[k].numpy().tobytes(), k

    # the state matters: a fresh optimizer from the same weights takes other steps
    fresh, opt3 = start(7)
    record.load(fresh, tmp_path / "m.safetensors")
    assert run(fresh, opt3, 3) != straight


def test_lbfgs_record_missing_a_history_tensor_names_it(tmp_path: Path) -> None:
    from ember.record._format import read_file, write_file

    w = ember.tensor([1.0, -2.0], device=AD, requires_grad=True)
    opt = optim.LBFGS([w], max_iter=4)
    opt.step(lambda: ((w - 3.0) ** 4).sum())
    record.save(opt, tmp_path / "o.safetensors")
    arrays, meta = read_file(tmp_path / "o.safetensors")
    assert "state.0.old_dirs.0" in arrays
    del arrays["state.0.old_dirs.0"]
    write_file(tmp_path / "bad.safetensors", arrays, meta)
    with pytest.raises(RecordError, match=r"bad.safetensors.*'state.0.old_dirs.0'"):
        record.load(optim.LBFGS([w], max_iter=4), tmp_path / "bad.safetensors")


def test_scheduler_state_round_trips(tmp_path: Path) -> None:
    opt = optim.SGD([ember.zeros(1)], lr=1.0)
    sched = optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    for _ in range(5):
        sched.step()
    record.save(sched, tmp_path / "s.safetensors")
    opt2 = optim.SGD([ember.zeros(1)], lr=1.0)
    sched2 = optim.lr_scheduler.StepLR(opt2, 2, gamma=0.5)
    record.load(sched2, tmp_path / "s.safetensors")
    assert sched2.last_epoch == 5 and opt2.param_groups[0]["lr"] == 0.25


def test_loading_a_module_record_into_an_optimizer_says_what_the_file_holds(
        tmp_path: Path) -> None:
    record.save(nn.Linear(1, 1), tmp_path / "m.safetensors")
    opt = optim.SGD([ember.zeros(1)], lr=1.0)
    with pytest.raises(RecordError, match="holds 'module', not 'optimizer'"):
        record.load(opt, tmp_path / "m.safetensors")


def test_optimizer_record_of_another_model_names_parameter_and_shapes(tmp_path: Path) -> None:
    a = nn.Linear(3, 2)
    opt = optim.Adam(a.parameters())
    opt.step({p: ember.ones_like(p) for p in a.parameters()})
    record.save(opt, tmp_path / "o.safetensors")
    b = nn.Linear(2, 3)
    opt_b = optim.Adam(b.parameters(), lr=0.5)
    with pytest.raises(RecordError, match=r"o\.safetensors.*state 'exp_avg' of parameter 0 is "
                                          r"float32 \[2, 3\], the parameter is float32 \[3, 2\]"):
        record.load(opt_b, tmp_path / "o.safetensors")
    assert opt_b.param_groups[0]["lr"] == 0.5 and opt_b.state == {}


def _load_in_a_child(path: Path) -> str:
    """Load ``path`` in a child process limited to 2 GiB of address space and 60 seconds, and
    return its stderr: a reader that waits on a FIFO or reads ``/dev/zero`` without limit fails
    the test instead of hanging CI or exhausting the machine's memory."""
    import resource
    import subprocess
    import sys

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    code = "import sys\nfrom ember import record\nrecord.load_tensors(sys.argv[1])\n"
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=60, preexec_fn=limit, check=False)
    assert proc.returncode == 1, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo and resource")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "pipe.safetensors"
    os.mkfifo(path)
    assert re.search(r"RecordError: .*pipe\.safetensors: .*a FIFO \(named pipe\), not a "
                     r"regular file", _load_in_a_child(path))


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_link_to_dev_zero_is_refused_naming_link_and_target(tmp_path: Path) -> None:
    path = tmp_path / "zero.safetensors"
    path.symlink_to("/dev/zero")
    assert re.search(r"RecordError: .*zero\.safetensors: .*symbolic link to /dev/zero, which "
                     r"is a character device, not a regular file", _load_in_a_child(path))
    with pytest.raises(RecordError, match="character device"):
        record.load(_model(0), path)


def test_a_folder_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dir.safetensors"
    path.mkdir()
    with pytest.raises(RecordError, match=r"dir\.safetensors: .*a folder, not a regular file"):
        record.read_metadata(path)


def test_a_link_to_a_regular_record_is_followed(tmp_path: Path) -> None:
    record.save_tensors(tmp_path / "real.safetensors", {"w": ember.arange(3)})
    (tmp_path / "link.safetensors").symlink_to(tmp_path / "real.safetensors")
    out, _ = record.load_tensors(tmp_path / "link.safetensors")
    assert out["w"].tolist() == [0, 1, 2]


def _raw_record(path: Path, header: dict[str, object], body: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + body)


def test_a_header_longer_than_the_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "long.safetensors"
    path.write_bytes(struct.pack("<Q", 50_000_000) + b'{"a": 1}')
    with pytest.raises(RecordError, match=r"long\.safetensors: .*16 bytes.*header claims "
                                          r"50000000 bytes but the file has 8"):
        record.load_tensors(path)


@pytest.mark.parametrize("shape", [[1 << 20, 1 << 20], [1 << 40, 1 << 40, 1 << 40]])
def test_a_header_lying_about_a_shape_names_file_and_key(tmp_path: Path,
                                                         shape: list[int]) -> None:
    # offsets that agree with the lying shape but point far past the end of the file: the
    # reader must refuse from the header alone (an int64 product would wrap for the second)
    path = tmp_path / "lie.safetensors"
    need = int(np.prod(shape, dtype=object)) * 4
    _raw_record(path, {"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, need]}},
                b"\x00" * 16)
    with pytest.raises(RecordError, match=rf"lie\.safetensors: .*key 'w': shape "
                                          rf"\[{shape[0]}, .*needs data bytes 0\.\.{need} "
                                          r"but the file has 16 after the header"):
        record.load_tensors(path)


def test_offsets_that_disagree_with_dtype_times_shape_name_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "off.safetensors"
    _raw_record(path, {"w": {"dtype": "F64", "shape": [2, 3], "data_offsets": [0, 24]}},
                b"\x00" * 24)
    with pytest.raises(RecordError, match=r"off\.safetensors: .*key 'w': shape \[2, 3\] of F64 "
                                          r"needs 48 bytes, the offsets give 24"):
        record.load_tensors(path)


def test_a_record_truncated_inside_its_data_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "cut.safetensors"
    record.save_tensors(path, {"a": ember.ones(4), "b": ember.ones(1000)})
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(RecordError, match=r"cut\.safetensors: .*key 'b': .*needs data bytes "
                                          r"16\.\.4016 but the file has 3916"):
        record.load_tensors(path)
