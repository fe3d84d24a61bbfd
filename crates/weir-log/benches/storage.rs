//! Storage-engine figures for BENCHMARKS.md, each measured beside its physical reference
//! in the same run (run it through `scripts/bench-storage.sh`):
//! - append throughput of 1 KiB records in 16 KiB batches through `PartitionLog`, beside a
//!   plain sequential `write(2)` of the same bytes to the same disk (both end with fsync);
//! - random offset lookup latency on a large partition (default 10 GB);
//! - recovery time of a 1 GB active segment after `kill -9` of the writing process;
//! - compaction throughput.
//!
//! Sizes can be scaled down with WEIR_BENCH_SCALE (e.g. 0.1) for a quick look.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_kafka::TopicPartition;
use weir_log::cleaner::{self, OffsetMap};
use weir_log::{AppendOrigin, CleanupPolicy, LoadParams, LogConfig, PartitionLog};
use weir_record::{BatchBuilder, Compression};

const NOW: i64 = 1_700_000_000_000;

fn scale() -> f64 {
    std::env::var("WEIR_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

fn bench_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("WEIR_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let d = base.join(format!("weir-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One producer batch of 15 records of 1 KiB (about 15.5 KiB), with a distinct payload.
fn batch_1k(seed: u64, keys: Option<u64>) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut b = BatchBuilder::new(Compression::None, 0, usize::MAX);
    for i in 0..15 {
        let value: Vec<u8> = (0..1024).map(|_| rng.alphanumeric() as u8).collect();
        let key = keys.map(|k| format!("key-{}", rng.u64(0..k)).into_bytes());
        b.append(NOW + i, key.as_deref(), Some(&value), &[])
            .unwrap();
    }
    b.build().unwrap().bytes
}

fn config(segment_bytes: u64) -> Arc<LogConfig> {
    Arc::new(LogConfig {
        segment_bytes,
        retention_ms: -1,
        ..LogConfig::default()
    })
}

fn new_log(dir: &Path, config: Arc<LogConfig>) -> PartitionLog {
    PartitionLog::create(
        &dir.join("bench-0"),
        TopicPartition::new("bench", 0),
        uuid::Uuid::new_v4(),
        config,
        NOW,
    )
    .unwrap()
}

fn fill(log: &mut PartitionLog, batches: &[Vec<u8>], bytes: u64) {
    let n = (bytes / batches[0].len() as u64) as usize;
    for i in 0..n {
        log.append_as_leader(
            batches[i % batches.len()].clone(),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    }
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// Append vs plain write, same bytes, same disk, alternating, 3 rounds each.
fn append_throughput(out: &mut String) {
    let total = (2e9 * scale()) as u64;
    let batches: Vec<Vec<u8>> = (0..64).map(|i| batch_1k(i, None)).collect();
    let n = (total / batches[0].len() as u64) as usize;
    let bytes = (n * batches[0].len()) as u64;
    let (mut engine, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let dir = bench_dir("append");
        let mut log = new_log(&dir, config(1 << 30));
        let start = Instant::now();
        fill(&mut log, &batches, bytes);
        log.flush(NOW).unwrap();
        engine.push(mbps(bytes, start.elapsed()));
        drop(log);
        let _ = std::fs::remove_dir_all(&dir);

        let dir = bench_dir("plain");
        let mut f = std::fs::File::create(dir.join("plain.log")).unwrap();
        let start = Instant::now();
        for i in 0..n {
            f.write_all(&batches[i % batches.len()]).unwrap();
        }
        f.sync_data().unwrap();
        plain.push(mbps(bytes, start.elapsed()));
        drop(f);
        let _ = std::fs::remove_dir_all(&dir);
    }
    let ratios: Vec<f64> = engine.iter().zip(&plain).map(|(e, p)| e / p).collect();
    out.push_str(&format!(
        "| append, 1 KiB records in 15.5 KiB batches, {:.1} GB, fsync at the end | {:.0} MB/s | \
         plain sequential write(2) of the same bytes, fsync at the end: {:.0} MB/s | {:.2} (goal ≥ 0.8) |\n",
        bytes as f64 / 1e9,
        median(engine),
        median(plain),
        median(ratios)
    ));
}

/// Random lookups on a large partition: the index and a short scan, then the batch read.
fn lookup_latency(out: &mut String) {
    let dir = bench_dir("lookup");
    let mut log = new_log(&dir, config(1 << 30));
    let batches: Vec<Vec<u8>> = (0..64).map(|i| batch_1k(i, None)).collect();
    fill(&mut log, &batches, (10e9 * scale()) as u64);
    log.close(NOW).unwrap();
    let leo = log.log_end_offset();
    let size = log.size_in_bytes();
    let mut rng = fastrand::Rng::with_seed(9);
    let (mut lookup, mut fetch) = (Vec::new(), Vec::new());
    for _ in 0..100_000 {
        let o = rng.i64(0..leo);
        let t = Instant::now();
        let data = log.read(o, 1, i64::MAX, true).unwrap();
        lookup.push(t.elapsed());
        let bytes = data.slice.unwrap().read_to_vec().unwrap();
        fetch.push(t.elapsed());
        assert!(!bytes.is_empty());
    }
    lookup.sort();
    fetch.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    out.push_str(&format!(
        "| random offset lookup on a {:.1} GB partition ({} segments, {} records), page cache warm | \
         p50 {:.1} µs, p99 {:.1} µs | with the batch read too: p50 {:.1} µs, p99 {:.1} µs | |\n",
        size as f64 / 1e9,
        log.num_segments(),
        leo,
        us(percentile(&lookup, 0.5)),
        us(percentile(&lookup, 0.99)),
        us(percentile(&fetch, 0.5)),
        us(percentile(&fetch, 0.99)),
    ));
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The child side of the recovery bench: fill one active segment, say so, wait to be killed.
fn recovery_child(dir: &Path, bytes: u64) {
    let mut log = new_log(dir, config(4 << 30));
    let batches: Vec<Vec<u8>> = (0..64).map(|i| batch_1k(i, None)).collect();
    fill(&mut log, &batches, bytes);
    println!("written {}", log.log_end_offset());
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(3600));
}

fn recovery_time(out: &mut String) {
    let bytes = (1e9 * scale()) as u64;
    let mut times = Vec::new();
    let mut detail = String::new();
    for _ in 0..3 {
        let dir = bench_dir("recovery");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--recovery-child",
                dir.to_str().unwrap(),
                &bytes.to_string(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("written"), "{line}");
        Command::new("kill")
            .args(["-9", &child.id().to_string()])
            .status()
            .unwrap();
        child.wait().unwrap();
        let pdir = dir.join("bench-0");
        let start = Instant::now();
        let params = LoadParams {
            recovery_point: Some(0),
            log_start_offset: None,
            had_clean_shutdown: false,
            now_ms: NOW,
        };
        let (log, report) = PartitionLog::open(
            &pdir,
            TopicPartition::new("bench", 0),
            config(4 << 30),
            params,
        )
        .unwrap();
        let t = start.elapsed();
        assert_eq!(report.recovered_segments, 1);
        detail = format!(
            "{:.2} GB, {} records",
            log.size_in_bytes() as f64 / 1e9,
            log.log_end_offset()
        );
        times.push(t.as_secs_f64());
        drop(log);
        let _ = std::fs::remove_dir_all(&dir);
    }
    let m = median(times);
    out.push_str(&format!(
        "| recovery of one active segment after kill -9 ({detail}), page cache warm | {m:.2} s | \
         {:.0} MB/s scanned: every batch's CRC checked, both indexes rebuilt | |\n",
        bytes as f64 / m / 1e6
    ));
}

fn compaction_throughput(out: &mut String) {
    let dir = bench_dir("compact");
    let cfg = Arc::new(LogConfig {
        cleanup_policy: CleanupPolicy::Compact,
        segment_bytes: 128 << 20,
        retention_ms: -1,
        ..LogConfig::default()
    });
    let mut log = new_log(&dir, cfg);
    // Distinct batches throughout, so the map sees every key many times with new values.
    let n = (1e9 * scale() / 15.5e3) as u64;
    for i in 0..n {
        log.append_as_leader(
            batch_1k(1_000_000 + i, Some(100_000)),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    }
    log.roll(None, NOW).unwrap();
    let before = log.size_in_bytes();
    let c = cleaner::cleanability(&mut log, None, NOW);
    let log = Mutex::new(log);
    let mut map = OffsetMap::new(cleaner::DEFAULT_DEDUPE_BUFFER_SIZE);
    let start = Instant::now();
    let stats = cleaner::clean(
        &log,
        &mut map,
        c.first_dirty_offset,
        c.first_uncleanable_offset,
        NOW,
    )
    .unwrap();
    let t = start.elapsed();
    let after = log.lock().unwrap().size_in_bytes();
    out.push_str(&format!(
        "| compaction pass over {:.2} GB of 1 KiB records, 100k distinct keys | {:.0} MB/s read | \
         {:.2} GB → {:.2} GB in {:.1} s | |\n",
        before as f64 / 1e9,
        mbps(stats.bytes_read, t),
        before as f64 / 1e9,
        after as f64 / 1e9,
        t.as_secs_f64()
    ));
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() >= 4 && args[1] == "--recovery-child" {
        recovery_child(Path::new(&args[2]), args[3].parse().unwrap());
        return;
    }
    if args.len() >= 3 && args[1] == "--recover" {
        // For profiling: recover an existing partition directory from offset 0.
        let params = LoadParams {
            recovery_point: Some(0),
            log_start_offset: None,
            had_clean_shutdown: false,
            now_ms: NOW,
        };
        let start = Instant::now();
        let (log, report) = PartitionLog::open(
            Path::new(&args[2]),
            TopicPartition::new("bench", 0),
            config(4 << 30),
            params,
        )
        .unwrap();
        println!(
            "{report:?} leo {} in {:?}",
            log.log_end_offset(),
            start.elapsed()
        );
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return; // cargo's probing
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let mut out = String::new();
    out.push_str("## Storage engine (weir-log)\n\n");
    out.push_str(&format!(
        "Command: `./scripts/bench-storage.sh` (crates/weir-log/benches/storage.rs) · machine: \
         {} vCPU, {cpu}, ext4 on a virtual disk · scale {} · medians of 3 runs where repeated\n\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        scale()
    ));
    out.push_str("| workload | Weir | reference, same run | ratio |\n|---|---:|---|---:|\n");
    type Bench = fn(&mut String);
    let benches: [(&str, Bench); 4] = [
        ("append", append_throughput),
        ("recovery", recovery_time),
        ("compaction", compaction_throughput),
        ("lookup", lookup_latency),
    ];
    for (name, f) in benches {
        eprintln!("storage bench: {name}...");
        f(&mut out);
    }
    println!("{out}");
}
