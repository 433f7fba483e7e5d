"""The case modules; importing this package registers every case."""

from . import elementwise, functional, indexing, linalg, movement, nn, reduction

__all__ = ["elementwise", "functional", "indexing", "linalg", "movement", "nn", "reduction"]
