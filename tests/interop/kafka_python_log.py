#!/usr/bin/env python3
"""Dump Kafka log segments / raw batch files as JSON Lines, decoded by
kafka-python (an implementation of Kafka's record formats that is not Weir's).

Usage:
    kafka_python_log.py [--check-contiguous] FILE [FILE...]

Each FILE is a Kafka `.log` segment or any file of concatenated v2 batches
and/or legacy (v0/v1) message-set entries.  The file is walked by the 12-byte
offset+length prefix every format shares (that is the only thing parsed by
hand); each entry is handed to kafka-python's MemoryRecords, which picks
DefaultRecordBatch (magic 2) or LegacyRecordBatch (magic 0/1), checks the CRC
with validate_crc() and decodes the records.

Output, one JSON object per line, in file order:

  {"kind":"file","path":...}                               before each file
  {"kind":"batch","position":P,"size":..,"magic":..,"codec":..,
   "base_offset":..,"last_offset":..,"count":..,"crc":..,"crc_valid":..,
   "producer_id":..,"producer_epoch":..,"base_sequence":..,
   "transactional":..,"control":..,"timestamp_type":..,"max_timestamp":..,
   [v2] "partition_leader_epoch":..,"base_timestamp":..,
   [legacy compressed] "inner_crc_valid":..}
  {"kind":"record","offset":..,"timestamp":..,"key":..,"value":..,
   "headers":[[name,value],...]}                          after its batch
  {"kind":"torn","position":P,"bytes":N}                   a tail shorter than
        its declared length (or than the 12-byte prefix); N = bytes from P to
        the end of the file.  Reading of that file stops there.
  {"kind":"error","position":P,"message":...}              unreadable data;
        reading of that file stops and the exit status becomes 1.

Field meanings (as Kafka's RecordBatch interface defines them):
  size           12 + the length field (the whole entry)
  base_offset    v2: baseOffset; legacy: offset of the first record
  last_offset    v2: baseOffset + lastOffsetDelta; legacy: the offset field of
                 the (wrapper) message
  count          v2: recordsCount header field; legacy: records decoded
  codec          none | gzip | snappy | lz4 | zstd (unknown ids: "codec-N")
  crc_valid      kafka-python's validate_crc() on the batch (legacy: on the
                 outer/wrapper message)
  inner_crc_valid  legacy compressed wrappers: every inner message's CRC-32
  producer_*, base_sequence, transactional, control: legacy gives -1/false
  timestamp_type "create" | "log_append" | null (v0)
  max_timestamp  v2: maxTimestamp; v1: the (wrapper) message's timestamp; v0: -1
  record timestamp  as kafka-python reports it (LogAppendTime batches give the
                 batch's time); v0: -1
  key/value/header values: null, or {"hex": "..."}; header names are strings.

--check-contiguous: after printing, exit 1 with a message on stderr unless
the record offsets, across all files in the order given, are strictly
contiguous (each one = previous + 1).

Exit status: 0 on success (a torn tail is not an error), 1 if a file cannot be
read or decoded, or if --check-contiguous fails, 2 on bad usage.
"""

import argparse
import json
import os
import struct
import sys

sys.dont_write_bytecode = True  # keep __pycache__ out of the repo
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kafka_python_common import enc, enc_headers, ensure_xxhash  # noqa: E402
from kafka.record.memory_records import MemoryRecords  # noqa: E402

LOG_OVERHEAD = 12          # offset i64 + length i32
MAGIC_OFFSET = 16          # same position in every format
MIN_LENGTH = 14            # smallest legacy v0 message (Kafka's RECORD_OVERHEAD_V0)
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TS_TYPE = {None: None, 0: "create", 1: "log_append"}


def codec_name(cid):
    return CODEC_NAMES.get(cid, "codec-%d" % cid)


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")


def record_json(r):
    ts = r.timestamp
    return {"kind": "record", "offset": r.offset, "timestamp": -1 if ts is None else ts,
            "key": enc(r.key), "value": enc(r.value), "headers": enc_headers(r.headers)}


def batch_json(batch, position, records):
    if batch.magic >= 2:
        return {
            "kind": "batch", "position": position, "size": batch.size_in_bytes,
            "magic": batch.magic, "codec": codec_name(batch.compression_type),
            "base_offset": batch.base_offset, "last_offset": batch.last_offset,
            "count": batch.records_count, "crc": batch.crc, "crc_valid": None,
            "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
            "base_sequence": batch.base_sequence,
            "transactional": batch.is_transactional, "control": batch.is_control_batch,
            "timestamp_type": TS_TYPE[batch.timestamp_type],
            "max_timestamp": batch.max_timestamp,
            "partition_leader_epoch": batch.leader_epoch,
            "base_timestamp": batch.first_timestamp,
        }
    # LegacyRecordBatch: its base_offset property is the raw offset field of
    # the (wrapper) message, which Kafka calls the batch's last offset.  The
    # wrapper timestamp and CRC have no public accessors in kafka-python.
    wrapper_ts = batch._timestamp
    out = {
        "kind": "batch", "position": position, "size": batch.size_in_bytes,
        "magic": batch.magic, "codec": codec_name(batch.compression_type),
        "base_offset": records[0].offset if records else batch.base_offset,
        "last_offset": batch.base_offset,
        "count": len(records), "crc": batch._crc, "crc_valid": None,
        "producer_id": -1, "producer_epoch": -1, "base_sequence": -1,
        "transactional": False, "control": False,
        "timestamp_type": TS_TYPE[batch.timestamp_type],
        "max_timestamp": -1 if wrapper_ts is None else wrapper_ts,
    }
    if batch.compression_type:
        out["inner_crc_valid"] = all(r.validate_crc() for r in records)
    return out


def read_file(path, offsets):
    """Print one file.  Appends record offsets to `offsets`.  Returns True if
    the file could be read (a torn tail is fine)."""
    emit({"kind": "file", "path": path})
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        emit({"kind": "error", "position": 0, "message": "cannot open: %s" % e})
        return False
    pos, end = 0, len(data)
    while pos < end:
        remaining = end - pos
        if remaining < LOG_OVERHEAD:
            emit({"kind": "torn", "position": pos, "bytes": remaining})
            return True
        length = struct.unpack_from(">i", data, pos + 8)[0]
        if length < MIN_LENGTH:
            emit({"kind": "error", "position": pos,
                  "message": "entry length %d is below the minimum %d" % (length, MIN_LENGTH)})
            return False
        if LOG_OVERHEAD + length > remaining:
            emit({"kind": "torn", "position": pos, "bytes": remaining})
            return True
        chunk = data[pos:pos + LOG_OVERHEAD + length]
        try:
            mr = MemoryRecords(chunk)
            batch = mr.next_batch()
            if batch is None or mr.has_next():
                raise ValueError("kafka-python did not see exactly one batch here")
            crc_valid = bool(batch.validate_crc())   # must precede iteration
            records = list(batch)
            line = batch_json(batch, pos, records)
            line["crc_valid"] = crc_valid
            rec_lines = [record_json(r) for r in records]
        except Exception as e:  # noqa: BLE001 - report anything kafka-python raises
            emit({"kind": "error", "position": pos,
                  "message": "kafka-python failed (magic byte %d): %s: %s"
                             % (data[pos + MAGIC_OFFSET], type(e).__name__, e)})
            return False
        emit(line)
        for rl in rec_lines:
            emit(rl)
            offsets.append((path, rl["offset"]))
        pos += LOG_OVERHEAD + length
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check-contiguous", action="store_true",
                    help="exit 1 unless record offsets are contiguous across all files")
    ap.add_argument("files", nargs="+", metavar="FILE")
    args = ap.parse_args(argv)
    ensure_xxhash()
    ok = True
    offsets = []
    for path in args.files:
        ok = read_file(path, offsets) and ok
    sys.stdout.flush()
    if not ok:
        sys.stderr.write("kafka_python_log: some file could not be read (see the \"error\" lines)\n")
        return 1
    if args.check_contiguous:
        for (p0, o0), (p1, o1) in zip(offsets, offsets[1:]):
            if o1 != o0 + 1:
                sys.stderr.write("kafka_python_log: offsets not contiguous: %d (%s) is followed by %d (%s)\n"
                                 % (o0, p0, o1, p1))
                return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # reader of our stdout went away (e.g. `| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
