//! LogManager on real directories: meta.properties, the lock, checkpoints, the clean
//! shutdown marker, parallel loading, topic deletion, scheduled retention and compaction.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use weir_kafka::TopicPartition;
use weir_log::cleaner::OffsetMap;
use weir_log::{AppendOrigin, CleanupPolicy, LogConfig, LogManager, LogManagerConfig};
use weir_record::Compression;

fn config(dirs: &[&std::path::Path]) -> LogManagerConfig {
    let mut c = LogManagerConfig::new(dirs[0]);
    c.log_dirs = dirs.iter().map(|d| d.to_path_buf()).collect();
    c.default_config = small_config();
    c
}

#[test]
fn start_write_shutdown_restart_without_scanning() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let (m, report) = LogManager::open(config(&[a.path(), b.path()]), &HashMap::new()).unwrap();
    assert_eq!(report.partitions, 0);
    let meta = std::fs::read_to_string(a.path().join("meta.properties")).unwrap();
    assert!(
        meta.contains("node.id=1") && meta.contains("cluster.id=") && meta.contains("version=1"),
        "{meta}"
    );
    let cluster = m.cluster_id().to_string();
    let id = uuid::Uuid::new_v4();
    let mut written = Vec::new();
    for p in 0..40 {
        let tp = TopicPartition::new("orders", p);
        let log = m
            .get_or_create_log(&tp, id, m.default_config().clone())
            .unwrap();
        let mut log = log.lock().unwrap();
        for i in 0..5 {
            log.append_as_leader(
                simple_batch(Compression::ALL[i % 5], 3, &format!("p{p}"), NOW),
                0,
                NOW,
                AppendOrigin::Client,
            )
            .unwrap();
        }
        written.push((tp, read_all(&log)));
    }
    // Partitions spread over both directories.
    let count = |d: &std::path::Path| {
        std::fs::read_dir(d)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_dir())
            .count()
    };
    assert_eq!((count(a.path()), count(b.path())), (20, 20));
    m.shutdown().unwrap();
    assert!(a.path().join(".kafka_cleanshutdown").exists());
    let rp = std::fs::read_to_string(a.path().join("recovery-point-offset-checkpoint")).unwrap();
    assert!(rp.starts_with("0\n20\n"), "{rp}");
    assert!(
        rp.contains("orders 0 15\n") || rp.contains("orders 1 15\n"),
        "{rp}"
    );
    drop(m);

    let (m, report) = LogManager::open(config(&[a.path(), b.path()]), &HashMap::new()).unwrap();
    assert!(report.had_clean_shutdown);
    assert_eq!(report.partitions, 40);
    assert_eq!(
        report.recovered_segments, 0,
        "a clean restart reads no segment"
    );
    assert_eq!(m.cluster_id(), cluster);
    assert!(
        !a.path().join(".kafka_cleanshutdown").exists(),
        "the marker goes at start-up"
    );
    for (tp, recs) in &written {
        assert_eq!(&read_all(&m.log(tp).unwrap().lock().unwrap()), recs);
    }
    // An unclean stop: every partition is recovered from its checkpointed recovery point.
    drop(m);
    let (m, report) = LogManager::open(config(&[a.path(), b.path()]), &HashMap::new()).unwrap();
    assert!(!report.had_clean_shutdown);
    for (tp, recs) in &written {
        assert_eq!(&read_all(&m.log(tp).unwrap().lock().unwrap()), recs);
    }
    m.shutdown().unwrap();
}

#[test]
fn a_data_directory_is_locked_against_a_second_broker() {
    let a = tempfile::tempdir().unwrap();
    let (m, _) = LogManager::open(config(&[a.path()]), &HashMap::new()).unwrap();
    let err = LogManager::open(config(&[a.path()]), &HashMap::new())
        .err()
        .expect("second open fails");
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
    m.shutdown().unwrap();
    drop(m);
    let mut other = config(&[a.path()]);
    other.node_id = 7;
    let err = LogManager::open(other, &HashMap::new())
        .err()
        .expect("node id mismatch");
    assert!(err.to_string().contains("belongs to node 1"), "{err}");
}

#[test]
fn deleted_partitions_disappear_and_stay_gone() {
    let a = tempfile::tempdir().unwrap();
    let (m, _) = LogManager::open(config(&[a.path()]), &HashMap::new()).unwrap();
    let tp = TopicPartition::new("gone", 0);
    m.get_or_create_log(&tp, uuid::Uuid::new_v4(), m.default_config().clone())
        .unwrap();
    assert!(m.delete_log(&tp).unwrap());
    assert!(m.log(&tp).is_none());
    assert!(!a.path().join("gone-0").exists());
    m.shutdown().unwrap();
    drop(m);
    let (m, report) = LogManager::open(config(&[a.path()]), &HashMap::new()).unwrap();
    assert_eq!(report.partitions, 0);
    assert!(m.log(&tp).is_none());
    let leftovers: Vec<_> = std::fs::read_dir(a.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains("gone"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn scheduled_retention_and_compaction_run_through_the_manager() {
    let a = tempfile::tempdir().unwrap();
    let mut cfg = config(&[a.path()]);
    cfg.retention_check_interval_ms = 50;
    cfg.flush_check_interval_ms = 20;
    let (m, _) = LogManager::open(cfg, &HashMap::new()).unwrap();
    let m = Arc::new(m);
    // A topic with 1 s time retention, and a compacted topic.
    let short = Arc::new(LogConfig {
        retention_ms: 1_000,
        ..(*small_config()).clone()
    });
    let compacted = Arc::new(LogConfig {
        cleanup_policy: CleanupPolicy::Compact,
        min_cleanable_dirty_ratio: 0.1,
        ..(*small_config()).clone()
    });
    let t = TopicPartition::new("short", 0);
    let c = TopicPartition::new("table", 0);
    let now = weir_log::now_ms();
    {
        let log = m
            .get_or_create_log(&t, uuid::Uuid::new_v4(), short)
            .unwrap();
        let mut log = log.lock().unwrap();
        for _ in 0..30 {
            log.append_as_leader(
                simple_batch(Compression::None, 4, "old", now - 10_000),
                0,
                now,
                AppendOrigin::Client,
            )
            .unwrap();
        }
        assert!(log.num_segments() > 2);
    }
    {
        let log = m
            .get_or_create_log(&c, uuid::Uuid::new_v4(), compacted)
            .unwrap();
        let mut log = log.lock().unwrap();
        for round in 0..30 {
            log.append_as_leader(
                simple_batch(Compression::Lz4, 4, &format!("r{round}"), now),
                0,
                now,
                AppendOrigin::Client,
            )
            .unwrap();
        }
        log.roll(None, now).unwrap();
    }
    m.start();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let gone = m.log(&t).unwrap().lock().unwrap().num_segments() == 1;
        if gone {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "retention never ran");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Compaction runs on its own thread too (first pass at start); force one to check.
    let mut map = OffsetMap::new(1 << 20);
    let _ = m.clean_filthiest(&mut map, weir_log::now_ms()).unwrap();
    let kept = read_all(&m.log(&c).unwrap().lock().unwrap());
    let values: Vec<&[u8]> = kept.iter().map(|r| r.value.as_deref().unwrap()).collect();
    assert_eq!(
        values,
        [&b"r29-0"[..], b"r29-1", b"r29-2", b"r29-3"],
        "only the latest value of each key"
    );
    let metrics = m.metrics();
    assert_eq!(metrics.len(), 2);
    let started = std::time::Instant::now();
    m.shutdown().unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "shutdown is prompt"
    );
}
