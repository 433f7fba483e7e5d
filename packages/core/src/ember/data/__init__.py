"""Datasets, transforms and the `DataLoader`.

Examples
--------
>>> import ember
>>> from ember.data import DataLoader, TensorDataset
>>> ds = TensorDataset(ember.randn(8, 3), ember.arange(8))
>>> next(iter(DataLoader(ds, batch_size=4)))[0].shape
(4, 3)
"""

from __future__ import annotations

from . import transforms as transforms
from .collate import default_collate as default_collate
from .dataset import (
    ConcatDataset as ConcatDataset,
    Dataset as Dataset,
    Subset as Subset,
    TensorDataset as TensorDataset,
    TransformedDataset as TransformedDataset,
    permutation as permutation,
    random_split as random_split,
)
from .datasets import (
    MNIST as MNIST,
    load_digits as load_digits,
    read_idx as read_idx,
    write_idx as write_idx,
)
from .loader import DataLoader as DataLoader
from .sampler import DistributedSampler as DistributedSampler
