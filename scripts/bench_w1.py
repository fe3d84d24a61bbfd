#!/usr/bin/env python3
"""W1 side by side: `weir bench produce` of 100-byte records with acks=1 into 1 and 8
partitions (Weir's own producer), each round next to the ceiling's minimal broker, and —
with a BASE binary — the same for that build, rounds interleaved in one run. Reports each
figure's ratio to the ceiling of its own round, and the client's and the broker's CPU per
record, so a change to either shows even when the machine is noisy.

    bench_w1.py WEIR CEILING ROUNDS [BASE]      env: W1_RECORDS (3000000)
"""
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_workloads as bw  # noqa: E402  (its helpers: Serve, bench, ceiling)

WEIR, CEILING, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3])
BASE = sys.argv[4] if len(sys.argv) > 4 else None
RECORDS = int(os.environ.get("W1_RECORDS", "3000000"))
bw.CEILING = CEILING
builds = ([("before", BASE)] if BASE else []) + [("now", WEIR)]

runs = {}
for rnd in range(1, ROUNDS + 1):
    bw.log("round %d of %d" % (rnd, ROUNDS))
    for label, binary in builds:
        bw.WEIR = binary
        work = tempfile.mkdtemp(prefix="weir-w1-")
        serve = bw.Serve(work)
        for parts in (1, 8):
            v = bw.bench(serve, "produce", "--topic", "w1-%d" % parts, "--records", str(RECORDS),
                         "--record-size", "100", "--acks", "1", "--partitions", str(parts))
            runs.setdefault((label, parts), []).append(v)
        serve.stop()
        subprocess.run(["rm", "-rf", work])
    runs.setdefault(("ceiling", 0), []).append(bw.ceiling(100, 16384, 5))

ceilings = [c["records_per_sec"] for c in runs[("ceiling", 0)]]
med = statistics.median
out = ["## W1 with Weir's own producer, beside the ceiling (issue 13)", ""]
out.append(
    "`weir bench produce` of %d records of 100 B, acks=1, batch.size 16384, linger.ms 5, into "
    "a release `weir serve`, %d rounds interleaved in one run; each round also runs the "
    "ceiling's minimal broker (100 B, 16 KiB batches, 5 in flight). Ratios are to the "
    "ceiling of the same round, medians over the rounds; CPU is per record, of the whole "
    "client process and of the broker process." % (RECORDS, ROUNDS))
out.append("")
out.append("| build | partitions | records/s | ÷ ceiling (each round) | client CPU/record | broker CPU/record |")
out.append("|---|---:|---:|---:|---:|---:|")
for label, _ in builds:
    for parts in (1, 8):
        vs = runs[(label, parts)]
        ratios = [v["records_per_sec"] / c for v, c in zip(vs, ceilings)]
        out.append("| %s | %d | %.0f | %.2f (%s) | %.0f ns | %.0f ns |" % (
            label, parts, med(v["records_per_sec"] for v in vs), med(ratios),
            " ".join("%.2f" % r for r in ratios),
            med(v["cpu_seconds"] * 1e9 / RECORDS for v in vs),
            med(v["broker_cpu_seconds"] * 1e9 / RECORDS for v in vs)))
out.append("")
if len(builds) > 1:
    out.append("before: %s; now: this checkout." % os.environ.get("BASE_NAME", builds[0][1]))
    out.append("")
out.append("Ceiling: median %.0f rec/s (%s). Machine: %s, %d cores. Reproduce: "
           "`BASE=path/to/an/older/weir ./scripts/bench-w1.sh`." % (
               med(ceilings), ", ".join("%.0f" % c for c in ceilings),
               bw.platform.machine(), os.cpu_count()))
print("\n".join(out))
