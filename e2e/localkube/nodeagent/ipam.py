"""Pod IPs: each pod of a node gets its own loopback address, 127.0.x.y.

Node ``i`` owns 127.0.(8i+1).1 to 127.0.(8i+8).254 (2032 addresses). Addresses
are handed out round-robin, so a freed one is not reused at once, and persisted
so that a restarted agent keeps them. An address where some process already
listens (another cluster on this machine, a pod left behind by a killed test run)
is skipped, so two clusters can run side by side.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

BLOCKS_PER_NODE = 8
PROC_NET_TCP = Path("/proc/net/tcp")
TCP_LISTEN = "0A"


def listening_addresses(table: Path = PROC_NET_TCP) -> set[str]:
    """IPv4 addresses with a listening TCP socket on this machine (from /proc/net/tcp)."""
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:
        return set()
    found = set()
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[3] == TCP_LISTEN:
            hex_ip = fields[1].split(":")[0]
            found.add(".".join(str(int(hex_ip[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


class IPAM:
    """Allocates and releases the pod IPs of one node."""

    def __init__(self, state_dir: Path, node_index: int) -> None:
        if not 0 <= node_index < 255 // BLOCKS_PER_NODE:
            raise ValueError(f"node index {node_index} out of range")
        self.path = state_dir / "ips.json"
        first = BLOCKS_PER_NODE * node_index + 1
        self.pool = [f"127.0.{x}.{y}" for x in range(first, first + BLOCKS_PER_NODE) for y in range(1, 255)]
        self.lock = threading.Lock()
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            doc = {}
        self.by_uid: dict[str, str] = doc.get("by_uid", {})
        self.cursor: int = doc.get("cursor", 0)

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"by_uid": self.by_uid, "cursor": self.cursor}))
        tmp.replace(self.path)

    def allocate(self, uid: str) -> str:
        """The pod's address (the same one again if it has one)."""
        with self.lock:
            if uid in self.by_uid:
                return self.by_uid[uid]
            used = set(self.by_uid.values()) | listening_addresses()
            for step in range(len(self.pool)):
                ip = self.pool[(self.cursor + step) % len(self.pool)]
                if ip not in used:
                    self.cursor = (self.cursor + step + 1) % len(self.pool)
                    self.by_uid[uid] = ip
                    self._save()
                    return ip
        raise RuntimeError("no free pod IP on this node")

    def release(self, uid: str) -> None:
        with self.lock:
            if self.by_uid.pop(uid, None) is not None:
                self._save()

    def retain_only(self, uids: set[str]) -> None:
        """Release the addresses of pods not in ``uids``."""
        with self.lock:
            for uid in set(self.by_uid) - uids:
                del self.by_uid[uid]
            self._save()
