"""Mixed precision: `autocast` regions and the `GradScaler` for float16 training.

Examples
--------
>>> import ember
>>> x = ember.ones(2, 2)
>>> with ember.amp.autocast("cpu", dtype=ember.bfloat16):
...     (x @ x).dtype
ember.bfloat16
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._autocast import (
    autocast as autocast,
    get_autocast_dtype as get_autocast_dtype,
    is_autocast_enabled as is_autocast_enabled,
)
from ._policy import policy_table as policy_table

if TYPE_CHECKING:
    from ._grad_scaler import GradScaler as GradScaler

__all__ = ["GradScaler", "autocast", "get_autocast_dtype", "is_autocast_enabled", "policy_table"]


def __getattr__(name: str) -> Any:
    # GradScaler is imported on first use: this package is imported by ember._apply, before
    # ember's tensor type exists
    if name == "GradScaler":
        from ._grad_scaler import GradScaler

        return GradScaler
    raise AttributeError(f"module 'ember.amp' has no attribute {name!r}")
