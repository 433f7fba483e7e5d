"""ember's exception types.  Each subclasses the builtin a PyTorch or numpy user would catch."""

from __future__ import annotations

__all__ = [
    "DTypeError",
    "DeviceMismatchError",
    "DivisionByZeroError",
    "DeviceUnavailableError",
    "EmberPluginWarning",
    "RecordError",
    "ShapeError",
]


class ShapeError(ValueError):
    """Shapes that do not fit together; the message names every shape involved."""


class DeviceMismatchError(RuntimeError):
    """Tensors of two devices meet in one op; the message names both devices."""


class DeviceUnavailableError(RuntimeError):
    """A device whose hardware or driver is absent; the message gives the probe's reason."""


class DivisionByZeroError(ZeroDivisionError, RuntimeError):
    """Integer ``//`` or ``%`` by zero (PyTorch raises a RuntimeError "ZeroDivisionError")."""


class DTypeError(TypeError):
    """A dtype the device or the op does not support; the message names both."""


class RecordError(ValueError):
    """A record (checkpoint) that cannot be loaded: names the file and the key."""


class EmberPluginWarning(UserWarning):
    """A plugin failed to import or register and was skipped."""
