"""Every kind the operator reads or writes, in one table: the registry of kinds.

One :class:`Kind` record per kind says where it is served (group, version, plural), how the
operator's client reaches it (the typed API or the custom-objects API), whether it is cached and
under which index, how Slipway updates it when it is a child (:class:`UpdateRule`), which of
Slipway's kinds may write it, and the RBAC verbs the operator needs on it. The watches, the cache
heal, the client, the child rule, the CRD generator, the kubectl plugin and the RBAC test read this
table; a new child kind is one row here (and its builder), not an edit in each of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slipway import GROUP, VERSION


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
    # The RBAC verbs the operator needs on it (manifests/clusterrole.yaml and the chart grant them).
    verbs: tuple[str, ...] = ()
    # RBAC verbs on its subresources, e.g. {"status": ("patch",)}.
    subresources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

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


_OWN_VERBS = ("get", "list", "watch", "patch")
_OWN_SUBRESOURCES: Mapping[str, tuple[str, ...]] = {"status": ("patch",), "finalizers": ("update",)}
_CHILD = ("get", "list", "watch", "create")

# Slipway's own kinds, in the order a model moves through them.
TRAINING_RUN = Kind(
    "TrainingRun",
    GROUP,
    VERSION,
    "trainingruns",
    "tr",
    indexes=("trainingruns",),
    verbs=_OWN_VERBS,
    subresources=_OWN_SUBRESOURCES,
)
MODEL_ARTIFACT = Kind(
    "ModelArtifact",
    GROUP,
    VERSION,
    "modelartifacts",
    "ma",
    indexes=("modelartifacts",),
    rule=UpdateRule(create_only=True),
    parents=("TrainingRun",),
    verbs=(*_OWN_VERBS, "create"),
    subresources=_OWN_SUBRESOURCES,
)
INFERENCE_DEPLOYMENT = Kind(
    "InferenceDeployment",
    GROUP,
    VERSION,
    "inferencedeployments",
    "idep",
    indexes=("inferencedeployments",),
    verbs=_OWN_VERBS,
    subresources=_OWN_SUBRESOURCES,
)
OWN = (TRAINING_RUN, MODEL_ARTIFACT, INFERENCE_DEPLOYMENT)

# The children Slipway makes, each labelled app.kubernetes.io/managed-by=slipway.
JOB = Kind(
    "Job",
    "batch",
    "v1",
    "jobs",
    typed=("batch", "namespaced_job"),
    indexes=("jobs",),
    managed=True,
    rule=UpdateRule(create_only=True),
    parents=("TrainingRun", "ModelArtifact"),
    verbs=(*_CHILD, "patch"),
)
JOBSET = Kind(
    "JobSet",
    "jobset.x-k8s.io",
    "v1alpha2",
    "jobsets",
    indexes=("jobsets",),
    managed=True,
    rule=UpdateRule(create_only=True),
    parents=("TrainingRun",),
    verbs=(*_CHILD, "patch"),
)
PVC = Kind(
    "PersistentVolumeClaim",
    "",
    "v1",
    "persistentvolumeclaims",
    typed=("core", "namespaced_persistent_volume_claim"),
    indexes=("pvcs",),
    managed=True,
    rule=UpdateRule(create_only=True),
    parents=("TrainingRun",),
    verbs=(*_CHILD, "patch"),
)
SERVICE = Kind(
    "Service",
    "",
    "v1",
    "services",
    typed=("core", "namespaced_service"),
    indexes=("services",),
    managed=True,
    rule=UpdateRule(removable=frozenset({"publishNotReadyAddresses"})),
    parents=("TrainingRun", "InferenceDeployment"),
    verbs=(*_CHILD, "update", "delete"),
)
DEPLOYMENT = Kind(
    "Deployment",
    "apps",
    "v1",
    "deployments",
    typed=("apps", "namespaced_deployment"),
    indexes=("deployments",),
    managed=True,
    rule=UpdateRule(),
    parents=("InferenceDeployment",),
    verbs=(*_CHILD, "update", "patch"),
)
HPA = Kind(
    "HorizontalPodAutoscaler",
    "autoscaling",
    "v2",
    "horizontalpodautoscalers",
    typed=("autoscaling", "namespaced_horizontal_pod_autoscaler"),
    indexes=("hpas",),
    managed=True,
    rule=UpdateRule(removable=frozenset({"behavior", "metrics"})),
    parents=("InferenceDeployment",),
    verbs=(*_CHILD, "update"),
)
HTTPROUTE = Kind(
    "HTTPRoute",
    "gateway.networking.k8s.io",
    "v1",
    "httproutes",
    indexes=("httproutes",),
    managed=True,
    rule=UpdateRule(removable=frozenset({"hostnames"})),
    parents=("InferenceDeployment",),
    verbs=(*_CHILD, "update", "delete"),
)
CHILDREN = (JOB, PVC, SERVICE, DEPLOYMENT, HPA, HTTPROUTE, JOBSET)

# What the operator reads beside them.
POD = Kind(
    "Pod",
    "",
    "v1",
    "pods",
    typed=("core", "namespaced_pod"),
    indexes=("pods", "servingpods"),
    managed=True,
    verbs=("list", "watch", "patch"),
)
EVENT = Kind("Event", "", "v1", "events", typed=("core", "namespaced_event"), verbs=("create", "list"))
NODE = Kind("Node", "", "v1", "nodes", verbs=("list",))
NAMESPACE = Kind("Namespace", "", "v1", "namespaces", indexes=("namespaces",), verbs=("list", "watch"))
CRD = Kind(
    "CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", verbs=("list", "watch")
)
WORKLOAD = Kind("Workload", "kueue.x-k8s.io", "v1beta2", "workloads", indexes=("workloads",), verbs=("list", "watch"))
LOCAL_QUEUE = Kind("LocalQueue", "kueue.x-k8s.io", "v1beta2", "localqueues", verbs=("get", "list"))
CLUSTER_QUEUE = Kind("ClusterQueue", "kueue.x-k8s.io", "v1beta2", "clusterqueues", verbs=("get", "list"))
COHORT = Kind("Cohort", "kueue.x-k8s.io", "v1beta2", "cohorts", verbs=("get", "list"))
PENDING_WORKLOADS = Kind(
    "PendingWorkloadsSummary",
    "visibility.kueue.x-k8s.io",
    "v1beta2",
    "localqueues",
    subresources={"pendingworkloads": ("get",)},
)
OTHERS = (POD, EVENT, NODE, NAMESPACE, CRD, WORKLOAD, LOCAL_QUEUE, CLUSTER_QUEUE, COHORT, PENDING_WORKLOADS)

ALL = (*OWN, *CHILDREN, *OTHERS)
BY_KIND = {k.kind: k for k in ALL}
PLURALS = {k.kind: k.plural for k in OWN}  # Slipway's kinds by name -> plural


def children_of(parent: str) -> dict[str, str]:
    """The kinds ``parent`` may write, with the API version of each."""
    return {k.kind: k.api_version for k in ALL if parent in k.parents}


def rbac_grants() -> set[tuple[str, str, str]]:
    """Every (API group, resource, verb) the operator needs cluster-wide, from the table."""
    grants = {(k.group, k.plural, verb) for k in ALL for verb in k.verbs}
    grants |= {
        (k.group, f"{k.plural}/{sub}", verb) for k in ALL for sub, verbs in k.subresources.items() for verb in verbs
    }
    return grants
