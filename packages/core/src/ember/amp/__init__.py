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

from ._autocast import (
    autocast as autocast,
    get_autocast_dtype as get_autocast_dtype,
    is_autocast_enabled as is_autocast_enabled,
)
from ._policy import policy_table as policy_table

__all__ = ["autocast", "get_autocast_dtype", "is_autocast_enabled", "policy_table"]
