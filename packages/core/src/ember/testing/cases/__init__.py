"""The case modules; importing this package registers every case."""

from . import (
    creation,
    elementwise,
    errors,
    functional,
    indexing,
    linalg,
    losses,
    movement,
    nn,
    promotion,
    reduction,
    sampling,
    sets,
)

__all__ = ["creation", "elementwise", "errors", "functional", "indexing", "linalg", "losses",
           "movement", "nn", "promotion", "reduction", "sampling", "sets"]
