//! What one append and one read cost a hot partition, with the disk out of the picture:
//! the log lives on tmpfs (`/dev/shm` where there is one), so the figures are the engine's
//! own work per call (validation, offsets, indexes, file handles, the page-cache copy),
//! not the disk's. Used to check that bounding the open segment files costs a hot
//! partition nothing measurable:
//!
//! `cargo bench -p weir-log --bench hot_path -- --save-baseline before`, then after a
//! change `cargo bench -p weir-log --bench hot_path -- --baseline before`.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use weir_kafka::TopicPartition;
use weir_log::{AppendOrigin, LogConfig, PartitionLog};
use weir_record::{BatchBuilder, Compression};

const NOW: i64 = 1_700_000_000_000;

fn tmpfs_dir() -> tempfile::TempDir {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// A producer's batch of `n` records of 100 bytes.
fn batch(n: usize) -> Bytes {
    let mut b = BatchBuilder::new(Compression::None, 0, usize::MAX);
    for i in 0..n {
        b.append(NOW + i as i64, Some(b"key"), Some(&[b'v'; 100]), &[])
            .unwrap();
    }
    Bytes::from(b.build().unwrap().bytes)
}

fn new_log(dir: &std::path::Path) -> PartitionLog {
    let config = Arc::new(LogConfig {
        segment_bytes: 1 << 30,
        retention_ms: -1,
        ..LogConfig::default()
    });
    PartitionLog::create(
        &dir.join("hot-0"),
        TopicPartition::new("hot", 0),
        uuid::Uuid::new_v4(),
        config,
        NOW,
    )
    .unwrap()
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_partition");
    for n in [1usize, 10] {
        let dir = tmpfs_dir();
        let mut log = new_log(dir.path());
        let records = batch(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("append {n} record(s) of 100 B"), |b| {
            b.iter(|| {
                log.append_as_leader(records.clone(), 0, NOW, AppendOrigin::Client)
                    .unwrap()
            })
        });
    }
    let dir = tmpfs_dir();
    let mut log = new_log(dir.path());
    let records = batch(10);
    for _ in 0..10_000 {
        log.append_as_leader(records.clone(), 0, NOW, AppendOrigin::Client)
            .unwrap();
    }
    let leo = log.log_end_offset();
    let mut rng = fastrand::Rng::with_seed(7);
    group.throughput(Throughput::Elements(1));
    group.bench_function("read at a random offset (lookup and slice)", |b| {
        b.iter(|| {
            let data = log.read(rng.i64(0..leo), 4096, i64::MAX, true).unwrap();
            assert!(data.slice.is_some());
            data
        })
    });
    group.finish();
}

criterion_group!(benches, append);
criterion_main!(benches);
