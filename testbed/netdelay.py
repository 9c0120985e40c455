"""Delay the packets of one NFQUEUE queue: ``tc netem``'s delay for kernels without netem.

The test machine's kernel is built without ``sch_netem`` but with ``NFQUEUE``, so
:meth:`testbed.netns.Network.impair` sends a host's frames through an iptables ``NFQUEUE``
rule in the network's hub namespace, and this program, run in that namespace, accepts each
packet ``delay`` (plus a uniform random ``-jitter..+jitter``) milliseconds after it was
queued. It speaks the ``nfnetlink_queue`` protocol directly over a netlink socket, with the
standard library only, and asks for packet metadata only (no payload copies).

Run as a script: ``python netdelay.py QUEUE DELAY_MS [JITTER_MS]``. It prints ``bound`` once
it receives the queue's packets; a rule with ``--queue-bypass`` lets packets pass while no
program is bound, so the caller waits for that line before counting on the delay.
"""

from __future__ import annotations

import heapq
import random
import select
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NF_ACCEPT = 1
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
QUEUE_MAXLEN = 10_000


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(msg: int, queue: int, attrs: bytes, flags: int = NLM_F_REQUEST) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    kind = (NFNL_SUBSYS_QUEUE << 8) | msg
    return struct.pack("=IHHII", 16 + len(body), kind, flags, 0, 0) + body


def _check_ack(sock: socket.socket) -> None:
    data = sock.recv(65536)
    _length, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", data)
    if kind == NLMSG_ERROR:
        (error,) = struct.unpack_from("=i", data, 16)
        if error != 0:
            raise OSError(-error, "nfnetlink_queue refused the configuration")


def bind(queue: int) -> socket.socket:
    """Open a netlink socket bound to ``queue``, copying packet metadata only."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    sock.bind((0, 0))
    command = struct.pack("=BBH", NFQNL_CFG_CMD_BIND, 0, 0)
    flags = NLM_F_REQUEST | NLM_F_ACK
    sock.send(_message(NFQNL_MSG_CONFIG, queue, _attr(NFQA_CFG_CMD, command), flags))
    _check_ack(sock)
    params = struct.pack("!IB", 0, NFQNL_COPY_META)
    maxlen = struct.pack("!I", QUEUE_MAXLEN)
    attrs = _attr(NFQA_CFG_PARAMS, params) + _attr(NFQA_CFG_QUEUE_MAXLEN, maxlen)
    sock.send(_message(NFQNL_MSG_CONFIG, queue, attrs, flags))
    _check_ack(sock)
    return sock


def packet_ids(data: bytes) -> list[int]:
    """The packet ids of the ``NFQNL_MSG_PACKET`` messages in one netlink read."""
    ids = []
    offset = 0
    while offset + 16 <= len(data):
        length, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, offset)
        if length < 16:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            attr = offset + 20  # past nlmsghdr and nfgenmsg
            end = offset + length
            while attr + 4 <= end:
                attr_len, attr_kind = struct.unpack_from("=HH", data, attr)
                if attr_len < 4:
                    break
                if attr_kind & 0x3FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, attr + 4)[0])
                    break
                attr += attr_len + (-attr_len % 4)
        offset += length + (-length % 4)
    return ids


def run(queue: int, delay_ms: float, jitter_ms: float) -> None:
    """Accept every packet of ``queue`` after its delay, until killed."""
    sock = bind(queue)
    print("bound", flush=True)
    due: list[tuple[float, int]] = []
    while True:
        timeout = max(0.0, due[0][0] - time.monotonic()) if due else None
        readable, _, _ = select.select([sock], [], [], timeout)
        now = time.monotonic()
        if readable:
            for packet_id in packet_ids(sock.recv(1 << 20)):
                delay = delay_ms + random.uniform(-jitter_ms, jitter_ms)
                heapq.heappush(due, (now + max(0.0, delay) / 1000, packet_id))
        while due and due[0][0] <= now:
            _, packet_id = heapq.heappop(due)
            verdict = struct.pack("!II", NF_ACCEPT, packet_id)
            sock.send(_message(NFQNL_MSG_VERDICT, queue, _attr(NFQA_VERDICT_HDR, verdict)))


if __name__ == "__main__":
    run(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
