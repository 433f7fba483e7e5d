"""The case modules; importing this package registers every case."""

from . import elementwise, indexing, linalg, movement, nn, reduction

__all__ = ["elementwise", "indexing", "linalg", "movement", "nn", "reduction"]
