"""Pod IPs of the local cluster's node agent skip addresses another process listens on."""

from __future__ import annotations

import socket
from pathlib import Path

from localkube.nodeagent.ipam import IPAM, listening_addresses

# /proc/net/tcp: 127.0.1.3:8080 listening (0A), 127.0.1.4:8080 established (01).
TABLE = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0301007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0401007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1
"""


def test_listening_addresses_reads_only_listening_sockets(tmp_path: Path) -> None:
    table = tmp_path / "tcp"
    table.write_text(TABLE)
    assert listening_addresses(table) == {"127.0.1.3"}


def test_allocation_skips_an_address_a_process_listens_on(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.1.1", 0))
        taken.listen(1)
        allocated = IPAM(tmp_path, 0).allocate("pod-a")
        assert allocated != "127.0.1.1" and allocated not in listening_addresses()
