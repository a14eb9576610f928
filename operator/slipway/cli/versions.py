"""What ``kubectl slipway version`` prints of the operator (pure: no I/O): its version as its
Deployment says it: the ``app.kubernetes.io/version`` label (the Helm chart sets it), else
its image's tag (manifests/ name the image by tag; a release's chart by digest, with the label)."""

from __future__ import annotations

from collections.abc import Iterable

from slipway.cli.refs import Obj, lookup, name_of

# The labels of the operator's Deployment, in manifests/deployment.yaml and the chart.
OPERATOR_SELECTOR = "app.kubernetes.io/name=slipway,app.kubernetes.io/component=operator"
VERSION_LABEL = "app.kubernetes.io/version"
OPERATOR_NAMESPACE = "slipway-system"  # where manifests/ install it: looked in when listing everywhere is refused


def image_tag(image: str) -> str | None:
    """The tag of an image reference (``repo/name:tag``, ``host:5000/name:tag@sha256:...``); None if
    it names none (by digest only, or no tag)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def operator_image(deployment: Obj) -> str | None:
    """The operator container's image (the container named ``operator``, else the first)."""
    containers = lookup(deployment, "spec", "template", "spec", "containers") or []
    chosen = next((c for c in containers if c.get("name") == "operator"), containers[0] if containers else None)
    return str(chosen["image"]) if chosen and chosen.get("image") else None


def operator_version(deployment: Obj) -> str:
    """The label's version, else the image's tag, else ``unknown``."""
    label = (lookup(deployment, "metadata", "labels") or {}).get(VERSION_LABEL)
    if label:
        return str(label)
    image = operator_image(deployment)
    return (image_tag(image) if image else None) or "unknown"


def operator_line(deployment: Obj) -> str:
    """``operator: 0.1.0 (slipway-system/slipway-operator, image ..., 2/2 ready)``."""
    where = f"{lookup(deployment, 'metadata', 'namespace')}/{name_of(deployment)}"
    image = operator_image(deployment) or "no image"
    ready = f"{lookup(deployment, 'status', 'readyReplicas') or 0}/{lookup(deployment, 'spec', 'replicas') or 0}"
    return f"operator: {operator_version(deployment)} ({where}, image {image}, {ready} ready)"


def operator_lines(deployments: Iterable[Obj], searched: str = "in any namespace") -> list[str]:
    """Each operator Deployment's version (usually one), or that none was found where it was looked
    for (``searched``)."""
    found = sorted(deployments, key=lambda d: (str(lookup(d, "metadata", "namespace")), name_of(d)))
    return [operator_line(d) for d in found] or [
        f"operator: not found (no Deployment labelled {OPERATOR_SELECTOR} {searched})"
    ]
