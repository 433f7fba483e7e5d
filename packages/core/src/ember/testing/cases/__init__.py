"""The case modules; importing this package registers every case."""

from . import (
    composites,
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
    serving,
    sets,
)

__all__ = ["composites", "creation", "elementwise", "errors", "functional", "indexing", "linalg",
           "losses", "movement", "nn", "promotion", "reduction", "sampling", "serving", "sets"]
