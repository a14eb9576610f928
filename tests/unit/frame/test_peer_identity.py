"""The operator starts under a UID with no passwd entry (the image's 65532 as a kubelet runs it,
OpenShift's arbitrary UIDs): kopf's own peer identity asks the password database and fails there,
so ``python -m slipway`` hands kopf an identity made without it."""

from __future__ import annotations

import os
import pwd

import pytest
from kopf._core.engines import peering

from slipway.__main__ import peer_identity


@pytest.fixture
def uid_without_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    def getpwuid(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")  # what the C function raises

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):  # a pod's environment has none of them
        monkeypatch.delenv(name, raising=False)


def test_kopf_alone_fails_without_a_passwd_entry(uid_without_passwd_entry: None) -> None:
    with pytest.raises(KeyError, match="uid not found"):
        peering.detect_own_id(manual=False)


def test_the_operator_identity_needs_no_passwd_entry(uid_without_passwd_entry: None) -> None:
    identity = peer_identity()
    assert identity.startswith(f"uid-{os.getuid()}@"), identity
    assert identity.endswith(f"/{os.getpid()}"), identity


def test_the_identity_names_the_user_when_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "slipway")
    assert peer_identity().startswith("slipway@"), peer_identity()
