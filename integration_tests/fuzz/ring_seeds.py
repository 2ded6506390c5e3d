#!/usr/bin/env python3
"""Writes the seed inputs of ring_recovery_fuzzer (corpus/ring_recovery/): small rings in the
layout of proto/cumemtrace/v1/shared_ring.h, whole ones and the damage the fuzzer is unlikely
to reach by itself. Usage: ring_seeds.py OUT_DIR"""
import struct
import sys

CAPACITY = 4096
MAGIC = 0x47524D43
LAYOUT = 2
NVTX, MEMORY, FAILED, THREAD_NAME, EXIT, BRIDGE, LAUNCH = 2, 1, 3, 4, 6, 8, 9
ATTRIBUTION_NAME = 11  # layout 3
TORCH_EVENT, PADDING = 128, 255
FLAG_ATTRIBUTION = 2  # layout 3: a TorchAttribution after the TorchRecord
AUTOGRAD_NODE = 11  # layout 4: a forward op that recorded a node and allocated nothing


def header(write, dropped=0, first=0, last=0, magic=MAGIC, layout=LAYOUT):
    head = struct.pack("<IIQQQQQQII", magic, layout, CAPACITY, write, 0, dropped, first, last,
                       2, 0)
    head = head.ljust(256, b"\0")
    for name, kind in ((b"cuMemAlloc_v2", 1), (b"cuMemFree_v2", 0)):
        head += struct.pack("<56sBB6x", name, kind, 0)
    return head


def padded(n):
    return (n + 7) // 8 * 8


def record(kind, text=b"", caller=b"", domain=b"", payload=b"", op=0, api=0, release=0,
           nbytes=0, error=0, ts=1000, category=0, range_id=0):
    body = text + caller + domain + payload
    size = padded(112 + len(body))
    rec = struct.pack("<IBBHIIQIIIIQQQQQQiBBBBIIII", size, kind, op, api, 7, 3, ts, 0, category,
                      0, 0, range_id, 0x7F0000000000, nbytes, 0, 0, 0, error, release, 0, 1, 0,
                      len(text), len(caller), len(domain), len(payload))
    return (rec + body).ljust(size, b"\0")


def torch_event(ts=2000):
    return struct.pack("<IBBBBII10Q", 96, TORCH_EVENT, 1, 0, 0, 7, 0, ts, 0x7F0000001000, 512,
                       0, 1, 512, 512, 2 << 20, 1, 0)


# An ALLOC (or `action`) with what was running (module, op, inner op, autograd thread,
# sequence; bit 63: backward); `cut` keeps the flag but leaves the attribution out.
def attributed_torch_event(sequence, ts=2000, cut=False, action=1):
    size = 96 if cut else 120
    event = struct.pack("<IBBBBII10Q", size, TORCH_EVENT, action, FLAG_ATTRIBUTION, 0, 7, 0, ts,
                        0x7F0000001000, 512, 0, 1, 512, 512, 2 << 20, 1, 0)
    return event if cut else event + struct.pack("<IIIIQ", 3, 1, 2, 7, sequence)


def padding(n):
    return struct.pack("<IB", n, PADDING).ljust(n, b"\0")


def seed(position, reported, slices, head, data):
    return struct.pack("<QQB", position, reported, slices) + head + data


def ranges(n):
    out = b""
    for _ in range(n):
        out += record(NVTX, text=b"step", domain=b"d", op=1) + record(NVTX, op=2)
    return out


def main():
    out = sys.argv[1]
    seeds = {}
    # Every kind of record the collector turns into an event, then padding to the end.
    state = b"\x08\x01\x12\x05" + b"2.1.0"  # attached, torch_version "2.1.0"
    body = (ranges(1) + record(MEMORY, caller=b"libx.so", nbytes=4096) +
            record(MEMORY, api=1, release=1) + record(FAILED, nbytes=1 << 40, error=2) +
            record(THREAD_NAME, text=b"worker") + torch_event() +
            record(LAUNCH, text=b"kernel", payload=struct.pack("<Q", 42)) +
            record(LAUNCH, payload=struct.pack("<Q", 42)) + record(BRIDGE, payload=state) +
            record(EXIT, error=3))
    seeds["every-record"] = seed(0, 1, 0, header(len(body), dropped=3, first=100, last=200),
                                 body)
    # Read across a lap: records at the end, padding, records from the start again.
    lap = 3 * CAPACITY
    tail = ranges(2)
    start = CAPACITY - len(tail) - 64
    front = ranges(3)
    data = bytearray(CAPACITY)
    data[0:len(front)] = front
    data[start:start + len(tail)] = tail
    data[start + len(tail):CAPACITY] = padding(64)
    seeds["across-a-lap"] = seed(lap + start, 0, 1, header(lap + CAPACITY + len(front)),
                                 bytes(data))
    # A write position of 2^64-8 over padding that would carry a reader past 2^64.
    data = bytearray(CAPACITY)
    data[0:8] = padding(8)[:8]
    struct.pack_into("<I", data, 0, CAPACITY)
    data[CAPACITY - 8:CAPACITY] = padding(8)
    seeds["wrap-past-2-64"] = seed(0, 0, 0, header(2**64 - 8), bytes(data))
    # A TorchBridgeState whose torch_version is not UTF-8 between whole ranges.
    body = ranges(4) + record(BRIDGE, payload=b"\x08\x01\x12\x02\xc3\x28") + ranges(4)
    seeds["bridge-not-utf8"] = seed(0, 0, 1, header(len(body)), body)
    # A damaged size mid-ring, then whole records from the next lap on.
    data = bytearray(CAPACITY)
    front = ranges(2)
    data[0:len(front)] = front
    mid = ranges(2)
    data[1024:1024 + len(mid)] = mid
    struct.pack_into("<I", data, 1024 + 120, 13)
    seeds["bad-size-then-next-lap"] = seed(1024, 0, 0, header(CAPACITY + len(front)), bytes(data))
    # Counters not to believe.
    seeds["drops-2-64-minus-1"] = seed(0, 0, 0, header(0, dropped=2**64 - 1, first=1, last=2),
                                       b"")
    seeds["wrong-magic-drops"] = seed(0, 0, 0, header(0, dropped=5, magic=MAGIC ^ 1), b"")
    # Layout 3: names and attributed tensors (a backward one, a cut one, ids out of range).
    body = (record(ATTRIBUTION_NAME, text=b"encoder.fc1", category=1, range_id=3) +
            record(ATTRIBUTION_NAME, text=b"aten::linear", category=2, range_id=1) +
            record(ATTRIBUTION_NAME, text=b"\xff\xfe", category=2, range_id=2**32) +
            attributed_torch_event(11) + attributed_torch_event(11 | 1 << 63, ts=2100) +
            attributed_torch_event(12, ts=2200, cut=True) + torch_event(ts=2300))
    seeds["attribution"] = seed(0, 0, 1, header(len(body), layout=3), body)
    # Layout 4: autograd nodes, one without its attribution (skipped), between ALLOCs; the
    # same records under layout 3, which had no nodes (the nodes skipped).
    body = (attributed_torch_event(21, action=AUTOGRAD_NODE) + attributed_torch_event(22) +
            attributed_torch_event(23, ts=2100, cut=True, action=AUTOGRAD_NODE) +
            struct.pack("<IBBBBII10Q", 96, TORCH_EVENT, AUTOGRAD_NODE, 0, 0, 7, 0, 2200, 0, 0,
                        0, 0, 0, 0, 0, 0, 0) +
            attributed_torch_event(21 | 1 << 63, ts=2300))
    seeds["autograd-nodes"] = seed(0, 0, 1, header(len(body), layout=4), body)
    seeds["autograd-nodes-layout-3"] = seed(0, 0, 0, header(len(body), layout=3), body)
    for name, content in seeds.items():
        with open(f"{out}/{name}", "wb") as f:
            f.write(content)


if __name__ == "__main__":
    main()
