"""The names and labels of every child Slipway makes, and of the pods it runs.

Names and label values are derived so that any name the API server accepts for a custom
resource (a DNS-1123 subdomain: up to 253 characters, dots, a leading digit) gives valid
children. A derivation is deterministic (a restarted operator finds the same children) and
the identity whenever the plain value is already valid; otherwise the value is lowercased,
its dots and other invalid characters become ``-``, a DNS-1035 name gets a letter in front
of a leading digit, and it is cut to length with a hash of the whole plain value inserted,
so two different parents never share a child.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

MANAGED_BY = {"app.kubernetes.io/managed-by": "slipway"}
MAX_LABEL = 63  # DNS labels (Service, Job and Deployment names) and label values
HASH_LENGTH = 8
LETTER = "s"  # in front of a DNS-1035 name whose parent starts with a digit

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def _derive(parent: str, suffix: str, pattern: re.Pattern[str], max_length: int, letter_first: bool) -> str:
    plain = f"{parent}-{suffix}" if suffix else parent
    if len(plain) <= max_length and pattern.fullmatch(plain):
        return plain
    base = re.sub(r"[^a-z0-9-]+", "-", parent.lower()).strip("-")
    head = [LETTER] if letter_first and not base[:1].isalpha() else []
    tail = [_digest(plain), suffix] if suffix else [_digest(plain)]
    keep = max_length - len("-".join([*head, *tail])) - 1
    if keep < 1:
        raise ValueError(f"no name of at most {max_length} characters ends with -{suffix}")
    return "-".join(p for p in (*head, base[:keep].rstrip("-"), *tail) if p)


def dns1123_name(parent: str, suffix: str = "", *, max_length: int = MAX_LABEL) -> str:
    """A DNS-1123 label (Job, Deployment, PVC names): ``<parent>-<suffix>`` when valid, else derived."""
    return _derive(parent, suffix, _DNS1123_LABEL, max_length, letter_first=False)


def dns1035_name(parent: str, suffix: str = "", *, max_length: int = MAX_LABEL) -> str:
    """A DNS-1035 label (Service names: a letter first, no dots): ``<parent>-<suffix>`` when valid,
    else derived (``7b-chat`` -> ``s-7b-chat-<hash>``, ``llama-3.1-8b`` -> ``llama-3-1-8b-<hash>``)."""
    return _derive(parent, suffix, _DNS1035_LABEL, max_length, letter_first=True)


def label_value(value: str) -> str:
    """A valid label value: ``value`` itself when valid, else cut to 63 characters with a hash."""
    if len(value) <= MAX_LABEL and _LABEL_VALUE.fullmatch(value):
        return value
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", value).lstrip("-_.")
    base = base[: MAX_LABEL - HASH_LENGTH - 1].rstrip("-_.")
    return f"{base}-{_digest(value)}" if base else _digest(value)


def parent_name(meta: dict[str, Any], annotation: str, label: str) -> str:
    """The parent a pod names: its annotation (the full name), else its label (the same value below
    64 characters; pods made before the annotation existed carry only the label)."""
    return (meta.get("annotations") or {}).get(annotation) or meta["labels"][label]
