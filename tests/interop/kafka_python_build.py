#!/usr/bin/env python3
"""Build one record batch (v2) or message set (v0/v1) with kafka-python and
write its bytes to stdout, so Weir's tests can compare encodings.

Usage:
    kafka_python_build.py --magic 2 --codec lz4 --base-offset N \\
        [--producer-id P --producer-epoch E --base-sequence S] [--transactional] \\
        [--partition-leader-epoch L] [--control] [--log-append-time T] \\
        [--wrapper-timestamp T] [--raw]  < spec.jsonl > batch.bin

stdin: JSON Lines, one record per line:
    {"offset": 5?, "timestamp": 1700000000000, "key": null | {"hex": "..."},
     "value": null | {"hex": "..."}, "headers": [["name", null | {"hex": "..."}], ...]}
  * offset is optional and absolute; default: contiguous from --base-offset.
    (Gaps are allowed, e.g. to imitate a compacted batch.)
  * timestamp is required for magic 1 and 2 (this tool never uses the clock);
    it is ignored for magic 0.
  * {"utf8": "..."} is also accepted wherever {"hex": ...} is.
  * headers are only allowed for magic 2.
  * blank lines are ignored.

What is written: exactly what kafka-python's DefaultRecordBatchBuilder /
LegacyRecordBatchBuilder build(), then, unless --raw, the fields kafka-python
leaves to the broker:
  * v2 baseOffset := --base-offset (kafka-python writes 0; not in the CRC);
  * v2 partitionLeaderEpoch := --partition-leader-epoch if given (kafka-python
    writes 0, Java's producer -1; not in the CRC);
  * legacy compressed wrapper offset := absolute offset of the last record
    (kafka-python writes 0; not in the CRC).  Inner offsets are what Kafka
    expects: relative (0..) for magic 1, absolute for magic 0.
Options that need a CRC recomputation (kafka-python cannot set these itself):
  --control             v2: set attribute bit 5 (control batch)
  --log-append-time T   v2: attribute bit 3 + maxTimestamp T;
                        v1 compressed: wrapper attribute bit 3 + timestamp T
  --wrapper-timestamp T v1 compressed: wrapper timestamp T (kafka-python writes 0)
The gzip header's mtime is always 0 (kafka-python would write the current time).

Note: kafka-python's v2 builder silently writes the batch uncompressed when
compression does not make it smaller.  This tool then warns on stderr; with
--strict-codec it fails (exit 1) instead.

Exit status: 0 ok, 1 bad input / build failure.
"""

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True  # keep __pycache__ out of the repo
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kafka_python_common import (  # noqa: E402
    CODECS, build_batch, dec, dec_headers, die, pinned_gzip_mtime,
)


def parse_spec(stream):
    records = []
    for lineno, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            r = {
                "timestamp": obj.get("timestamp"),
                "key": dec(obj.get("key")),
                "value": dec(obj.get("value")),
                "headers": dec_headers(obj.get("headers")),
            }
            if obj.get("offset") is not None:
                r["offset"] = int(obj["offset"])
            if r["timestamp"] is not None:
                r["timestamp"] = int(r["timestamp"])
        except (ValueError, TypeError, AttributeError) as e:
            die("stdin line %d: %s" % (lineno, e))
        records.append(r)
    return records


def main(argv=None):
    ap = argparse.ArgumentParser(description="Build a Kafka batch with kafka-python; bytes to stdout.")
    ap.add_argument("--magic", type=int, choices=(0, 1, 2), default=2)
    ap.add_argument("--codec", choices=sorted(CODECS), default="none")
    ap.add_argument("--base-offset", type=int, default=0)
    ap.add_argument("--producer-id", type=int, default=-1)
    ap.add_argument("--producer-epoch", type=int, default=-1)
    ap.add_argument("--base-sequence", type=int, default=-1)
    ap.add_argument("--transactional", action="store_true")
    ap.add_argument("--partition-leader-epoch", type=int)
    ap.add_argument("--control", action="store_true")
    ap.add_argument("--log-append-time", type=int)
    ap.add_argument("--wrapper-timestamp", type=int)
    ap.add_argument("--raw", action="store_true",
                    help="no broker-side fixups: exactly kafka-python's bytes")
    ap.add_argument("--strict-codec", action="store_true",
                    help="fail if kafka-python fell back to no compression")
    args = ap.parse_args(argv)

    records = parse_spec(sys.stdin)
    if not records:
        die("no records on stdin")
    try:
        with pinned_gzip_mtime(0):
            res = build_batch(
                args.magic, args.codec, records, base_offset=args.base_offset,
                producer_id=args.producer_id, producer_epoch=args.producer_epoch,
                base_sequence=args.base_sequence, transactional=args.transactional,
                partition_leader_epoch=args.partition_leader_epoch, control=args.control,
                log_append_time=args.log_append_time,
                legacy_wrapper_timestamp=args.wrapper_timestamp, raw=args.raw)
    except (ValueError, TypeError, RuntimeError, AssertionError) as e:
        die("kafka_python_build: %s: %s" % (type(e).__name__, e))
    if res.codec_written != args.codec:
        msg = ("kafka_python_build: kafka-python wrote codec %s, not %s (its v2 builder "
               "skips compression that does not shrink the batch)" % (res.codec_written, args.codec))
        if args.strict_codec:
            die(msg)
        sys.stderr.write("warning: " + msg + "\n")
    sys.stdout.buffer.write(res.data)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
