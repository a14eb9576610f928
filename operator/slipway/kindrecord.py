"""The record of one kind in the registry of kinds (``slipway.kinds``): where it is served, how it
is reached, cached and updated, and the RBAC verbs the operator needs on it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class UpdateRule:
    """How Slipway updates one child kind."""

    create_only: bool = False
    # Top-level spec keys that Slipway removes when it no longer sets them; any other key that
    # it does not set (a Deployment's replicas under an HPA, a Service's clusterIP) is left alone.
    removable: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Kind:
    """One kind the operator reads or writes."""

    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    short: str = ""  # kubectl's short name, for Slipway's own kinds
    # The typed client: (attribute on kube.Kube, method suffix), e.g. ("batch", "namespaced_job");
    # None: served through the custom-objects API.
    typed: tuple[str, str] | None = None
    # The cache indexes that hold it (the first is its own); () when it is not cached.
    indexes: tuple[str, ...] = ()
    # Listed and watched only with the label app.kubernetes.io/managed-by=slipway.
    managed: bool = False
    # As a child: how it is updated, and the Slipway kinds that may write it.
    rule: UpdateRule | None = None
    parents: tuple[str, ...] = ()
    # The RBAC verbs the operator needs on it (generated into manifests/clusterrole.yaml and the chart).
    verbs: tuple[str, ...] = ()
    # RBAC verbs on its subresources, e.g. {"status": ("patch",)}. (Left out of the hash: a kind
    # keys the objects a traffic router owns.)
    subresources: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    # What the operator does with it: the comment over its RBAC rules (each rule names its user).
    uses: str = ""
    # Cluster-scoped kinds are granted cluster-wide whatever namespaces are watched (the chart).
    namespaced: bool = True
    # RBAC verbs on the objects the operator names only (resourceNames), for the kinds of ``HOME``; the
    # names are defined where the operator uses them, and the RBAC generator reads them there.
    named_verbs: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> tuple[str, ...]:
        """The resource as kopf's decorators name it (the core group has no name)."""
        return (self.group, self.version, self.plural) if self.group else (self.version, self.plural)

    @property
    def index(self) -> str:
        """Its own cache index."""
        return self.indexes[0]
