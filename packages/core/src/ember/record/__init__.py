"""Records: modules, optimizers and schedulers saved as safetensors files (never pickle).

Examples
--------
>>> import ember, tempfile, os
>>> from ember import nn, record
>>> path = os.path.join(tempfile.mkdtemp(), "net.safetensors")
>>> record.save(nn.Linear(2, 2), path)
>>> record.read_metadata(path)["kind"]
'module'
"""

from __future__ import annotations

from .._errors import RecordError as RecordError
from ._records import (
    load as load,
    load_tensors as load_tensors,
    read_metadata as read_metadata,
    save as save,
    save_tensors as save_tensors,
)
from .remap import (
    HF_LAYER_NORM as HF_LAYER_NORM,
    Rule as Rule,
    remap_keys as remap_keys,
    strip_prefix as strip_prefix,
)
