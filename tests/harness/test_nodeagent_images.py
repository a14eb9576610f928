"""The node agent's table of known images: a container with no command runs its image's entrypoint,
built on this machine, whatever the tag or digest; a program that listens on every address gets its
ports moved to free ones, the pod's own ports relayed to them (pods share the host's network here)."""

from __future__ import annotations

import socket

import pytest

from localkube.nodeagent import images, portmap

EPP = "registry.k8s.io/gateway-api-inference-extension/epp"


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        (f"{EPP}:v1.5.0", EPP),
        (f"{EPP}@sha256:{'0' * 64}", EPP),
        (f"{EPP}:v1.5.0@sha256:{'0' * 64}", EPP),
        ("localhost:5000/team/epp:v1", "localhost:5000/team/epp"),  # a registry's port is not a tag
        ("epp", "epp"),
    ],
)
def test_an_images_repository_drops_its_tag_and_digest(image: str, repository: str) -> None:
    assert images.repository(image) == repository


def test_only_known_images_have_an_entrypoint_and_an_unbuilt_one_says_how_to_build_it(tmp_path, monkeypatch) -> None:
    [binary] = images.entrypoint(f"{EPP}:v1.4.0")
    assert binary.endswith(".cache/gie/epp")
    assert images.entrypoint("vllm/vllm-openai:v0.11.0") == []
    tool = tmp_path / "tool"
    monkeypatch.setitem(images.ENTRYPOINTS, "example.com/tool", ([str(tool)], "make tool"))
    assert "run `make tool`" in (images.unbuilt([str(tool), "--flag"]) or "")
    tool.write_text("")
    assert images.unbuilt([str(tool)]) is None
    assert images.unbuilt(["python", "-m", "x"]) is None


def test_wildcard_ports_are_moved_to_free_ones_and_mapped_from_the_pods_own() -> None:
    flags = {"--grpc-port": 9002, "--grpc-health-port": 9003, "--metrics-port": 9090}
    argv, mapping = portmap.remap(["epp", "--grpc-port", "9102", "--metrics-port=9190"], flags)
    assert set(mapping) == {9102, 9190, 9003}  # given (both spellings), and the default of the one not given
    assert argv[:2] == ["epp", "--grpc-port"] and argv[2] == str(mapping[9102])
    assert f"--metrics-port={mapping[9190]}" in argv and f"--grpc-health-port={mapping[9003]}" in argv
    for port in mapping.values():
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free when chosen
