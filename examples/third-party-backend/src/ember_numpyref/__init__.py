"""ember-backend-numpyref: every ember primitive on plain numpy, written to be read."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
