"""Shared helpers for the kafka-python interop tools.

Used by:
  * tests/interop/kafka_python_log.py    (reader)
  * tests/interop/kafka_python_build.py  (builder CLI)
  * crates/weir-record/tests/fixtures/kafka-python/make_fixtures.py

Everything that encodes or decodes Kafka records is done by kafka-python
(kafka.record.*).  This module only holds the glue:

  * JSON encoding of byte strings ({"hex": ...} or null),
  * an xxh32 fallback so that kafka-python's magic-0 LZ4 code works without the
    optional `xxhash` package (kafka-python needs it only to compute the 1-byte
    LZ4 frame header checksum; see ensure_xxhash()),
  * a context manager that pins the gzip header mtime (kafka-python's
    gzip_encode writes the current wall-clock time into the gzip header, which
    would make fixtures non-deterministic),
  * build_batch(): drives kafka-python's builders and then fills in the fields
    that a broker assigns (base offset, wrapper offset, partition leader
    epoch) and, on request, attributes kafka-python's builders cannot set
    (control bit, LogAppendTime), recomputing the CRC where needed.
"""

import contextlib
import gzip
import struct
import sys
import types

import crc32c as _crc32c_pkg
import binascii

import kafka.codec
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_NAMES = {v: k for k, v in CODECS.items()}

# A batch_size large enough that kafka-python's builders never refuse an append.
BIG_BATCH_SIZE = 64 * 1024 * 1024


# --------------------------------------------------------------------------
# JSON value encoding
# --------------------------------------------------------------------------

def enc(b):
    """bytes/None -> JSON value: null or {"hex": "..."}"""
    if b is None:
        return None
    return {"hex": bytes(b).hex()}


def dec(v):
    """JSON value -> bytes/None.  Accepts null, {"hex": ...} and, for
    hand-written specs, {"utf8": ...}."""
    if v is None:
        return None
    if isinstance(v, dict):
        if "hex" in v:
            return bytes.fromhex(v["hex"])
        if "utf8" in v:
            return v["utf8"].encode("utf-8")
    raise ValueError("expected null, {\"hex\": ...} or {\"utf8\": ...}, got %r" % (v,))


def enc_headers(headers):
    return [[name, enc(value)] for name, value in headers]


def dec_headers(headers):
    return [(name, dec(value)) for name, value in (headers or [])]


# --------------------------------------------------------------------------
# xxh32 fallback for kafka-python's magic-0 LZ4 codec
# --------------------------------------------------------------------------

_P1, _P2, _P3, _P4, _P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
_M = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M


def xxh32_int(data, seed=0):
    """Pure-Python XXH32 (reference algorithm).  Only ever used on a few bytes
    (the LZ4 frame descriptor)."""
    data = bytes(data)
    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while i + 16 <= n:
            for lane in range(4):
                w = struct.unpack_from("<I", data, i)[0]
                v[lane] = (_rotl((v[lane] + w * _P2) & _M, 13) * _P1) & _M
                i += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 4 <= n:
        w = struct.unpack_from("<I", data, i)[0]
        h = (_rotl((h + w * _P3) & _M, 17) * _P4) & _M
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M, 11) * _P1) & _M
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h


class _XXH32:
    def __init__(self, data=b"", seed=0):
        self._data = bytes(data)
        self._seed = seed

    def intdigest(self):
        return xxh32_int(self._data, self._seed)

    def digest(self):
        # python-xxhash's digest() is the canonical (big-endian) form.
        return struct.pack(">I", self.intdigest())


XXHASH_SHIM = types.SimpleNamespace(xxh32=_XXH32)


def ensure_xxhash():
    """kafka-python's lz4_encode_old_kafka / lz4_decode_old_kafka (used for
    magic-0 LZ4 wrappers) need the optional `xxhash` package, which is not in
    scripts/requirements-test.txt.  If it is missing, give kafka.codec a
    pure-Python xxh32 with the same digest() so magic-0 LZ4 still works.
    Returns "xxhash" or "pure-python"."""
    if getattr(kafka.codec, "xxhash", None) is not None:
        return "xxhash"
    kafka.codec.xxhash = XXHASH_SHIM
    return "pure-python"


# --------------------------------------------------------------------------
# Deterministic gzip
# --------------------------------------------------------------------------

@contextlib.contextmanager
def pinned_gzip_mtime(mtime=0):
    """kafka-python's gzip_encode uses gzip.GzipFile without an mtime, so the
    gzip header carries the current time.  Inside this context gzip sees a
    clock stuck at `mtime` (0 = "no timestamp", which is also what Java's
    GZIPOutputStream writes)."""
    saved = gzip.time
    gzip.time = types.SimpleNamespace(time=lambda: mtime)
    try:
        yield
    finally:
        gzip.time = saved


# --------------------------------------------------------------------------
# CRC helpers and byte patching
# --------------------------------------------------------------------------

def crc32c(data):
    return _crc32c_pkg.crc32c(bytes(data))


def crc32(data):
    return binascii.crc32(bytes(data)) & 0xFFFFFFFF


def v2_recompute_crc(buf):
    """CRC-32C over [21, end) written at [17, 21)."""
    struct.pack_into(">I", buf, 17, crc32c(buf[21:]))


def legacy_recompute_crc(buf, pos=0):
    """CRC-32 of one legacy message: over [magic, end) written at pos+12."""
    length = struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">I", buf, pos + 12, crc32(buf[pos + 16:pos + 12 + length]))


# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------

class BuildResult:
    def __init__(self, data, offsets, fixups, codec_written):
        self.data = bytes(data)
        self.offsets = offsets            # absolute offset of each record
        self.fixups = fixups              # list of strings: what was patched
        self.codec_written = codec_written  # codec actually in the bytes


def _resolve_offsets(records, base_offset):
    offsets = []
    nxt = base_offset
    for r in records:
        off = r.get("offset")
        if off is None:
            off = nxt
        if offsets and off <= offsets[-1]:
            raise ValueError("record offsets must strictly increase (%d after %d)" % (off, offsets[-1]))
        if off < base_offset:
            raise ValueError("record offset %d below base offset %d" % (off, base_offset))
        offsets.append(off)
        nxt = off + 1
    return offsets


def build_batch(magic, codec, records, base_offset=0,
                producer_id=-1, producer_epoch=-1, base_sequence=-1,
                transactional=False, partition_leader_epoch=None,
                control=False, log_append_time=None,
                legacy_wrapper_timestamp=None, raw=False):
    """Build one v2 batch, or one legacy message set, with kafka-python.

    records: list of dicts with keys timestamp (int), key (bytes|None),
    value (bytes|None), headers (list of (str, bytes|None)), and optionally
    offset (absolute; default: contiguous from base_offset).

    After kafka-python's build(), fields that kafka-python leaves to the
    broker are filled in unless raw=True:
      v2:      baseOffset (kafka-python always writes 0; not covered by the CRC)
               partitionLeaderEpoch if given (kafka-python writes 0; not in CRC)
      legacy compressed wrapper: its offset field = absolute offset of the last
               inner record (kafka-python writes 0; the offset is outside the
               CRC).  v1 inner offsets are relative (0..), v0 inner offsets are
               absolute, as Kafka defines them.
    On explicit request (kafka-python's builders cannot do these):
      control=True        (v2) set attribute bit 5, recompute CRC-32C
      log_append_time=T   (v2) set attribute bit 3 and maxTimestamp=T,
                          recompute CRC-32C;
                          (v1 compressed) set wrapper attribute bit 3 and
                          wrapper timestamp=T, recompute the wrapper CRC-32
      legacy_wrapper_timestamp=T (v1 compressed) set wrapper timestamp=T
                          (kafka-python writes 0; a broker writes the max inner
                          timestamp), recompute the wrapper CRC-32
    The caller must wrap this in pinned_gzip_mtime() for deterministic gzip.
    """
    ensure_xxhash()
    codec_id = CODECS[codec]
    offsets = _resolve_offsets(records, base_offset)
    fixups = []

    if magic == 2:
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=codec_id, is_transactional=transactional,
            producer_id=producer_id, producer_epoch=producer_epoch,
            base_sequence=base_sequence, batch_size=BIG_BATCH_SIZE)
        for r, off in zip(records, offsets):
            if r.get("timestamp") is None:
                raise ValueError("v2 records need an explicit timestamp")
            meta = builder.append(off - base_offset, r["timestamp"], r.get("key"), r.get("value"),
                                  list(r.get("headers") or []))
            if meta is None:
                raise RuntimeError("kafka-python refused to append a record")
        buf = bytearray(builder.build())
        if not raw:
            if base_offset != 0:
                struct.pack_into(">q", buf, 0, base_offset)
                fixups.append("base_offset=%d written at [0,8) (kafka-python writes 0; not in CRC)" % base_offset)
            if partition_leader_epoch is not None:
                struct.pack_into(">i", buf, 12, partition_leader_epoch)
                fixups.append("partition_leader_epoch=%d written at [12,16) (kafka-python writes 0; not in CRC)"
                              % partition_leader_epoch)
        recrc = False
        if control:
            buf[22] |= 0x20
            recrc = True
            fixups.append("attribute bit 5 (control) set and CRC-32C recomputed (kafka-python's builder cannot mark control batches)")
        if log_append_time is not None:
            buf[22] |= 0x08
            struct.pack_into(">q", buf, 35, log_append_time)
            recrc = True
            fixups.append("attribute bit 3 (LogAppendTime) set, maxTimestamp=%d, CRC-32C recomputed "
                          "(kafka-python's builder always writes CreateTime)" % log_append_time)
        if recrc:
            v2_recompute_crc(buf)
        codec_written = CODEC_NAMES[struct.unpack_from(">h", buf, 21)[0] & 0x07]
        return BuildResult(buf, offsets, fixups, codec_written)

    if magic not in (0, 1):
        raise ValueError("magic must be 0, 1 or 2")
    if codec == "zstd":
        raise ValueError("zstd is not allowed for magic 0/1")
    if producer_id != -1 or transactional:
        raise ValueError("producer id / transactional need magic 2")
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec_id,
                                       batch_size=BIG_BATCH_SIZE)
    for r, off in zip(records, offsets):
        if r.get("headers"):
            raise ValueError("magic %d has no headers" % magic)
        if magic == 1 and r.get("timestamp") is None:
            raise ValueError("v1 records need an explicit timestamp")
        inner = off
        if codec_id and magic == 1:
            inner = off - base_offset  # relative inner offsets for v1 wrappers
        meta = builder.append(inner, r.get("timestamp") if magic == 1 else -1,
                              r.get("key"), r.get("value"))
        if meta is None:
            raise RuntimeError("kafka-python refused to append a record")
    buf = bytearray(builder.build())
    if codec_id:
        if not raw and offsets:
            struct.pack_into(">q", buf, 0, offsets[-1])
            fixups.append("wrapper offset=%d (last inner offset) written at [0,8) "
                          "(kafka-python writes 0; not in CRC)" % offsets[-1])
        if magic == 1:
            recrc = False
            if legacy_wrapper_timestamp is not None:
                struct.pack_into(">q", buf, 18, legacy_wrapper_timestamp)
                recrc = True
                fixups.append("wrapper timestamp=%d (max inner timestamp, as a broker writes it) and "
                              "wrapper CRC-32 recomputed (kafka-python writes timestamp 0)"
                              % legacy_wrapper_timestamp)
            if log_append_time is not None:
                buf[17] |= 0x08
                struct.pack_into(">q", buf, 18, log_append_time)
                recrc = True
                fixups.append("wrapper attribute bit 3 (LogAppendTime) set, wrapper timestamp=%d, "
                              "wrapper CRC-32 recomputed (kafka-python's builder always writes CreateTime)"
                              % log_append_time)
            if recrc:
                legacy_recompute_crc(buf, 0)
        codec_written = CODEC_NAMES[buf[17] & 0x07]
    else:
        if log_append_time is not None or legacy_wrapper_timestamp is not None:
            raise ValueError("log_append_time / wrapper timestamp only supported for compressed v1 wrappers")
        codec_written = "none"
    if control:
        raise ValueError("control batches need magic 2")
    return BuildResult(buf, offsets, fixups, codec_written)


def lz4_frame_info(frame):
    """Describe an LZ4 frame header (kafka-python's lz4 output)."""
    frame = bytes(frame)
    flg, bd = frame[4], frame[5]
    has_size = bool(flg & 0x08)
    desc_end = 6 + (8 if has_size else 0)
    hc = frame[desc_end]
    correct = (xxh32_int(frame[4:desc_end]) >> 8) & 0xFF
    kafka_bug = (xxh32_int(frame[0:desc_end]) >> 8) & 0xFF
    return {
        "magic": frame[0:4].hex(),
        "flg": "%02x" % flg,
        "bd": "%02x" % bd,
        "block_independent": bool(flg & 0x20),
        "block_checksum": bool(flg & 0x10),
        "content_size_field": has_size,
        "content_checksum": bool(flg & 0x04),
        "header_checksum": "%02x" % hc,
        "header_checksum_per_lz4_spec": "%02x" % correct,
        "header_checksum_kafka_magic0_bug": "%02x" % kafka_bug,
        "header_checksum_kind": ("spec" if hc == correct else
                                 "kafka-magic0-bug" if hc == kafka_bug else "other"),
    }


def die(msg, code=1):
    sys.stderr.write(msg.rstrip("\n") + "\n")
    sys.exit(code)
