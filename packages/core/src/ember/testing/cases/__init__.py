"""The case modules; importing this package registers every case."""

from . import creation, elementwise, functional, indexing, linalg, movement, nn, reduction

__all__ = ["creation", "elementwise", "functional", "indexing", "linalg", "movement", "nn", "reduction"]
