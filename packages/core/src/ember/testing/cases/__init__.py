"""The case modules; importing this package registers every case."""

from . import (
    creation,
    elementwise,
    errors,
    functional,
    indexing,
    linalg,
    movement,
    nn,
    promotion,
    reduction,
)

__all__ = ["creation", "elementwise", "errors", "functional", "indexing", "linalg", "movement",
           "nn", "promotion", "reduction"]
