"""Container logs as the kubelet keeps them: one file per container instance, in the CRI
format (``<RFC 3339 nano time> <stream> <F|P> <text>``), read back for ``kubectl logs``.

Files live in ``pods/<ns>_<pod>/<uid>/logs/<container>/<restart count>.log``, like the
kubelet's ``/var/log/pods/<ns>_<pod>_<uid>/<container>/<n>.log``. The node agent reads
the container's stdout and stderr through pipes and stamps every line as it arrives,
so ``sinceSeconds``, ``sinceTime`` and ``timestamps`` answer as a kubelet's would.
"""

from __future__ import annotations

import datetime
import io
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

MAX_LINE = 16 * 1024  # longer lines are split into partial (P) records, as CRI runtimes do


def stamp(at: float | None = None) -> str:
    """RFC 3339 UTC with nanoseconds, the CRI log time format."""
    at = time.time() if at is None else at
    dt = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int((at % 1) * 1e9):09d}Z"


def parse_time(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time (any fraction, 'Z' or an offset)."""
    head, dot, rest = text.partition(".")
    frac = 0.0
    zone = rest
    if dot:
        digits = "".join(ch for ch in rest if ch.isdigit())
        frac = float("0." + digits) if digits else 0.0
        zone = rest[len(digits) :]
    else:
        head, zone = text[:19], text[19:]
    zone = "+00:00" if zone in ("Z", "") else zone
    dt = datetime.datetime.fromisoformat(head + zone)
    return dt.timestamp() + frac


def container_dir(run_dir: Path, container: str) -> Path:
    return run_dir / "logs" / container


def instance_path(run_dir: Path, container: str, restart: int) -> Path:
    return container_dir(run_dir, container) / f"{restart}.log"


def instances(run_dir: Path, container: str) -> list[Path]:
    """The container's log files, oldest instance first."""
    paths = container_dir(run_dir, container).glob("*.log")
    return sorted((p for p in paths if p.stem.isdigit()), key=lambda p: int(p.stem))


class LogWriter:
    """Pumps a container's stdout and stderr into its log file, one thread per stream."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - closed when both streams end
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def pump(self, stream: IO[bytes], name: str) -> None:
        thread = threading.Thread(target=self._copy, args=(stream, name), name=f"log-{self.path}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _copy(self, stream: IO[bytes], name: str) -> None:
        tag = name.encode()
        try:
            while True:
                line = stream.readline(MAX_LINE)
                if not line:
                    break
                full = line.endswith(b"\n")
                text = line[:-1] if full else line
                record = b"%s %s %s %s\n" % (stamp().encode(), tag, b"F" if full else b"P", text)
                with self._lock:
                    self._file.write(record)
        except (OSError, ValueError):
            pass
        finally:
            stream.close()

    def wait(self, timeout: float) -> None:
        """Wait for both streams to reach their end (the process and its children closed them)."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(deadline - time.monotonic(), 0))
        if not any(t.is_alive() for t in self._threads):
            self._file.close()


def _records(raw: bytes) -> Iterator[tuple[float, bytes, bool]]:
    """(time, text, complete) of each record in ``raw``; lines not in CRI format pass as text."""
    for line in raw.splitlines():
        parts = line.split(b" ", 3)
        if len(parts) == 4 and parts[1] in (b"stdout", b"stderr") and parts[2] in (b"F", b"P"):
            try:
                at = parse_time(parts[0].decode())
            except ValueError:
                yield 0.0, line, True
                continue
            yield at, parts[3], parts[2] == b"F"
        else:
            yield 0.0, line, True


def render(records: Iterator[tuple[float, bytes, bool]], timestamps: bool) -> Iterator[bytes]:
    """Records as the kubelet returns them: partial records joined, an RFC 3339 prefix on request."""
    pending = b""
    first_at = 0.0
    for at, text, complete in records:
        if not pending:
            first_at = at
        pending += text
        if complete:
            prefix = stamp(first_at).encode() + b" " if timestamps else b""
            yield prefix + pending + b"\n"
            pending = b""
    if pending:
        prefix = stamp(first_at).encode() + b" " if timestamps else b""
        yield prefix + pending


def text_lines(path: Path, last: int | None = None) -> list[str]:
    """The plain text of a log file (for termination messages), the last ``last`` lines."""
    try:
        raw = path.read_bytes()
    except OSError:
        return []
    out = [chunk.decode(errors="replace").rstrip("\n") for chunk in render(_records(raw), timestamps=False)]
    return out[-last:] if last else out


def read(
    path: Path,
    *,
    tail_lines: int | None = None,
    since: float | None = None,
    timestamps: bool = False,
    limit_bytes: int | None = None,
    follow: bool = False,
    running: Callable[[], bool] = lambda: False,
    stopped: Callable[[], bool] = lambda: False,
) -> Iterator[bytes]:
    """Lines of one log file as ``kubectl logs`` asks for them.

    With ``follow``, keeps yielding new lines while ``running()`` is true (the container
    instance that writes this file runs) and ``stopped()`` is false (the client left).
    """
    sent = 0

    def limited(chunk: bytes) -> bytes | None:
        nonlocal sent
        if limit_bytes is not None:
            if sent >= limit_bytes:
                return None
            chunk = chunk[: limit_bytes - sent]
        sent += len(chunk)
        return chunk

    with open(path, "rb") as f:
        raw = f.read()
        cut = raw.rfind(b"\n") + 1  # a record still being written is read on the next pass
        records = [r for r in _records(raw[:cut]) if since is None or r[0] >= since]
        chosen: Iterator[tuple[float, bytes, bool]] = iter(records)
        if tail_lines is not None:
            chosen = iter(list(deque(records, maxlen=tail_lines)) if tail_lines > 0 else [])
        for chunk in render(chosen, timestamps):
            out = limited(chunk)
            if out is None:
                return
            yield out
        if not follow:
            return
        f.seek(cut)
        buffer = io.BytesIO()
        while not stopped():
            alive = running()  # read before the file: nothing written after exit is missed
            data = f.read()
            if data:
                buffer.write(data)
                whole = buffer.getvalue()
                cut = whole.rfind(b"\n") + 1
                for chunk in render(_records(whole[:cut]), timestamps):
                    out = limited(chunk)
                    if out is None:
                        return
                    yield out
                buffer = io.BytesIO(whole[cut:])
                buffer.seek(0, io.SEEK_END)
                continue
            if not alive:
                return
            time.sleep(0.2)
