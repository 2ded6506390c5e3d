#!/usr/bin/env python3
"""Writes the seed inputs of thread_buffer_recovery_fuzzer (corpus/thread_buffer_recovery/):
small per-thread buffer areas in the layout of proto/cumemtrace/v1/thread_buffers.h, in the
fuzzer's input format (how to read, two received positions, the header, 4 slots, the units),
whole ones and the damage a dying program can leave. Usage: thread_buffer_seeds.py OUT_DIR"""
import os
import struct
import sys

MAGIC = 0x42544D43
SLOT_UNITS = 8
EVENT, COUNTERS, DEFINITION, ATTRIBUTION = 1, 2, 3, 4
ALLOC, FREE_REQUESTED, SEGMENT_ALLOC = 1, 2, 4
TSC = 1 << 60


def word(kind, action=0, device=0, sequence=0, tsc=False):
    return sequence | device << 40 | action << 48 | kind << 56 | (TSC if tsc else 0)


def unit(kind, a=0, b=0, c=0, **fields):
    return struct.pack("<4Q", a, b, c, word(kind, **fields))


# A map of 1 ns per tick from TSC 1,000 at 5,000 ns (mult is ns per tick times 2^32).
CLOCK = (1000, 5000, 1000, 1 << 32, 1 << 32)


def header(slots, layout=2, clock=CLOCK, clock_in_use=0, fallbacks=0):
    clock_map = struct.pack("<5Q", *clock) if clock else bytes(40)
    return struct.pack("<IIIIQQ", MAGIC, layout, slots, SLOT_UNITS, fallbacks,
                       clock_in_use) + clock_map + bytes(40)


def slot(thread, committed, freed=0, stream=0, pools=(0, 0), attribution=(0, 0, 0)):
    return (struct.pack("<II7Q", 1, thread, *[0] * 7) + struct.pack("<Q7Q", committed, *[0] * 7)
            + struct.pack("<8Q", freed, stream, pools[0], pools[1], *attribution, 0))


def units_of(*slots_units):
    """Each slot's units padded to SLOT_UNITS, slot after slot."""
    return b"".join(b"".join(u).ljust(SLOT_UNITS * 32, b"\0") for u in slots_units)


def seed(how, received, head, table, units):
    """The fuzzer's input: the slot table always takes its 4 slots, so the units follow."""
    return bytes([how]) + struct.pack("<2Q", *received) + head + table.ljust(4 * 192, b"\0") + units


def main(out):
    os.makedirs(out, exist_ok=True)
    # Slot 0 on the TSC: a definition, an ALLOC with its counters and what was running, a
    # free. Slot 1 on CLOCK_MONOTONIC: a segment and an ALLOC with no attribution.
    first = [unit(DEFINITION, 7, 1, 2),
             unit(COUNTERS, 512, 512, 2 << 20),
             unit(ATTRIBUTION, 3 | 5 << 32, 0, 9),
             unit(EVENT, 2000, 0x7F0000001000, 512, action=ALLOC, sequence=1, tsc=True),
             unit(EVENT, 2100, 0x7F0000001000, 512, action=FREE_REQUESTED, sequence=2,
                  tsc=True)]
    second = [unit(EVENT, 9000, 0x7F0000200000, 2 << 20, action=SEGMENT_ALLOC, device=1,
                   sequence=1),
              unit(EVENT, 9100, 0x7F0000200000, 512, action=ALLOC, device=1, sequence=2)]
    table = slot(101, len(first)) + slot(102, len(second))
    seeds = {
        "two-threads": seed(0, (0, 0), header(2), table, units_of(first, second)),
        "two-threads-sliced-from-file": seed(3 | 2 << 1, (0, 0), header(2), table,
                                             units_of(first, second)),
        # Received batches carried slot 0's first 4 units: only its free is left to read.
        "received-part": seed(1, (4, 0), header(2), table, units_of(first, second)),
        # Slot 0 went round its 8 units: committed 13, freed 2, so units 5..12 are read.
        "wrapped": seed(1, (0, 0), header(1),
                        slot(101, 13, freed=2, stream=7),
                        units_of([unit(EVENT, 3000 + i, 0x7F0000003000 + 512 * i, 512,
                                       action=ALLOC, sequence=10 + i, tsc=True)
                                  for i in range(SLOT_UNITS)])),
        # A unit the dying thread had not finished (kind 0) before its commit: the slot's
        # rest is rejected, the other slot is read.
        "torn": seed(2, (0, 0), header(2), table,
                     units_of([first[0], bytes(32), first[3]], second)),
        # TSC times with no map: rejected, not converted with zeros.
        "tsc-without-map": seed(0, (0, 0), header(2, clock=None), table,
                                units_of(first, second)),
        # A map whose slew ends 2^63 ticks before its base: the differences wrap, never
        # overflow (the collector's build checks that with UBSan).
        "clock-slew-before-base": seed(0, (0, 0), header(2, clock=(0, 0, 1 << 63, 0, 1 << 32)),
                                       table, units_of(first, second)),
        # Layout 1 knew no attribution units: one is damage, which stops its slot there.
        "layout-1": seed(0, (0, 0), header(2, layout=1), table, units_of(first, second)),
        # A commit of 2^64-1: no more than the slot's 8 units are read, as its last lap
        # (here the first of them was never written, which stops the slot).
        "commit-2-64-minus-1": seed(1, (0, 0), header(1), slot(101, 2**64 - 1),
                                    units_of(first)),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
