"""The few images the node agent knows: no image is pulled or unpacked here (a container runs its
``command`` and ``args`` as a local process), but a container that sets no ``command`` runs its
image's entrypoint, and for the images below that entrypoint is a binary built on this machine
from the same source the image is built from.

======================================================  ==========================  ==============
image repository (any tag or digest)                    entrypoint (local binary)   built by
======================================================  ==========================  ==============
registry.k8s.io/gateway-api-inference-extension/epp     .cache/gie/epp              ``make gie``
======================================================  ==========================  ==============

The binary is the version its build script pins (GIE v1.5.0): a pod that names another tag runs
that version all the same. Any other image without a command is refused (``NoCommand``).

An image whose program listens on every address (the EPP's gRPC, gRPC health and metrics ports)
lists the flags of those ports: the node agent moves them to free ports and relays the pod's
address and port to them (:mod:`localkube.nodeagent.portmap`), since pods share the host's
network here.
"""

from __future__ import annotations

from pathlib import Path

from localkube.state import ROOT

# repository: (entrypoint, the make target that builds its binary)
ENTRYPOINTS: dict[str, tuple[list[str], str]] = {
    # The Gateway API Inference Extension's endpoint picker (its image's ENTRYPOINT is /epp).
    "registry.k8s.io/gateway-api-inference-extension/epp": ([str(ROOT / ".cache" / "gie" / "epp")], "make gie"),
}
# program: {flag: its default port} of the ports it listens on at every address
WILDCARD_PORTS: dict[str, dict[str, int]] = {
    ENTRYPOINTS["registry.k8s.io/gateway-api-inference-extension/epp"][0][0]: {
        "--grpc-port": 9002,
        "--grpc-health-port": 9003,
        "--metrics-port": 9090,
    },
}


def repository(image: str) -> str:
    """``image`` without its digest and tag: ``host/path/name:tag@sha256:…`` → ``host/path/name``."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


def entrypoint(image: str) -> list[str]:
    """The local entrypoint of ``image`` (empty if the node agent does not know the image)."""
    known = ENTRYPOINTS.get(repository(image))
    return list(known[0]) if known else []


def unbuilt(argv: list[str]) -> str | None:
    """Why ``argv`` cannot start if its program is one of the table's binaries, not built yet."""
    for command, target in ENTRYPOINTS.values():
        if argv and argv[0] == command[0] and not Path(command[0]).exists():
            return f"{command[0]} (the image's entrypoint) is not built: run `{target}`"
    return None
