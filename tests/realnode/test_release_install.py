"""A release installed as a team installs it, on the real node, from a registry: dist/X.Y.Z/ of
`make release` copied alone into an empty directory and verified as docs/install.md tells a team (the
signatures of SHA256SUMS and of both archives against the release key, here the tests' own, then the
sums); both archives pushed as docs/install.md tells a
team (`skopeo copy --preserve-digests`) to a plain-HTTP registry of its own on loopback (Debian's
docker-registry); the packaged chart installed with `helm install`, the images' repositories set to
that registry, in a namespace enforcing ``restricted``.

containerd pulls both images by digest: the node trusts the registry through a ``hosts.toml`` under
the CRI's ``config_path`` (containerd 1.6), and the images `make image` imported at cluster start are
removed from the node first (imported again at the end, for the other tests), so the kubelet pulls
them as on a team's fresh node. The registry's access log shows containerd fetching the manifest by
digest, the config and every layer not already unpacked on the node (the two images share their base
layer; a container of an earlier test may still hold a layer). Both operator replicas are Running and
Ready as UID 65532 on a read-only root filesystem, each pod's imageID is the registry's name for the
archive's digest, one replica leads; a pod of the workloads image the operator hands its pods (the
chart's SLIPWAY_WORKLOAD_IMAGE) imports its workloads, pulled the same way. The kubelet's pull times
and the time from `helm install` to both replicas Ready are printed."""

from __future__ import annotations

import contextlib
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from localkube.nodeimages import dist_archives, evict_image, import_images, unpacked_layers
from localkube.realnode import containerd_socket, trust_registry
from localkube.wait import wait_for
from slipway_testing.registry import Registry, loopback_registry
from slipway_testing.release import layers_of, load, release_alone, signing_key

IMPORTS = "import slipway.workloads.fetch, slipway.workloads.quantize, slipway.workloads.serve, " \
          "slipway.workloads.train, slipway.workloads.validate; print('workloads imported')"  # fmt: skip
PULLED = re.compile(r'Successfully pulled image "([^"]+)" in (\S+) \(')


def workloads_pod(image: str) -> dict[str, object]:
    """A pod that passes ``restricted``: the workloads image, imported once, then done."""
    return {
        "metadata": {"name": "workloads"},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "workloads",
                    "image": image,
                    "command": ["python", "-c", IMPORTS],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],  # fmt: skip
        },
    }


def pulls(real_cluster, ns: str) -> dict[str, list[str]]:
    """The kubelet's ``Pulled`` Events of ``ns``: each image reference and the pull times it reported."""
    out: dict[str, list[str]] = {}
    for event in real_cluster.kube.get(f"/api/v1/namespaces/{ns}/events")["items"]:
        match = PULLED.match(event.get("message", "")) if event.get("reason") == "Pulled" else None
        if match:
            out.setdefault(match[1], []).append(match[2])
    return out


def assert_pulled(registry: Registry, repository: str, archive: Path, digest: str, unpacked: set[str]) -> str:
    """containerd fetched from ``registry`` the manifest, the config and every layer of ``archive``'s image
    that was not already unpacked on the node (``unpacked``: chain IDs, taken before the pull; a layer
    another image shares, or a container of an earlier pod still holds, is not fetched again)."""
    config, layers = layers_of(archive)
    wanted = {digest, config} | {layer for layer, chain in layers.items() if chain not in unpacked}
    missing = wanted - registry.pulled_by(repository, "containerd/")
    assert not missing, f"containerd did not fetch {sorted(missing)} of {repository} from {registry.host}"
    return f"{len(wanted) - 2} of {len(layers)} layers fetched"


@contextlib.contextmanager
def evicted(real_cluster, socket: Path, digests: dict[str, str]) -> Iterator[None]:
    """Neither image on the node while the block runs (a team's fresh node); imported again after, and
    waited for until the node lists them (the kubelet refreshes its list of images every 30 s), since
    the other tests find the images' names there."""
    try:
        for digest in digests.values():
            evict_image(socket, digest)
        yield
    finally:
        names = set(import_images(socket, dist_archives()))
        node = f"/api/v1/nodes/{real_cluster.info.nodes[0]}"

        def listed() -> bool:
            images = real_cluster.kube.get(node)["status"].get("images", [])
            return names <= {name for image in images for name in image["names"]}

        wait_for(listed, 90, f"the node listing {sorted(names)} again")


@dataclass
class Installed:
    ns: str
    registry: Registry
    here: Path  # dist/VERSION/ alone
    version: str
    digests: dict[str, str]
    pinned: dict[str, str]  # each image by the registry's name and its digest
    socket: Path  # the node's containerd
    unpacked: set[str]  # the layers on the node before the install
    ready_seconds: float  # helm install to both replicas Ready

    def archive(self, kind: str) -> Path:
        return self.here / f"slipway-{kind}-{self.version}.oci.tar"


def verify_before_push(here: Path, version: str) -> None:
    """What docs/install.md has a team do before it pushes: SHA256SUMS and each archive verified against the
    release key's public half (here the tests' key, which signed the release), then every sum checked."""
    supply, (key, public) = load("supply"), signing_key()
    for name in ["SHA256SUMS", *(f"slipway-{k}-{version}.oci.tar" for k in ("operator", "workloads"))]:
        ok, said = supply.verify(public, here / name)
        assert ok, f"{name}.sig does not verify against the release key: {said}"
    done = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=here, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    print(
        f"real node: release {version} verified: SHA256SUMS.sig and both archives' .sig by "
        f"{supply.fingerprint(key)}, {done.stdout.count(': OK')} sums"
    )


@pytest.fixture(scope="module")
def installed(real_cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """dist/VERSION/ alone, both archives pushed to a registry on loopback the node trusts, neither image
    on the node, and the packaged chart installed from that registry into a namespace enforcing restricted."""
    here, served = tmp_path_factory.mktemp("release"), tmp_path_factory.mktemp("registry")
    version, digests = release_alone(here)
    verify_before_push(here, version)
    socket = containerd_socket(real_cluster.info.directory)
    ns = f"slipway-rel-{secrets.token_hex(2)}"
    with loopback_registry(served) as registry, evicted(real_cluster, socket, digests):
        pinned = {kind: f"{registry.host}/team/slipway-{kind}@{digest}" for kind, digest in digests.items()}
        for kind in digests:
            took = registry.push(here / f"slipway-{kind}-{version}.oci.tar", f"team/slipway-{kind}", version)
            print(f"real node: slipway-{kind} pushed to {registry.host} in {took:.1f}s")
        trust_registry(real_cluster.info.directory, registry.host)
        labels = {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }
        real_cluster.kube.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})
        try:
            unpacked = unpacked_layers(socket)
            start = time.monotonic()
            real_cluster.install_operator(ns, ns, f"image.repository={registry.host}/team/slipway-operator",
                                          f"workloadsImage.repository={registry.host}/team/slipway-workloads",
                                          chart=here / f"slipway-{version}.tgz",
                                          crds=here / f"slipway-crds-{version}.tgz")  # fmt: skip
            yield Installed(ns, registry, here, version, digests, pinned, socket, unpacked, time.monotonic() - start)
        finally:
            with contextlib.suppress(AssertionError):
                real_cluster.helm("uninstall", ns, "-n", ns, "--ignore-not-found", timeout=120)
            real_cluster.kube.delete(f"/api/v1/namespaces/{ns}")


@pytest.mark.realnode
def test_the_operator_pulled_by_digest_from_the_registry_runs_restricted_with_one_leader(real_cluster, installed):
    ns, image = installed.ns, installed.pinned["operator"]
    pods = real_cluster.operator_pods(ns)
    for pod in pods:
        assert pod["spec"]["containers"][0]["image"] == image, pod["spec"]["containers"][0]
        assert pod["status"]["containerStatuses"][0]["imageID"] == image, pod["status"]  # the archive's digest
    holder = real_cluster.assert_restricted_replicas(ns, pods)
    fetched = assert_pulled(installed.registry, "team/slipway-operator", installed.archive("operator"),
                            installed.digests["operator"], installed.unpacked)  # fmt: skip
    times = pulls(real_cluster, ns).get(image)
    assert times, f"no Pulled Event for {image} in {ns}: the kubelet found it on the node"
    print(f"real node: release {installed.version} from {installed.registry.host}: helm install to both replicas "
          f"Ready in {installed.ready_seconds:.1f}s; leader {holder}; operator pulled by digest in "
          f"{', '.join(times)} ({fetched})")  # fmt: skip


@pytest.mark.realnode
def test_the_workloads_image_the_operator_hands_its_pods_pulls_by_digest(real_cluster, installed):
    ns, image = installed.ns, installed.pinned["workloads"]
    (deployment,) = real_cluster.kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SLIPWAY_WORKLOAD_IMAGE"] == env["SLIPWAY_FETCH_IMAGE"] == image, env
    unpacked = unpacked_layers(installed.socket)
    real_cluster.kube.create(f"/api/v1/namespaces/{ns}/pods", workloads_pod(image))

    def done() -> dict | None:
        pod = real_cluster.kube.get(f"/api/v1/namespaces/{ns}/pods/workloads")
        assert pod["status"].get("phase") != "Failed", pod["status"]
        return pod if pod["status"].get("phase") == "Succeeded" else None

    pod = wait_for(done, 240, f"pod {ns}/workloads pulled from {installed.registry.host} and done")
    assert pod["status"]["containerStatuses"][0]["imageID"] == image, pod["status"]
    logs = real_cluster.kubectl("-n", ns, "logs", "workloads").stdout
    assert "workloads imported" in logs, logs
    fetched = assert_pulled(installed.registry, "team/slipway-workloads", installed.archive("workloads"),
                            installed.digests["workloads"], unpacked)  # fmt: skip
    times = pulls(real_cluster, ns).get(image)
    assert times, f"no Pulled Event for {image} in {ns}: the kubelet found it on the node"
    print(f"real node: workloads pulled by digest in {', '.join(times)} ({fetched})")
