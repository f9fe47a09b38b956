#!/usr/bin/python3
"""dns_stub.py — a tiny UDP DNS server standing in for a cluster's DNS in test_gateway.sh.

  dns_stub.py DIR   prints the port it listens on (127.0.0.1), then answers until killed.

An A query for NAME is answered with the address written in the file DIR/NAME (one line,
e.g. 127.0.0.2), TTL 1 s; a name with no file gets NXDOMAIN, as a pod that is gone (or not
ready) has no record behind a headless Service. Other query types get an empty answer.
Standard library only.
"""
import os
import socket
import struct
import sys


def qname(packet, off):
    labels = []
    while packet[off]:
        n = packet[off]
        labels.append(packet[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n
    return ".".join(labels).lower(), off + 1


def answer(packet, directory):
    tid, _flags, qd = struct.unpack(">HHH", packet[:6])
    if qd != 1:
        return None
    name, end = qname(packet, 12)
    qtype, _qclass = struct.unpack(">HH", packet[end:end + 4])
    question = packet[12:end + 4]
    path = os.path.join(directory, name)
    addr = open(path).read().strip() if "/" not in name and os.path.isfile(path) else None
    if addr is None:
        return struct.pack(">HHHHHH", tid, 0x8183, 1, 0, 0, 0) + question  # NXDOMAIN
    if qtype != 1:
        return struct.pack(">HHHHHH", tid, 0x8180, 1, 0, 0, 0) + question  # no such type
    rr = struct.pack(">HHHIH", 0xC00C, 1, 1, 1, 4) + socket.inet_aton(addr)
    return struct.pack(">HHHHHH", tid, 0x8180, 1, 1, 0, 0) + question + rr


def main():
    directory = sys.argv[1]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1], flush=True)
    while True:
        packet, peer = s.recvfrom(512)
        try:
            reply = answer(packet, directory)
        except (struct.error, IndexError, OSError):
            reply = None
        if reply:
            s.sendto(reply, peer)


if __name__ == "__main__":
    main()
