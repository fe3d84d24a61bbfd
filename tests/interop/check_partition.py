#!/usr/bin/env python3
"""Checks a Kafka partition directory the way an outside tool would, with kafka-python's
record parser (not Weir's) for the batches and a few lines of struct for the indexes.

    check_partition.py PARTITION_DIR

For every segment (<base>.log with .index and .timeindex, in offset order):
  - every batch parses, its CRC is valid, and record offsets are contiguous across all
    segments (each = previous + 1), starting at the first segment's first batch;
  - each offset-index entry (relative offset, position) points at the start of a batch
    whose offset range holds that offset, and entries increase;
  - time-index entries have increasing timestamps and non-decreasing offsets, each offset
    inside the segment, and no timestamp exceeds the segment's largest batch timestamp.
Preallocated zero tails are ignored, as Kafka's tools do. Prints a one-line JSON summary;
exits 1 with a message on the first violation.
"""
import json
import os
import struct
import sys

from kafka.record.memory_records import MemoryRecords


def fail(msg):
    print("FAIL " + msg, file=sys.stderr)
    sys.exit(1)


def batches(path):
    data = open(path, "rb").read()
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack(">i", data[pos + 8:pos + 12])
        end = pos + 12 + length
        if length < 0 or end > len(data):
            fail("%s: torn entry at %d" % (path, pos))
        yield pos, data[pos:end]
        pos = end
    if pos != len(data):
        fail("%s: %d trailing bytes" % (path, len(data) - pos))


def main(pdir):
    logs = sorted(f for f in os.listdir(pdir) if f.endswith(".log") and len(f) == 24)
    expected_next = None
    summary = {"segments": len(logs), "batches": 0, "records": 0, "index_entries": 0, "timeindex_entries": 0}
    for name in logs:
        base = int(name[:20])
        path = os.path.join(pdir, name)
        starts = {}  # position -> (first offset, last offset)
        max_ts = -1
        for pos, raw in batches(path):
            recs = MemoryRecords(raw)
            batch = recs.next_batch()
            if batch is None:
                fail("%s: unreadable batch at %d" % (path, pos))
            if not batch.validate_crc():
                fail("%s: bad CRC at %d" % (path, pos))
            first = last = None
            for r in batch:
                if expected_next is not None and r.offset != expected_next:
                    fail("%s: offset %d where %d was expected" % (path, r.offset, expected_next))
                expected_next = r.offset + 1
                first = r.offset if first is None else first
                last = r.offset
                summary["records"] += 1
            if first is None:
                fail("%s: empty batch at %d in a log that was never compacted" % (path, pos))
            if first < base:
                fail("%s: offset %d below the segment base %d" % (path, first, base))
            starts[pos] = (first, last)
            max_ts = max(max_ts, batch.max_timestamp if hasattr(batch, "max_timestamp") else -1)
            summary["batches"] += 1
        idx = open(os.path.join(pdir, name[:20] + ".index"), "rb").read()
        prev = -1
        for i in range(0, len(idx) - len(idx) % 8, 8):
            rel, position = struct.unpack(">ii", idx[i:i + 8])
            if rel == 0 and position == 0:
                break
            offset = base + rel
            if offset <= prev:
                fail("%s.index: offsets do not increase at entry %d" % (name[:20], i // 8))
            prev = offset
            if position not in starts:
                fail("%s.index: entry %d points at %d, not a batch start" % (name[:20], i // 8, position))
            lo, hi = starts[position]
            if not lo <= offset <= hi:
                fail("%s.index: offset %d is not in the batch at %d (%d..%d)" % (name[:20], offset, position, lo, hi))
            summary["index_entries"] += 1
        tix = open(os.path.join(pdir, name[:20] + ".timeindex"), "rb").read()
        prev_ts, prev_off = None, None
        for i in range(0, len(tix) - len(tix) % 12, 12):
            ts, rel = struct.unpack(">qi", tix[i:i + 12])
            if ts == 0 and rel == 0:
                break
            offset = base + rel
            if prev_ts is not None and (ts <= prev_ts or offset < prev_off):
                fail("%s.timeindex: not monotonic at entry %d" % (name[:20], i // 12))
            if ts > max_ts:
                fail("%s.timeindex: timestamp %d above the segment's max %d" % (name[:20], ts, max_ts))
            if not any(lo <= offset <= hi for lo, hi in starts.values()):
                fail("%s.timeindex: offset %d is in no batch" % (name[:20], offset))
            prev_ts, prev_off = ts, offset
            summary["timeindex_entries"] += 1
    print(json.dumps(summary))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
