"""``ember-remote serve --bind HOST:PORT --token-file FILE [--devices cpu,cuda:0]
[--tls-cert FILE --tls-key FILE]``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import ssl
import stat
import sys
from pathlib import Path

from ._session import Limits
from .server import AUTH_TIMEOUT, BACKOFF, BACKOFF_CAP, MAX_PENDING

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
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        # as ssh does with a private key: a token others can read is not a secret
        raise SystemExit(f"ember-remote: the token file {path} is accessible by other users "
                         f"(mode {stat.S_IMODE(mode):03o}); run `chmod 600 {path}` (and use a "
                         "new token if others may have read it)")
    return token


def _tls(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise SystemExit("ember-remote: --tls-cert and --tls-key go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise SystemExit(f"ember-remote: cannot load the TLS certificate {cert} and key "
                         f"{key}: {exc}") from None
    return context


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
                       help="comma-separated devices to serve, exactly as clients may name "
                            "them with their options (default: every available device, and "
                            "fusion<> around each, without options)")
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
    serve.add_argument("--max-pending", type=int, default=MAX_PENDING,
                       help="connections not yet authenticated, at most; a new one pushes the "
                            f"oldest out (default {MAX_PENDING})")
    serve.add_argument("--auth-timeout", type=float, default=AUTH_TIMEOUT,
                       help="seconds from accept to authenticated, handshakes included "
                            f"(default {AUTH_TIMEOUT:g})")
    serve.add_argument("--auth-backoff", type=float, default=BACKOFF,
                       help="seconds a peer address waits after a wrong token, doubled per "
                            f"wrong token in a row up to {BACKOFF_CAP:g} (default {BACKOFF:g}; "
                            "0 turns it off)")
    serve.add_argument("--tls-cert", type=Path, help="PEM certificate (chain): serve wss://")
    serve.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    args = parser.parse_args(argv)

    from .server import Backoff, RemoteServer

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    limits = Limits(max_message=args.max_message_mb * MiB, max_tensor=args.max_tensor_mb * MiB,
                    max_client=args.max_client_mb * MiB, max_tensors=args.max_tensors,
                    max_items=args.max_message_items, max_checked=args.max_checked)
    token = _token(args.token_file)
    context = _tls(args.tls_cert, args.tls_key)
    try:
        server = RemoteServer(*args.bind, token=token, devices=devices, limits=limits,
                              max_clients=args.max_clients, keepalive=args.keepalive,
                              max_pending=args.max_pending, auth_timeout=args.auth_timeout,
                              backoff=Backoff(args.auth_backoff, BACKOFF_CAP),
                              ssl_context=context)
    except (ValueError, OSError) as exc:
        print(f"ember-remote: {exc}", file=sys.stderr)
        return 2
    if not server.loopback:
        clear = ("" if context else "; without --tls-cert/--tls-key the token and every "
                 "tensor cross it in clear")
        print(f"ember-remote: warning: listening on {server.host}, not a loopback address: "
              f"anyone on that network can connect and try tokens (keep --token-file "
              f"{args.token_file} secret){clear}. See docs/remote.md, Threat model.",
              file=sys.stderr, flush=True)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # the main thread leaves serve_forever and closes the server

    signal.signal(signal.SIGTERM, stop)
    served = ", ".join(server.devices)
    scheme = "wss" if context else "ws"
    print(f"ember-remote: serving {served} on {server.host}:{server.port} (pid {os.getpid()}, "
          f"{scheme}://)", flush=True)
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
