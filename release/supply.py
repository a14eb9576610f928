"""The supply-chain steps of make release (release/bundle.py): the tree a release is built from, each image's
SBOM, and the signatures a team verifies before it pushes the images.

- A release is built from a commit: a working tree with changes (``git status --porcelain``) is refused
  unless the build says it is a development one (``--allow-dirty``, make release ALLOW_DIRTY=1).
- Each image's SBOM, CycloneDX JSON written by syft (built from the Go module proxy, make syft) from the
  OCI archive itself: the Debian packages of the base and every Python distribution of /opt/slipway.
- Signatures: OpenSSH's ``ssh-keygen -Y sign`` (SSHSIG, namespace ``slipway-release``) with the release
  key, over SHA256SUMS (which names every file of the release) and over each image archive, each signature
  in FILE.sig beside it. A team verifies with the release key's public half, which it got from Slipway,
  not from the release (docs/install.md):

      echo "slipway-release namespaces=\"slipway-release\" $(cat slipway-release.pub)" > allowed_signers
      ssh-keygen -Y verify -f allowed_signers -I slipway-release -n slipway-release -s SHA256SUMS.sig < SHA256SUMS
      sha256sum -c SHA256SUMS
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYFT = ROOT / ".cache" / "syft" / "syft"
NAMESPACE = "slipway-release"  # an SSHSIG namespace: a signature for another purpose never verifies here
IDENTITY = "slipway-release"


class Refused(SystemExit):
    """make release stopped before it built anything, with the reason."""


def dirty(root: Path = ROOT) -> list[str]:
    """The paths ``git status --porcelain`` reports in ``root`` (none: the tree is the commit)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=normal"],
                             check=True, capture_output=True, text=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as e:
        detail = e.stderr.strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
        raise Refused(f"release: cannot tell whether {root} is clean (git status failed: {detail}); "
                      "pass --allow-dirty (make release ALLOW_DIRTY=1) for a development build") from e  # fmt: skip
    return [line[3:] for line in out.splitlines() if line.strip()]


def require_clean(root: Path = ROOT, allow_dirty: bool = False) -> None:
    """Refuse a release from a working tree that differs from its commit, unless allowed (development)."""
    changed = dirty(root)
    if changed and not allow_dirty:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise Refused(f"release: the working tree has uncommitted changes ({shown}): a release is built from a "
                      "commit. Commit or stash them, or pass --allow-dirty (make release ALLOW_DIRTY=1) for a "
                      "development build that is not to be published")  # fmt: skip
    if changed:
        print(f"release: building from a working tree with {len(changed)} uncommitted changes (--allow-dirty)")


def require_key(key: Path | None, unsigned: bool) -> None:
    if key is None and not unsigned:
        raise Refused("release: no signing key: pass --signing-key PATH (make release SIGNING_KEY=PATH; an OpenSSH "
                      "private key, ssh-keygen -t ed25519), or --unsigned (make release UNSIGNED=1) for a "
                      "development build")  # fmt: skip
    if key is not None and not key.is_file():
        raise Refused(f"release: signing key {key}: no such file")


def require_syft() -> None:
    if not SYFT.exists():
        raise Refused(f"release: {SYFT} is missing: run `make syft` (each image's SBOM)")


def sbom(archive: Path, out: Path) -> None:
    """``out``: the CycloneDX JSON SBOM of the one image in the OCI archive ``archive``."""
    env = {**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false", "SYFT_CACHE_DIR": str(SYFT.parent / "cache")}
    subprocess.run([str(SYFT), "scan", "-q", f"oci-archive:{archive}", "-o", f"cyclonedx-json={out}"], env=env,
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip


def sign(key: Path, path: Path) -> Path:
    """``path``.sig: an SSHSIG signature of ``path`` by ``key`` in the namespace slipway-release."""
    sig = path.with_name(path.name + ".sig")
    sig.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", NAMESPACE, str(path)], check=True,
                   capture_output=True)  # fmt: skip
    return sig


def verify(public_key: str, path: Path, signature: Path | None = None) -> tuple[bool, str]:
    """Whether ``signature`` (default ``path``.sig) is the release key's over ``path``, and ssh-keygen's words.
    ``public_key``: the key's public half (``ssh-ed25519 AAAA...``), from a source other than the release."""
    signature = signature or path.with_name(path.name + ".sig")
    signers = path.parent / f".allowed_signers-{os.getpid()}"
    signers.write_text(f'{IDENTITY} namespaces="{NAMESPACE}" {public_key.strip()}\n')
    try:
        with path.open("rb") as data:
            done = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", IDENTITY, "-n", NAMESPACE,
                                   "-s", str(signature)], stdin=data, capture_output=True, text=True)  # fmt: skip
    finally:
        signers.unlink(missing_ok=True)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def fingerprint(key: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(key)], check=True, capture_output=True, text=True).stdout
    return out.split()[1]
