"""Which device strings a server accepts, decided by parsing alone: nothing is built first.

A client names the device it wants as text.  Building a device runs plugin code (a decorator's
factory, which for ``remote<...>`` opens a connection, and for ``fusion<cpu,threads=N>`` a
thread pool), and core caches every device built, so the server parses the text into its
stack, renders that canonically and looks it up in a finite allow-list.  Only an allow-list
entry is ever built, from the operator's own string, so the text a client sends never reaches
``ember.device``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import ember

__all__ = ["DEFAULT_DECORATORS", "AllowList", "DeviceString", "parse_device"]

#: the decorators put around each available device when ``--devices`` is not given: only
#: those known to run locally without options (autodiff is useless on a server: its graph
#: lives in tensor objects; ``remote`` and any third party's decorator must be listed)
DEFAULT_DECORATORS = ("fusion",)
#: decorators that name something elsewhere: a server never builds them
FORWARDING = frozenset({"remote"})
MAX_LENGTH = 256
_NAME = re.compile(r"[A-Za-z_][\w\-]*")
_ATOM = re.compile(r"([A-Za-z_][\w\-]*)(?::(\d{1,6}))?")


@dataclass(frozen=True)
class DeviceString:
    """A device string parsed into its stack, outermost decorator first.

    ``layers`` holds ``(decorator, options)`` pairs, options as sorted ``(key, value)`` text
    pairs; ``base`` is the device at the bottom (``cpu``, ``cuda:0``) or, under a decorator
    in `FORWARDING`, the text it was given.

    Examples
    --------
    >>> from ember_remote._devices import parse_device
    >>> d = parse_device("fusion< cpu , threads=8 >")
    >>> d.layers, d.base, str(d)
    ((('fusion', (('threads', '8'),)),), 'cpu', 'fusion<cpu,threads=8>')
    """

    layers: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    base: str

    @property
    def forwards(self) -> bool:
        """Whether any layer names a device on another machine."""
        return any(name in FORWARDING for name, _ in self.layers)

    @property
    def has_options(self) -> bool:
        return any(opts for _, opts in self.layers)

    def __str__(self) -> str:
        text = self.base
        for name, opts in reversed(self.layers):
            text = f"{name}<{text}{''.join(f',{k}={v}' for k, v in opts)}>"
        return text


def parse_device(text: object) -> DeviceString:
    """Parse a device string into its stack without building anything (a `ValueError` for
    anything malformed; the grammar is core's: ``name[:index]`` wrapped by
    ``decorator<inner[,key=value]*>``).

    Examples
    --------
    >>> from ember_remote._devices import parse_device
    >>> parse_device("autodiff<remote<10.0.0.9:7878/cpu>>").forwards
    True
    """
    if not isinstance(text, str):
        raise ValueError("a device string must be text")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"a device string of {len(text)} characters (at most {MAX_LENGTH})")
    s = "".join(text.split())
    layers: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    while "<" in s:
        lt = s.index("<")
        name = s[:lt]
        if not _NAME.fullmatch(name) or not s.endswith(">"):
            raise ValueError(f"malformed device string {text!r}")
        body = s[lt + 1:-1]
        depth, cut = 0, len(body)
        for i, ch in enumerate(body):
            depth += (ch == "<") - (ch == ">")
            if depth < 0:
                raise ValueError(f"malformed device string {text!r}: unbalanced '>'")
            if ch == "," and depth == 0:
                cut = i
                break
        options: dict[str, str] = {}
        for item in body[cut + 1:].split(",") if cut < len(body) else ():
            key, eq, value = item.partition("=")
            if not eq or not _NAME.fullmatch(key) or not re.fullmatch(r"[\w.\-]+", value):
                raise ValueError(f"malformed option {item!r} in device string {text!r}")
            options[key] = value
        layers.append((name, tuple(sorted(options.items()))))
        s = body[:cut]
        if name in FORWARDING:  # the rest is an address: not parsed as a local device
            return DeviceString(tuple(layers), s)
    if not _ATOM.fullmatch(s):
        raise ValueError(f"malformed device string {text!r}: expected name[:index] at its "
                         "core")
    return DeviceString(tuple(layers), s)


class AllowList:
    """The finite set of devices a server serves, by canonical string.

    ``entries`` are the operator's device strings (``--devices``); none means every
    available device and `DEFAULT_DECORATORS` directly around each, without options.
    An entry that forwards (``remote<...>``) is an error.
    """

    def __init__(self, entries: Iterable[str] = ()) -> None:
        rows = ember.devices()
        #: indexed families (their rows read ``name:N``): ``cuda`` means ``cuda:0``
        self.indexed = {r.name.split(":")[0] for r in rows if r.kind == "device"
                        and ":" in r.name}
        given = list(entries)
        if not given:
            atoms = [r.name for r in rows if r.kind == "device" and r.available]
            decorators = {r.name.split("<")[0] for r in rows if r.kind == "decorator"}
            given = atoms + [f"{d}<{a}>" for d in DEFAULT_DECORATORS if d in decorators
                             for a in atoms]
        self.served: dict[str, str] = {}
        for entry in given:
            parsed = parse_device(entry)
            if parsed.forwards:
                raise ValueError(f"--devices {entry!r}: a server never serves a remote<...> "
                                 "device (it would connect to another server for its clients)")
            self.served.setdefault(self.canonical(parsed), entry)

    def canonical(self, parsed: DeviceString) -> str:
        base = parsed.base
        if base in self.indexed:
            base = f"{base}:0"
        return str(DeviceString(parsed.layers, base))

    def resolve(self, text: object) -> str:
        """The allow-list entry that ``text`` names (to build), or a `PermissionError` saying
        why not."""
        try:
            parsed = parse_device(text)
        except ValueError as exc:
            raise PermissionError(str(exc)) from None
        if parsed.forwards:
            raise PermissionError(f"device {text!r} names another server: this server never "
                                  "connects anywhere for its clients")
        entry = self.served.get(self.canonical(parsed))
        if entry is None:
            why = " (device options are fixed by the server)" if parsed.has_options else ""
            raise PermissionError(f"device {text!r} is not served here{why}; served: "
                                  f"{', '.join(self.served)}")
        return entry
