"""Port mapping for the images that listen on every address (``:port``) rather than their pod's:
here all pods share the host's network, so two of them would collide on the same port. The node
agent moves each such port of the container to a free one (rewriting its flag) and relays the
pod's address and original port to it, as a container runtime's port mapping does."""

from __future__ import annotations

import contextlib
import socket
import threading


class Relay:
    """Accepts on ``(listen_host, listen_port)`` and pipes each connection to 127.0.0.1:``target``."""

    def __init__(self, listen_host: str, listen_port: int, target: int) -> None:
        self.target = target
        self.server = socket.create_server((listen_host, listen_port), reuse_port=False)
        self.closed = threading.Event()
        threading.Thread(target=self._accept, name=f"relay-{listen_host}:{listen_port}", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(conn,), daemon=True).start()

    def _connect(self, conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:
            conn.close()  # as a closed port: the container is not listening yet
            return
        upstream.settimeout(None)
        threading.Thread(target=_pipe, args=(upstream, conn), daemon=True).start()
        _pipe(conn, upstream)

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def remap(argv: list[str], flags: dict[str, int]) -> tuple[list[str], dict[int, int]]:
    """``argv`` with each of ``flags`` (flag: its default port) set to a free port, and the
    mapping {port the pod is reached on: port the process listens on}."""
    out, mapping = list(argv), {}
    for flag, default in flags.items():
        new = free_port()
        for i, arg in enumerate(out):
            if arg == flag and i + 1 < len(out):
                mapping[int(out[i + 1])] = new
                out[i + 1] = str(new)
                break
            if arg.startswith(flag + "="):
                mapping[int(arg.split("=", 1)[1])] = new
                out[i] = f"{flag}={new}"
                break
        else:
            mapping[default] = new
            out.append(f"{flag}={new}")
    return out, mapping
