"""The ``remote`` decorator's plugin: registers ``remote<HOST:PORT/INNER>``; imports nothing
heavy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.backend import DecoratorSpec
from ember.hookspecs import hookimpl

if TYPE_CHECKING:
    from .backend import RemoteBackend


def _factory(target: str, **options: Any) -> RemoteBackend:
    from .backend import RemoteBackend

    return RemoteBackend(target, **options)


@hookimpl
def ember_decorators_register() -> list[DecoratorSpec]:
    """``remote<HOST:PORT/INNER>``, with the option ``timeout=SECONDS``."""
    return [DecoratorSpec(name="remote", factory=_factory, plugin="remote", opaque=True,
                          description="ops run on another machine's device (ember-remote serve)")]


@hookimpl
def ember_conformance_skips(device: str) -> dict[str, str] | None:
    """Two cases build a second device of the base's family from the device registry, which
    a remote device (a decorator whose inner device is on the server) is not in; the same
    behaviour is tested for remote devices in ``packages/remote/tests/test_devices.py``."""
    if "remote<" not in device:
        return None
    why = ("builds a peer device from the registry's device families; remote<...> is an opaque "
           "decorator (see packages/remote/tests/test_devices.py for the same checks)")
    return {"error-two-devices-names-both": why,
            "error-unsupported-dtype-names-device-and-dtype": why}
