"""Start one container process: private mount (and UTS) namespace, bind mounts, exec.

Run by the node agent as ``python -I -S podexec.py SPEC.json`` (standard
library only, so it starts fast). SPEC holds ``argv``, ``env``, ``cwd``,
``hostname`` and ``mounts`` (``source``, ``target``, ``readOnly``). Mount points
that do not exist are created on the host as empty directories or files (they
stay empty outside pods). Exit code 128 with ``SPEC.error`` written means the
container could not start (the kubelet's ``StartError``).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, flags: int) -> None:
    src = source.encode() if source else None
    _check(_libc.mount(src, target.encode(), None, flags, None), f"mount {source} on {target}")


def _mount_point(source: str, target: str) -> None:
    if os.path.lexists(target):
        return
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
        open(target, "a").close()  # noqa: SIM115 - an empty file to mount a file onto


def isolate(spec: dict) -> None:  # type: ignore[type-arg]
    """Enter private namespaces and bind the volumes onto their mount paths."""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    _mount(None, "/", MS_REC | MS_PRIVATE)
    hostname = spec.get("hostname", "")[:63].encode()
    if hostname:
        _check(_libc.sethostname(hostname, len(hostname)), "sethostname")
    mounts = spec.get("mounts", [])
    # Hold every source and the working directory open first (in the new namespace: a
    # descriptor from before unshare would name the old namespace's mounts, and renames
    # between the two fail with EXDEV): a volume mounted over a parent directory (an
    # emptyDir on /tmp, say) must not hide what the mounts after it, or the process, need.
    sources = [os.open(m["source"], os.O_PATH) for m in mounts]
    cwd = os.open(spec.get("cwd") or "/", os.O_PATH | os.O_DIRECTORY)
    keep = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p in spec.get("keep", []) if os.path.isdir(p)]
    for m, fd in zip(mounts, sources, strict=True):
        source = f"/proc/self/fd/{fd}"
        _mount_point(source, m["target"])
        _mount(source, m["target"], MS_BIND | MS_REC)
        if m.get("readOnly"):
            _mount(None, m["target"], MS_REMOUNT | MS_BIND | MS_RDONLY)
    for fd in sources:
        os.close(fd)
    # The workload environment (the project and its .venv) stays visible even when a volume
    # covers a directory above it (an emptyDir on /tmp over a checkout in /tmp).
    for path, fd in keep:
        try:
            hidden = not os.path.samestat(os.stat(path), os.fstat(fd))
        except FileNotFoundError:
            hidden = True
        if hidden:
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, MS_BIND | MS_REC)
        os.close(fd)
    os.fchdir(cwd)
    os.close(cwd)


def main() -> None:
    spec_path = sys.argv[1]
    with open(spec_path) as f:
        spec = json.load(f)
    # Opened before the mounts, which may hide the pod's directory (e.g. under /tmp).
    spec_dir = os.open(os.path.dirname(os.path.abspath(spec_path)), os.O_PATH | os.O_DIRECTORY)
    try:
        if spec.get("mounts") or spec.get("hostname"):
            isolate(spec)
        else:
            os.chdir(spec.get("cwd") or "/")
        argv = spec["argv"]
        if not argv:
            raise ValueError("no command")
        os.execvpe(argv[0], argv, spec["env"])
    except (OSError, ValueError) as e:
        message = f"failed to start container: {e}"
        print(f"localkube: {message}", file=sys.stderr, flush=True)
        error_file = os.path.basename(spec_path) + ".error"
        fd = os.open(error_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=spec_dir)
        with os.fdopen(fd, "w") as f:
            f.write(message)
        os._exit(128)


if __name__ == "__main__":
    main()
