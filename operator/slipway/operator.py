"""The Slipway operator: kopf settings, clients in memo, and the passes of the kinds its packages register.

``python -m slipway`` starts it; ``kopf run -m slipway.operator`` works too.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import kopf

from slipway import behaviour, cost, kube, metrics, mlflowhook, proofkey, tls, watches
from slipway.artifact import register as _artifact  # noqa: F401 - each kind package registers its kind
from slipway.config import OperatorConfig
from slipway.controller import Cache, Key, Scheduler
from slipway.inference import register as _inference  # noqa: F401
from slipway.kopfpatch import NoDiffBase, kopf_refusal
from slipway.kube import Kube
from slipway.leader import Fence, LeaderElector, Timing
from slipway.lease import LeaseStore
from slipway.mlflow import MlflowClient
from slipway.prometheus import PrometheusClient
from slipway.reconcile import REREAD, Context
from slipway.redact import redact_log_records
from slipway.resync import Healer
from slipway.settings import read as read_setting
from slipway.training import register as _training  # noqa: F401

PREFIX = "slipway.dev"


API_RETRY_SECONDS = (0.5, 1.0, 2.0, 3.0) + (5.0,) * 35
IDLE_WORKER_SECONDS = 0.5


def apply_settings(settings: kopf.OperatorSettings) -> None:
    """kopf's defaults have changed between versions: every setting Slipway relies on is explicit."""
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = NoDiffBase()
    # Events come from explicit kopf.event() calls on transitions; only warnings from logs.
    settings.posting.enabled = True
    settings.posting.level = logging.WARNING
    # No kopf peering (it pauses every replica of equal priority): replicas coordinate through
    # a Lease instead (slipway.leader), and every replica keeps watching to keep its cache warm.
    settings.peering.standalone = True
    for resource, selector in watches.server_selectors().items():
        settings.watching.label_selectors[resource] = selector  # type: ignore[index]
    # A watch is renewed every 10 minutes (client-go renews every 5 to 10): fourteen watched kinds cost
    # fourteen requests per 10 minutes at rest. A stream that went dead without closing is noticed by
    # its silence instead: the API server sends a bookmark at least once a minute.
    settings.watching.server_timeout = 600
    settings.watching.client_timeout = 630
    settings.watching.inactivity_timeout = 70
    # The lists at start come in pages of 500 (client-go's page size), not each kind's every object in
    # one answer parsed whole: at start, the memory a process takes it rarely gives back.
    settings.watching.chunk_size = 500
    settings.watching.connect_timeout = 10
    settings.execution.max_workers = 4  # kopf's own sync handlers (index and wake functions are light)
    settings.networking.request_timeout = 30
    # An API server away (restart, upgrade, network): kopf's own requests (its patches and Events, its
    # listings) retry at most 5 s apart, so they resume within 5 s of its return, instead of kopf's
    # default that waits 21 s between the last tries; its watches list and watch again for as long as
    # the outage lasts. A leader exits once it cannot renew its Lease for
    # --lease-renew-deadline (10 s): its pod restarts, and whichever replica leads next resumes.
    settings.networking.error_backoffs = API_RETRY_SECONDS
    settings.queueing.error_delays = (1, 2, 5, 10, 30, 60)
    # kopf's worker for an object holds the last event's whole body (managedFields and all) while it
    # waits idle_timeout for the next one: at a start, when every object of every kind is listed within
    # seconds, kopf's default (5 s) holds them all at once. Half a second lets each go soon after its
    # event was indexed and handled; a burst of events for one object still shares one worker.
    settings.queueing.idle_timeout = IDLE_WORKER_SECONDS


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """The pod's service account in a cluster, else the kubeconfig ($KUBECONFIG or ~/.kube/config).

    In a pod, the official client's in-cluster config: it reaches the API server at
    $KUBERNETES_SERVICE_HOST, with no need for cluster DNS.
    """
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return kopf.login_via_client(**kwargs)
    return kopf.login_with_kubeconfig(**kwargs)


watches.watch_registered()


def make_pass(memo: kopf.Memo) -> Callable[[Key], float | None]:
    """The function the scheduler runs for one object: its freshest body, a context, its kind's pass."""
    memories: dict[Key, dict[str, Any]] = {}

    def run(key: Key) -> float | None:
        memory = memories.setdefault(key, {})
        registration = behaviour.of(key[0])
        body = memo.cache.parent(key)
        if body is not None and memory.get(REREAD):  # after a 409: what the API server holds now
            body = kube.get(memo.kube, registration.kind.kind, key[1], key[2])
            memory.pop(REREAD, None)
            if body is not None:
                memo.cache.remember(key, body)
        if body is None:
            memories.pop(key, None)
            return None  # deleted: its children go with it (ownerReferences)
        # A copy of its own: the pass stages changes on it, and kopf's index entry must stay as the watch saw it.
        ctx = Context(
            key,
            copy.deepcopy(body),
            registration.status,
            memo.kube,
            memo.cache,
            memo.config,
            memo.get("mlflow"),
            memo.get("prometheus"),
            memory=memory,
            backlog=memo.scheduler.backlog,
        )
        requeue = registration.step(ctx)
        if registration.critical is not None:  # the kind's lane rule, on the status this pass staged
            memo.scheduler.mark_critical(key, registration.critical(ctx, key in memo.scheduler.critical))
        return requeue

    return run


@kopf.on.startup()
async def startup(
    settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger | logging.LoggerAdapter[Any], **kwargs: Any
) -> None:
    """Configure kopf and create the clients, the cache and the scheduler (tests may inject clients);
    start leader election unless run ``--standalone`` (this replica then always reconciles)."""
    redact_log_records()  # before the first client is made: no credential reaches a log line
    refused = kopf_refusal()
    if refused:
        logger.warning(refused)
    standalone = settings.peering.standalone  # as given to kopf (--standalone), before apply_settings
    apply_settings(settings)
    memo.cache = Cache({name: kwargs[name] for name in watches.indexes()})
    memo.seen = {}
    config: OperatorConfig = memo.get("config") or OperatorConfig()
    memo.scheduler = Scheduler(make_pass(memo), workers=config.workers, for_new=config.workers // 3)
    memo.config = config
    prices = cost.prices_of(config.prices_file)  # a bad price file stops the start, naming the field
    if prices.configured or prices.open_cost:
        also = "; OpenCost's node prices from Prometheus where it has them" if prices.open_cost else ""
        logger.info("prices from %s (%s)%s", config.prices_file, prices.currency or "no currency named", also)
    if prices.open_cost and not config.prometheus_url:
        logger.warning(
            "the price file says openCost: true but the operator has no --prometheus-url: "
            "OpenCost's node prices cannot be read, the price table alone is used"
        )
    if memo.get("kube") is None:
        memo.kube = Kube.connect(connections=config.workers + 4)  # passes, and the leader's renewals
    warn_insecure_tls(config, logger)
    if memo.get("mlflow") is None and config.mlflow_url:
        memo.mlflow = MlflowClient(config.mlflow_url, timeout=config.http_timeout_seconds, tls=config.mlflow_tls)
    if isinstance(memo.get("mlflow"), MlflowClient) and memo.mlflow.proof is None:  # what it creates, proven
        memo.mlflow.proof = await asyncio.to_thread(
            proofkey.load, memo.kube, config.leader_election_namespace, config.mlflow_proof_secret
        )
    if memo.get("prometheus") is None and config.prometheus_url:
        memo.prometheus = PrometheusClient(
            config.prometheus_url, timeout=config.http_timeout_seconds, tls=config.prometheus_tls
        )
    memo.healer = Healer(
        memo.kube, memo.cache, memo.scheduler, config.namespaces, watches.PLURALS, watches.MANAGED_SELECTOR
    )
    if memo.get("serve_metrics", True) and config.metrics_port:
        metrics.serve(config.metrics_port, config.metrics_address)
        logger.info("operator metrics on %s:%d/metrics", config.metrics_address, config.metrics_port)
    await serve_mlflow_webhook(memo, config, logger)
    if standalone:
        metrics.LEADER.set(1)
        memo.leader = None
    else:
        memo.leader = elect(memo, config)


def warn_insecure_tls(config: OperatorConfig, logger: Any) -> None:
    """A warning at start for each server whose certificate the operator was told not to check."""
    for service, options in (("MLflow", config.mlflow_tls), ("Prometheus", config.prometheus_tls)):
        if options.insecure:
            logger.warning(tls.insecure_warning(service, options))


async def serve_mlflow_webhook(memo: kopf.Memo, config: OperatorConfig, logger: Any) -> None:
    """With a webhook secret, serve MLflow's deliveries (slipway.mlflowhook); alias lookups then only
    back them up, every ``alias_webhook_poll_seconds``. The secret stays in the verifier alone."""
    secret = read_setting("mlflow_webhook_secret")
    memo.webhook = None
    if not secret or not config.mlflow_webhook_port:
        return
    memo.config = dataclasses.replace(config, alias_poll_seconds=config.alias_webhook_poll_seconds)
    # The ids believed are kept in a Lease of the operator's namespace, so that no replica believes one twice.
    kube = memo.get("kube")
    ledger = mlflowhook.LeaseLedger(kube.api, config.leader_election_namespace) if kube is not None else None
    memo.webhook = await mlflowhook.serve(
        secret, memo.cache, memo.scheduler, config.mlflow_webhook_port, config.metrics_address, ledger
    )
    logger.info(
        "MLflow webhook on %s:%d%s; alias lookups every %gs as its fallback",
        config.metrics_address,
        config.mlflow_webhook_port,
        mlflowhook.PATH,
        config.alias_webhook_poll_seconds,
    )


def known_keys(cache: Cache) -> list[Key]:
    """Every Slipway object in the cache (the "name" keys of the registered kinds' indexes)."""
    return [
        (registration.plural, key[1], key[2])
        for registration in behaviour.registered()
        for key in list(cache.indexes[registration.index])
        if len(key) == 3 and key[0] == "name"
    ]


EXIT_LEASE_LOST = 1  # the process's exit status when it stops writing because it lost the Lease
DRAIN_SECONDS = 20.0  # on shutdown, passes get this long to finish (the pod's grace period is 30 s)


def exit_now(why: str) -> None:
    """Stop every side effect at once: end the process (its container restarts and stands by).
    Passes in flight die mid-line, which every pass is written to survive (restart-safe)."""
    logging.getLogger(__name__).critical(
        "exiting with status %d so that no pass writes again: %s", EXIT_LEASE_LOST, why
    )
    for stream in (sys.stderr, sys.stdout):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(EXIT_LEASE_LOST)


def elect(memo: kopf.Memo, config: OperatorConfig, lost: Callable[[str], None] = exit_now) -> LeaderElector:
    """Leader election: while standing by, the scheduler keeps wake-ups and runs no pass; on
    becoming the leader it runs them and wakes every known object once, so nothing is missed.
    On losing the Lease the process exits (``lost``): fencing, as controller-runtime does."""
    scheduler: Scheduler = memo.scheduler
    scheduler.pause()
    metrics.LEADER.set(0)

    def lead() -> None:
        metrics.LEADER.set(1)
        scheduler.resume(known_keys(memo.cache))

    def lose(why: str) -> None:
        scheduler.pause()
        metrics.LEADER.set(0)
        lost(f"lost the Lease: {why}")

    timing = Timing(config.lease_duration_seconds, config.lease_renew_deadline_seconds, config.lease_retry_seconds)
    store = LeaseStore(memo.kube.api, config.leader_election_namespace, timeout=timing.request_timeout)
    elector = LeaderElector(store, config.leader_election_identity, timing, on_lead=lead, on_lost=lose)
    if isinstance(memo.get("mlflow"), MlflowClient):  # no MLflow write starts or lasts past the renew deadline
        memo.mlflow.lease_left = elector.time_left
    memo.fence = Fence(elector, lose).start()
    elector.start()
    return elector


@kopf.on.probe(id="reconciliation")
async def reconciliation_probe(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    """/healthz: fails (HTTP 500) while a pass has run for over ``stuck_pass_seconds`` (a stuck
    thread) or leader election has stopped; otherwise reports whether this replica leads."""
    scheduler: Scheduler | None = memo.get("scheduler")
    elector: LeaderElector | None = memo.get("leader")
    if scheduler is None:
        return {"leader": False, "starting": True}
    if elector is not None and elector.task is not None and elector.task.done():
        raise kopf.PermanentError("leader election has stopped")
    limit = memo.config.stuck_pass_seconds
    stuck = scheduler.overdue(limit)
    if stuck:
        names = ", ".join(f"{'/'.join(key)} ({age:.0f}s)" for key, age in stuck[:5])
        raise kopf.PermanentError(f"reconciliation passes running for over {limit:g}s: {names}")
    return {
        "leader": elector is None or elector.leading,
        "identity": elector.identity if elector is not None else None,
        "passes": scheduler.passes,
        "running": len(scheduler.started),
    }


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Stop starting passes, let the running ones finish while the Lease is still renewed, then
    hand the Lease over at once. Passes still running after ``DRAIN_SECONDS``: the process exits
    without releasing the Lease, which a standby takes once it expires; no pass outlives its lease."""
    elector: LeaderElector | None = memo.get("leader")
    if elector is not None:
        memo.scheduler.pause()
        drained = await memo.scheduler.drain(DRAIN_SECONDS)
        await elector.resign()
        memo.fence.stop()
        if not drained:
            running = ", ".join("/".join(key) for key in sorted(memo.scheduler.running))
            exit_now(
                f"passes still running after {DRAIN_SECONDS:g}s of shutdown ({running}): the Lease is left to expire"
            )
        await elector.release()
    if memo.get("webhook") is not None:
        await memo.webhook.cleanup()
    for name in ("kube", "mlflow", "prometheus"):
        client = memo.get(name)
        if client is not None:
            client.close()
