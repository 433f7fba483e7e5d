"""``ember-remote serve --bind HOST:PORT --token-file FILE [--devices cpu,cuda:0]``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
import sys
from pathlib import Path

from ._session import Limits

MiB = 1 << 20


def _bind(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _token(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        token = path.read_text().strip()
    except OSError as exc:
        raise SystemExit(f"ember-remote: cannot read the token file: {exc}") from None
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        print(f"ember-remote: warning: {path} is readable by other users (chmod 600 it)",
              file=sys.stderr)
    return token


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ember-remote",
                                     description="Serve this machine's ember devices.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a server until interrupted")
    serve.add_argument("--bind", type=_bind, default=("127.0.0.1", 7878), metavar="HOST:PORT",
                       help="address to listen on (default 127.0.0.1:7878; port 0 picks one)")
    serve.add_argument("--token-file", type=Path, required=True,
                       help="file holding the token clients must present (16+ characters)")
    serve.add_argument("--devices", default="",
                       help="comma-separated devices to serve (default: every available one)")
    serve.add_argument("--max-message-mb", type=int, default=256)
    serve.add_argument("--max-tensor-mb", type=int, default=1024)
    serve.add_argument("--max-client-mb", type=int, default=4096)
    serve.add_argument("--max-clients", type=int, default=64)
    serve.add_argument("--max-tensors", type=int, default=Limits.max_tensors,
                       help="tensors and failed ids one client may hold (default "
                            f"{Limits.max_tensors})")
    serve.add_argument("--max-message-items", type=int, default=Limits.max_items,
                       help="items (array elements, map entries) one message may decode to "
                            f"(default {Limits.max_items})")
    serve.add_argument("--max-checked", type=int, default=Limits.max_checked,
                       help="op signatures a session remembers as checked (default "
                            f"{Limits.max_checked})")
    serve.add_argument("--keepalive", type=float, default=10.0,
                       help="seconds between pings (and to wait for a pong) to find dead clients")
    args = parser.parse_args(argv)

    from .server import RemoteServer

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    limits = Limits(max_message=args.max_message_mb * MiB, max_tensor=args.max_tensor_mb * MiB,
                    max_client=args.max_client_mb * MiB, max_tensors=args.max_tensors,
                    max_items=args.max_message_items, max_checked=args.max_checked)
    try:
        server = RemoteServer(*args.bind, token=_token(args.token_file), devices=devices,
                              limits=limits, max_clients=args.max_clients,
                              keepalive=args.keepalive)
    except (ValueError, OSError) as exc:
        print(f"ember-remote: {exc}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # the main thread leaves serve_forever and closes the server

    signal.signal(signal.SIGTERM, stop)
    served = ", ".join(devices) or "every available device"
    print(f"ember-remote: serving {served} on {server.host}:{server.port} (pid {os.getpid()})",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        server.close()  # closes every connection (their sessions are dropped) and waits
    return 0


if __name__ == "__main__":
    sys.exit(main())
