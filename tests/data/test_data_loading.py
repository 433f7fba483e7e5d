"""Datasets, splitting, transforms and the DataLoader (order, workers, batching)."""

from __future__ import annotations

import gzip
import threading
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.data import (
    MNIST,
    DataLoader,
    Dataset,
    TensorDataset,
    default_collate,
    load_digits,
    random_split,
    read_idx,
    transforms as T,
    write_idx,
)


def _ds(n: int = 23) -> TensorDataset:
    return TensorDataset(ember.arange(n * 2.0).reshape(n, 2), ember.arange(n))


def _labels(loader: DataLoader) -> list[list[int]]:
    return [y.tolist() for _, y in loader]


def test_batches_cover_the_dataset_in_order_without_shuffle() -> None:
    assert _labels(DataLoader(_ds(10), batch_size=4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_drop_last_leaves_out_the_short_batch() -> None:
    loader = DataLoader(_ds(10), batch_size=4, drop_last=True)
    assert _labels(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]] and len(loader) == 2


def test_same_seed_gives_the_same_shuffled_order() -> None:
    a = _labels(DataLoader(_ds(), batch_size=5, shuffle=True, seed=3))
    b = _labels(DataLoader(_ds(), batch_size=5, shuffle=True, seed=3))
    c = _labels(DataLoader(_ds(), batch_size=5, shuffle=True, seed=4))
    assert a == b and a != c
    assert sorted(v for batch in a for v in batch) == list(range(23))


def test_each_epoch_has_its_own_order_and_set_epoch_replays_one() -> None:
    loader = DataLoader(_ds(), batch_size=5, shuffle=True, seed=3)
    first, second = _labels(loader), _labels(loader)
    assert first != second
    loader.set_epoch(0)
    assert _labels(loader) == first


def test_same_generator_state_gives_the_same_order() -> None:
    a = _labels(DataLoader(_ds(), batch_size=5, shuffle=True, generator=ember.Generator(9)))
    b = _labels(DataLoader(_ds(), batch_size=5, shuffle=True, generator=ember.Generator(9)))
    assert a == b


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_worker_threads_give_the_same_batches_as_none(workers: int) -> None:
    ds = _ds(37)
    plain = DataLoader(ds, batch_size=4, shuffle=True, seed=1)
    threaded = DataLoader(ds, batch_size=4, shuffle=True, seed=1, num_workers=workers,
                          prefetch_factor=2)
    for (x0, y0), (x1, y1) in zip(plain, threaded, strict=True):
        assert x0.tolist() == x1.tolist() and y0.tolist() == y1.tolist()


def test_workers_really_load_in_other_threads() -> None:
    seen: set[str] = set()

    class Recording(Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int) -> int:
            seen.add(threading.current_thread().name)
            return i

    batches = [b.tolist() for b in DataLoader(Recording(), batch_size=2, num_workers=2)]
    assert batches == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert seen and all(name.startswith("ember-data") for name in seen)


def test_an_error_in_a_worker_reaches_the_consumer() -> None:
    class Failing(Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> int:
            if i == 3:
                raise KeyError("sample 3 is broken")
            return i

    with pytest.raises(KeyError, match="sample 3"):
        list(DataLoader(Failing(), batch_size=2, num_workers=2))


def test_custom_collate_fn_receives_the_list_of_samples() -> None:
    loader = DataLoader(_ds(4), batch_size=2, collate_fn=lambda s: [int(y) for _, y in s])
    assert list(loader) == [[0, 1], [2, 3]]


def test_default_collate_stacks_nested_samples() -> None:
    batch = default_collate([{"x": ember.ones(2), "y": 1}, {"x": ember.zeros(2), "y": 0}])
    assert batch["x"].shape == (2, 2) and batch["y"].tolist() == [1, 0]


def test_tensor_dataset_rejects_tensors_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="tensor 1 has shape"):
        TensorDataset(ember.zeros(3, 2), ember.zeros(4))


def test_random_split_is_a_seeded_partition() -> None:
    ds = _ds(10)
    a, b = random_split(ds, [7, 3], seed=0)
    assert sorted(a.indices + b.indices) == list(range(10))
    assert random_split(ds, [7, 3], seed=0)[0].indices == a.indices
    assert random_split(ds, [7, 3], seed=1)[0].indices != a.indices
    assert [len(s) for s in random_split(ds, [0.5, 0.3, 0.2], seed=0)] == [5, 3, 2]
    with pytest.raises(ValueError, match="do not add up"):
        random_split(ds, [4, 4], seed=0)


def test_subset_batches_come_from_the_right_rows() -> None:
    train, _ = random_split(_ds(10), [6, 4], seed=5)
    (_, y), = list(DataLoader(train, batch_size=6))
    assert y.tolist() == train.indices


def test_transforms_apply_per_sample() -> None:
    ds = TensorDataset(ember.tensor([[0, 255], [255, 0]], dtype="uint8"), ember.arange(2))
    mapped = ds.map(T.OnInput(T.Compose([T.ToTensor(), T.Normalize(0.5, 0.5)])))
    x, y = mapped[0]
    assert x.tolist() == [-1.0, 1.0] and int(y) == 0
    assert next(iter(DataLoader(mapped, batch_size=2)))[0].shape == (2, 2)


def test_loader_moves_batches_to_the_device() -> None:
    x, _ = next(iter(DataLoader(_ds(4), batch_size=2, device="autodiff<cpu>")))
    assert str(x.device) == "autodiff<cpu>"


def test_load_digits_reads_scikit_learns_copy() -> None:
    sk = pytest.importorskip("sklearn.datasets")
    ds = load_digits()
    ref = sk.load_digits()
    x, y = ds.tensors
    assert x.shape == (1797, 1, 8, 8) and x.dtype is ember.float32 and y.dtype is ember.int64
    np.testing.assert_allclose(x.numpy().reshape(1797, 64), ref.data / 16.0, rtol=1e-6)
    np.testing.assert_array_equal(y.numpy(), ref.target)
    flat = load_digits(images=False, normalize=False)
    assert flat.tensors[0].shape == (1797, 64) and float(flat.tensors[0].numpy().max()) == 16.0


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "float32", "float64"])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_files_round_trip(tmp_path: Path, dtype: str, suffix: str) -> None:
    arr = (np.arange(24).reshape(2, 3, 4) * 3 - 20).astype(dtype)
    if dtype == "uint8":
        arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / f"a.idx{suffix}"
    write_idx(path, arr)
    out = read_idx(path)
    assert out.dtype == arr.dtype and out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)


def test_idx_parser_reads_big_endian_bytes_written_by_hand(tmp_path: Path) -> None:
    # magic 0x00000C02 (int32, 2 dims), dims 2 x 2, then big-endian int32 values
    raw = bytes([0, 0, 0x0C, 2, 0, 0, 0, 2, 0, 0, 0, 2]) + np.array(
        [1, -2, 300, 70000], dtype=">i4").tobytes()
    (tmp_path / "m.idx").write_bytes(raw)
    assert read_idx(tmp_path / "m.idx").tolist() == [[1, -2], [300, 70000]]


@pytest.mark.parametrize(("data", "message"), [
    (b"\x01\x00\x08\x01\x00\x00\x00\x02\x01\x02", "not an IDX file"),
    (b"\x00\x00\x07\x01\x00\x00\x00\x02\x01\x02", "unknown IDX type code 0x07"),
    (b"\x00\x00\x08\x02\x00\x00", "truncated IDX header"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x03\x01\x02", "needs 3 bytes"),
])
def test_malformed_idx_files_are_clear_errors(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.idx"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=message):
        read_idx(path)


def test_mnist_loads_the_four_idx_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1, 5], dtype=np.uint8)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", images)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", images[:2])
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", labels[:2])
    train, test = MNIST(tmp_path), MNIST(tmp_path, train=False)
    assert len(train) == 5 and len(test) == 2
    x, y = train[2]
    assert x.shape == (1, 28, 28) and int(y) == 4
    np.testing.assert_allclose(x.numpy()[0], images[2] / 255.0, rtol=1e-6)
    with gzip.open(tmp_path / "train-images-idx3-ubyte.gz", "rb") as f:
        assert f.read(4) == b"\x00\x00\x08\x03"


def test_mnist_without_files_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        MNIST(tmp_path)
