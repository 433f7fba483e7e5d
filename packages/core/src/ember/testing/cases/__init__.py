"""The case modules; importing this package registers every case."""

from . import elementwise

__all__ = ["elementwise"]
