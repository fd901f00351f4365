"""Which node is the active KRaft controller: a DescribeQuorum request, by hand.

In KRaft a client's Metadata (and DescribeCluster) answer names a random broker as the
"controller", never the quorum leader, and aiokafka has no DescribeQuorum. The chaos
test needs the real one to kill it, so this speaks the one request it needs.
"""

from __future__ import annotations

import socket
import struct

from services.devtools.infra.kafka import _recv_exact

_DESCRIBE_QUORUM = 55
_METADATA_TOPIC = b"__cluster_metadata"


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _request(correlation_id: int) -> bytes:
    client = b"recon-infra"
    # Request header v2: api key, version 0, correlation id, client id, no tagged fields.
    header = struct.pack(">hhih", _DESCRIBE_QUORUM, 0, correlation_id, len(client)) + client
    header += _uvarint(0)
    # DescribeQuorum v0 (flexible): one topic, one partition, compact arrays and strings.
    body = _uvarint(2) + _uvarint(len(_METADATA_TOPIC) + 1) + _METADATA_TOPIC
    body += _uvarint(2) + struct.pack(">i", 0) + _uvarint(0)  # partition 0, no tags
    body += _uvarint(0) + _uvarint(0)  # topic tags, request tags
    return header + body


def quorum_leader(controller_port: int, timeout_s: float = 2.0) -> int | None:
    """The node id of the active controller, as the node on `controller_port` knows it;
    None if the node does not answer or knows no leader (an election is under way)."""
    try:
        with socket.create_connection(("127.0.0.1", controller_port), timeout=timeout_s) as sock:
            request = _request(7)
            sock.sendall(struct.pack(">i", len(request)) + request)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            body = _recv_exact(sock, size)
    except OSError:
        return None
    # Response header v1: correlation id, tags. Body: error, topics[name, partitions[
    # index, error, leader id, ...]].
    _, pos = _read_uvarint(body, 4)
    (error,) = struct.unpack_from(">h", body, pos)
    pos += 2
    topics, pos = _read_uvarint(body, pos)
    if error or topics < 2:
        return None
    name_len, pos = _read_uvarint(body, pos)
    pos += name_len - 1
    partitions, pos = _read_uvarint(body, pos)
    if partitions < 2:
        return None
    _index, partition_error, leader = struct.unpack_from(">ihi", body, pos)
    if partition_error or leader < 0:
        return None
    return int(leader)
