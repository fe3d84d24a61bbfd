#!/usr/bin/env python3
"""Turns criterion's results for the record-format bench into the markdown table of
BENCHMARKS.md (between the record-formats markers). Medians; MB = 10^6 bytes of
uncompressed records; all from one run of scripts/bench-record.sh."""
import datetime
import json
import os
import platform
import re
import subprocess
import sys

crit, bench_md = sys.argv[1], sys.argv[2]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def mbps(group, *path):
    d = os.path.join(crit, group, *path)
    try:
        est = json.load(open(os.path.join(d, "new", "estimates.json")))
        meta = json.load(open(os.path.join(d, "new", "benchmark.json")))
    except FileNotFoundError:
        return None
    ns = est["median"]["point_estimate"]
    return meta["throughput"]["Bytes"] / ns * 1000.0


def fmt(v):
    return "–" if v is None else f"{v:,.0f}"


def cpu():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


lines = []
lines.append("## Record formats (weir-record)\n")
lines.append(f"Command: `./scripts/bench-record.sh` · machine: {os.cpu_count()} vCPU, {cpu()} · "
             f"rustc {subprocess.run(['rustc', '--version'], capture_output=True, text=True).stdout.split()[1]} · "
             f"{datetime.date.today()}\n")
lines.append("One 16 KiB batch of JSON-like records, medians of criterion samples; MB/s of "
             "uncompressed record bytes. *build*: BatchBuilder appends + close (header, CRC, "
             "compression). *decode*: parse, check CRC, decompress, iterate every record. "
             "*validate*: parse, check CRC, decompress, walk every record without building it. "
             "*compress*/*decompress*: the codec alone over the same records section.\n")
for size in ["100B", "1024B"]:
    g = f"batch-{size}"
    crc = mbps(g, "crc32c")
    mem = mbps(g, "memcpy")
    both = mbps(g, "crc32c+memcpy")
    if crc is None:
        continue
    lines.append(f"\n### {size.replace('1024B', '1 KiB').replace('100B', '100-byte')} records\n")
    lines.append(f"Floor, same run: CRC-32C {crc/1000:,.1f} GB/s · memcpy {mem/1000:,.1f} GB/s · "
                 f"CRC-32C + memcpy {both/1000:,.1f} GB/s\n")
    lines.append("| codec | build MB/s | decode MB/s | validate MB/s | raw compress MB/s | raw decompress MB/s |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for c in CODECS:
        lines.append(f"| {c} | {fmt(mbps(g, 'build', c))} | {fmt(mbps(g, 'decode', c))} | "
                     f"{fmt(mbps(g, 'validate', c))} | {fmt(mbps(g, 'compress', c))} | "
                     f"{fmt(mbps(g, 'decompress', c))} |")
    dec, val = mbps(g, "decode", "none"), mbps(g, "validate", "none")
    lines.append(f"\nUncompressed v2 against the floor (goal ≥ 0.5): decode {dec/both:.2f}, "
                 f"validate {val/both:.2f} of CRC-32C + memcpy.\n")

section = "\n".join(lines)
begin, end = "<!-- record-formats:begin -->", "<!-- record-formats:end -->"
text = open(bench_md).read() if os.path.exists(bench_md) else "# Benchmarks\n\n"
block = f"{begin}\n{section}\n{end}"
if begin in text:
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
else:
    text = text.rstrip("\n") + "\n\n" + block + "\n"
open(bench_md, "w").write(text)
print(section)
