"""Every kind the operator reads or writes, in one table: the registry of kinds.

One :class:`Kind` record per kind says where it is served (group, version, plural), how the
operator's client reaches it (the typed API or the custom-objects API), whether it is cached and
under which index, how Slipway updates it when it is a child (:class:`UpdateRule`), which of
Slipway's kinds may write it, and the RBAC verbs the operator needs on it, with why. The watches,
the cache heal, the client, the child rule, the CRD generator, the kubectl plugin and the RBAC
generator (``slipway.rbacgen``: manifests/clusterrole.yaml and the chart's rules) read this table;
a new child kind is one row here (and its builder), not an edit in each of them. What the operator
keeps in its own namespace (its Leases, its proof key) is a table of its own, ``HOME``: nothing
watches or caches it, and the RBAC generator grants it there only (manifests/role.yaml).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from slipway import GROUP, VERSION
from slipway.kindrecord import Kind, UpdateRule

_OWN_VERBS = ("get", "list", "watch", "patch")
_OWN_SUBRESOURCES: Mapping[str, tuple[str, ...]] = {"status": ("patch",), "finalizers": ("update",)}
_OWN_USES = (
    "Its own kinds: watched into the operator's cache; a consumed slipway.dev/promote|abort annotation "
    "and an earlier version's finalizer are removed by patch, and status is written by patch; it never "
    "edits a spec. Children carry ownerReferences with blockOwnerDeletion, which needs update on the "
    "owner's finalizers where OwnerReferencesPermissionEnforcement is on (e.g. OpenShift)."
)
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
    uses=_OWN_USES,
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
    uses="ModelArtifacts, as its other own kinds; and a TrainingRun that succeeds creates its ModelArtifact.",
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
    uses=_OWN_USES,
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
    uses="Training, quantization and validation Jobs: created once; suspend is a patch.",
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
    uses="Multi-node runs as one gang (spec.runtime JobSet): created once, suspended and resumed by patch.",
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
    uses="Checkpoint claims: created once; their ownerReferences are patched as spec.checkpoint.whenDeleted "
    "says (none for Retain), and when one left by an earlier TrainingRun of the same name is adopted.",
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
    uses="The headless Service of multi-node runs and serving Services: updated when spec.port changes, "
    "deleted when the traffic mode no longer needs them.",
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
    verbs=(*_CHILD, "update", "patch", "delete"),
    uses="Serving Deployments: replaced whole (update) when what Slipway sets changes, so that removed env "
    "vars and ports really go away; a track is scaled by patch. InferencePool mode's endpoint pickers too, "
    "deleted when the mode changes.",
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
    uses="Serving autoscalers: replaced whole (update) when what Slipway sets changes.",
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
    uses="GatewayAPI traffic mode: the HTTPRoute's weights; deleted when the mode is Replicas again.",
)
INFERENCE_POOL = Kind(
    "InferencePool",
    "inference.networking.k8s.io",
    "v1",
    "inferencepools",
    indexes=("inferencepools",),
    managed=True,
    rule=UpdateRule(),
    parents=("InferenceDeployment",),
    verbs=(*_CHILD, "update", "delete"),
    uses="InferencePool traffic mode: one pool per track, the HTTPRoute's backends; deleted when the mode changes.",
)
_PICKER_ACCESS = (
    "InferencePool traffic mode: the endpoint pickers' identity in the deployment's namespace (a ServiceAccount, "
    "a Role reading its pods and pools, their RoleBinding): created once, deleted when the mode changes."
)
SERVICE_ACCOUNT = Kind(
    "ServiceAccount",
    "",
    "v1",
    "serviceaccounts",
    typed=("core", "namespaced_service_account"),
    indexes=("serviceaccounts",),
    managed=True,
    rule=UpdateRule(create_only=True),
    parents=("InferenceDeployment",),
    verbs=(*_CHILD, "delete"),
    uses=_PICKER_ACCESS,
)
ROLE = Kind(
    "Role",
    "rbac.authorization.k8s.io",
    "v1",
    "roles",
    indexes=("roles",),
    managed=True,
    rule=UpdateRule(create_only=True),
    parents=("InferenceDeployment",),
    verbs=(*_CHILD, "delete"),
    uses=_PICKER_ACCESS,
)
ROLE_BINDING = Kind(
    "RoleBinding",
    "rbac.authorization.k8s.io",
    "v1",
    "rolebindings",
    indexes=("rolebindings",),
    managed=True,
    rule=UpdateRule(create_only=True),
    parents=("InferenceDeployment",),
    verbs=(*_CHILD, "delete"),
    uses=_PICKER_ACCESS,
)
CHILDREN = (JOB, PVC, SERVICE, DEPLOYMENT, HPA, HTTPROUTE, JOBSET, INFERENCE_POOL, SERVICE_ACCOUNT, ROLE, ROLE_BINDING)

# What the operator reads beside them.
POD = Kind(
    "Pod",
    "",
    "v1",
    "pods",
    typed=("core", "namespaced_pod"),
    indexes=("pods", "servingpods"),
    managed=True,
    verbs=("get", "list", "watch", "patch"),
    uses="Training pods for exit codes, restarts and the scheduler's reasons, serving pods for their "
    "problems and prices; patch: a training pod made before its MLflow run existed gets the run's id and "
    "its slipway.dev/mlflow-run scheduling gate lifted (only pods of the run's own Job). get: held so that the Role of "
    "an InferenceDeployment's endpoint pickers may grant it (RBAC lets the operator grant only what it holds).",
)
EVENT = Kind(
    "Event",
    "",
    "v1",
    "events",
    typed=("core", "namespaced_event"),
    verbs=("create", "list"),
    uses="Events on its objects, one per transition; list: the FailedCreate Events of a Job or Deployment "
    "whose pods the API server refuses, read only while it has none.",
)
NODE = Kind(
    "Node",
    "",
    "v1",
    "nodes",
    verbs=("list",),
    uses="Nodes for GPU memory and product labels, read once before a sized run's Job exists, and to price "
    "serving pods.",
    namespaced=False,
)
NAMESPACE = Kind(
    "Namespace",
    "",
    "v1",
    "namespaces",
    indexes=("namespaces",),
    verbs=("list", "watch"),
    uses="Namespaces: their slipway.dev/allowed-models annotation (tenancy), and watching by pattern.",
    namespaced=False,
)
CRD = Kind(
    "CustomResourceDefinition",
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    verbs=("list", "watch"),
    uses="kopf: discovery of the resources it serves.",
    namespaced=False,
)
WORKLOAD = Kind(
    "Workload",
    "kueue.x-k8s.io",
    "v1beta2",
    "workloads",
    indexes=("workloads",),
    verbs=("list", "watch"),
    uses="Kueue's Workloads of queued training Jobs: what Queued, Admitted and PreemptedByKueue say.",
)
LOCAL_QUEUE = Kind(
    "LocalQueue",
    "kueue.x-k8s.io",
    "v1beta2",
    "localqueues",
    verbs=("get", "list"),
    uses="A queued run's LocalQueue: which ClusterQueue holds its quota.",
)
_QUOTA = (
    "A queued run's quota: its ClusterQueue and that one's cohort (a run asking for more than the quota can "
    "ever hold is Stalled, ExceedsQueueQuota)."
)
CLUSTER_QUEUE = Kind(
    "ClusterQueue", "kueue.x-k8s.io", "v1beta2", "clusterqueues", verbs=("get", "list"), uses=_QUOTA, namespaced=False
)
COHORT = Kind("Cohort", "kueue.x-k8s.io", "v1beta2", "cohorts", verbs=("get", "list"), uses=_QUOTA, namespaced=False)
PENDING_WORKLOADS = Kind(
    "PendingWorkloadsSummary",
    "visibility.kueue.x-k8s.io",
    "v1beta2",
    "localqueues",
    subresources={"pendingworkloads": ("get",)},
    uses="A queued run's place in its LocalQueue (Kueue's visibility API, an aggregated API).",
)
_PICKER_READS = (
    "Held so that the Role of an InferenceDeployment's endpoint pickers may grant it (RBAC lets the operator grant "
    "only what it holds): the picker reads its pool's objectives and model rewrites."
)
INFERENCE_OBJECTIVE = Kind(
    "InferenceObjective",
    "inference.networking.x-k8s.io",
    "v1alpha2",
    "inferenceobjectives",
    verbs=("get", "list", "watch"),
    uses=_PICKER_READS,
)
INFERENCE_MODEL_REWRITE = Kind(
    "InferenceModelRewrite",
    "inference.networking.x-k8s.io",
    "v1alpha2",
    "inferencemodelrewrites",
    verbs=("get", "list", "watch"),
    uses=_PICKER_READS,
)
_GRANTED = (INFERENCE_OBJECTIVE, INFERENCE_MODEL_REWRITE)  # read by no pass
OTHERS = (POD, EVENT, NODE, NAMESPACE, CRD, WORKLOAD, LOCAL_QUEUE, CLUSTER_QUEUE, COHORT, PENDING_WORKLOADS, *_GRANTED)

ALL = (*OWN, *CHILDREN, *OTHERS)

# What the operator keeps in its own namespace (--leader-election-namespace): granted by the Role
# there (manifests/role.yaml, the chart's role.yaml), each named object alone; not in ALL, as nothing
# watches, caches or owns them.
LEASE = Kind(
    "Lease",
    "coordination.k8s.io",
    "v1",
    "leases",
    verbs=("create",),
    named_verbs=("get", "update"),
    uses="Leader election: the first replica creates the leader's Lease (slipway.lease); its holder renews it "
    "(update with the resourceVersion it read, so two replicas never both win) and the others read it to know "
    "when to take over. The MLflow webhook's Lease records the deliveries believed, so that no replica believes "
    "one twice (slipway.mlflowhook.ledger). create cannot be limited to a name.",
)
SECRET = Kind(
    "Secret",
    "",
    "v1",
    "secrets",
    verbs=("create",),
    named_verbs=("get",),
    uses="The key of the proofs on what the operator creates in MLflow (slipway.dev/proof): the Secret of "
    "--mlflow-proof-secret, created by the first replica with a random key, and read by every replica; no "
    "other Secret. create cannot be limited to a name.",
)
HOME = (LEASE, SECRET)
BY_KIND = {k.kind: k for k in ALL}
PLURALS = {k.kind: k.plural for k in OWN}  # Slipway's kinds by name -> plural


T = TypeVar("T")


def derived(make: Callable[[tuple[Kind, ...]], T]) -> Callable[[], T]:
    """A table made from ``ALL`` (the client's kinds, the child rules, the cache heal's listings),
    made again when ``ALL`` is replaced: a kind added to this table is all the frame needs."""
    made: list[Any] = [None, None]

    def table() -> T:
        if made[0] is not ALL:
            made[0], made[1] = ALL, make(ALL)
        return made[1]  # type: ignore[no-any-return]

    return table


def children_of(parent: str) -> dict[str, str]:
    """The kinds ``parent`` may write, with the API version of each."""
    return {k.kind: k.api_version for k in ALL if parent in k.parents}


def rbac_grants(table: Iterable[Kind] = ALL) -> set[tuple[str, str, str]]:
    """Every (API group, resource, verb) the operator needs cluster-wide, from the table."""
    table = tuple(table)
    grants = {(k.group, k.plural, verb) for k in table for verb in k.verbs}
    grants |= {
        (k.group, f"{k.plural}/{sub}", verb) for k in table for sub, verbs in k.subresources.items() for verb in verbs
    }
    return grants
