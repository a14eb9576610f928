"""A team's own registry for the release tests: Debian's docker-registry (the CNCF distribution) on
loopback, plain HTTP, and the push docs/install.md gives a team (``skopeo copy --preserve-digests``
of each archive of dist/X.Y.Z/)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from localkube.wait import wait_answers


def debian_tools(*packages: str) -> None:
    """Debian's packages a test needs (skopeo, the registry), installed if missing, as make image does."""
    missing = [p for p in packages if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if missing:
        if subprocess.run(["apt-cache", "show", *missing], capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True, capture_output=True, timeout=600,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip


@dataclass
class Registry:
    host: str  # 127.0.0.1:port
    log: Path

    def push(self, archive: Path, repository: str, tag: str) -> float:
        """``skopeo copy --preserve-digests`` of an OCI archive to ``<host>/<repository>:<tag>``; its seconds."""
        start = time.monotonic()
        subprocess.run(["skopeo", "copy", "-q", "--preserve-digests", "--dest-tls-verify=false",
                        f"oci-archive:{archive.name}", f"docker://{self.host}/{repository}:{tag}"],
                       cwd=archive.parent, check=True, timeout=600)  # fmt: skip
        return time.monotonic() - start

    def pulled_by(self, repository: str, agent: str) -> set[str]:
        """The digests of the manifests and blobs of ``repository`` the client ``agent`` (a User-Agent's
        start: ``containerd/``) fetched whole (GET, 200) so far, from the registry's access log."""
        pattern = (rf'"GET /v2/{re.escape(repository)}/(?:blobs|manifests)/(sha256:[0-9a-f]{{64}}) HTTP/[\d.]+" '
                   rf'200 \d+ "[^"]*" "{re.escape(agent)}')  # fmt: skip
        return set(re.findall(pattern, self.log.read_text()))


@contextmanager
def loopback_registry(directory: Path) -> Iterator[Registry]:
    """Debian's docker-registry serving on a free loopback port, its data and log under ``directory``."""
    debian_tools("skopeo", "docker-registry")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {"version": 0.1, "storage": {"filesystem": {"rootdirectory": str(directory / "data")}},
              "http": {"addr": f"127.0.0.1:{port}"}}  # fmt: skip
    (directory / "config.yml").write_text(yaml.safe_dump(config))
    log = directory / "registry.log"
    with log.open("w") as out:
        server = subprocess.Popen(["/usr/bin/docker-registry", "serve", str(directory / "config.yml")], stdout=out,
                                  stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_answers(f"http://127.0.0.1:{port}/v2/", lambda: server.poll() is None, log, 30, "the registry")
        yield Registry(f"127.0.0.1:{port}", log)
    finally:
        server.terminate()
        server.wait(timeout=30)
