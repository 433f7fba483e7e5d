"""The case modules; importing this package registers every case."""

from . import elementwise, movement, reduction

__all__ = ["elementwise", "movement", "reduction"]
