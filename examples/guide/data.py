"""The guide's data: scikit-learn's 8x8 digits (shipped, no download) or MNIST IDX files.

Both training and inference call `splits` with the seed saved in ``config.json``, so they see
the same test set.
"""

from __future__ import annotations

from typing import Any

from ember.data import MNIST, DataLoader, load_digits, random_split


def splits(data_dir: str | None = None, seed: int = 0) -> dict[str, Any]:
    """``{"train", "valid", "test"}`` datasets.

    digits: 1,797 images split 70/10/20 by ``seed``; MNIST: its own test set, and 10% of its
    training set as the validation split.
    """
    if data_dir is None:
        train, valid, test = random_split(load_digits(), [0.7, 0.1, 0.2], seed=seed)
    else:
        train, valid = random_split(MNIST(data_dir, train=True), [0.9, 0.1], seed=seed)
        test = MNIST(data_dir, train=False)
    return {"train": train, "valid": valid, "test": test}


def describe(data_dir: str | None, datasets: dict[str, Any]) -> str:
    """One line saying what the run trains on: the source and each split's size."""
    sizes = " / ".join(f"{len(ds):,} {name}" for name, ds in datasets.items())
    if data_dir is None:
        source = ("scikit-learn's digits (ember.data.load_digits: 1,797 8x8 handwritten digits "
                  "shipped inside scikit-learn, no download)")
    else:
        source = f"MNIST IDX files in {data_dir}"
    return f"data: {source}; split by seed: {sizes} images"


def image_size(dataset: Any) -> int:
    return int(dataset[0][0].shape[-1])


def loaders(datasets: dict[str, Any], batch_size: int, seed: int) -> dict[str, DataLoader]:
    """A shuffled training loader (its order depends on ``seed`` and the epoch only) and plain
    evaluation loaders."""
    return {name: DataLoader(ds, batch_size=batch_size if name == "train" else 256,
                             shuffle=name == "train", seed=seed if name == "train" else None)
            for name, ds in datasets.items()}
