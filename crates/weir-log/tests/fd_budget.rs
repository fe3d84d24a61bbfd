//! The log manager within a small descriptor budget: hundreds of partitions, thousands of
//! segments, 16 open segment files. Appends and reads land on random partitions while
//! retention and compaction run, and everything is checked against a model (a map of
//! offset → record per partition). The process's own descriptor limit is set just above
//! the budget, so a single descriptor too many fails the test with EMFILE, and the
//! descriptors in use are counted after every step. Then the broker "crashes" (the
//! manager is dropped without a clean shutdown) and loads again under the same limit.
//!
//! One test in this file: it lowers the process's RLIMIT_NOFILE.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use common::*;
use weir_kafka::TopicPartition;
use weir_log::cleaner::OffsetMap;
use weir_log::{AppendOrigin, CleanupPolicy, FileSlice, LogConfig, LogManager, LogManagerConfig};
use weir_record::Compression;

const BUDGET: usize = 16;
/// Descriptors opened for a moment beyond the budget: an index resized or fsynced, a
/// checkpoint's temporary file, a directory fsync, the listing of a directory, the
/// listing of /proc/self/fd that counts them.
const TRANSIENT: usize = 6;
const PARTITIONS: i32 = 300;

fn open_fds() -> usize {
    // The listing holds one descriptor of its own while it runs.
    std::fs::read_dir("/proc/self/fd").unwrap().count() - 1
}

/// Sets the soft limit on open files; returns the previous one.
fn set_nofile(soft: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a struct owned here.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        let old = lim.rlim_cur;
        lim.rlim_cur = soft.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        old
    }
}

fn configs() -> (Arc<LogConfig>, Arc<LogConfig>, Arc<LogConfig>) {
    let plain = small_config();
    let retained = Arc::new(LogConfig {
        retention_bytes: 3 * 1024,
        ..(*small_config()).clone()
    });
    let compacted = Arc::new(LogConfig {
        cleanup_policy: CleanupPolicy::Compact,
        min_cleanable_dirty_ratio: 0.01,
        ..(*small_config()).clone()
    });
    (plain, retained, compacted)
}

fn tp(p: i32) -> TopicPartition {
    match p % 3 {
        0 => TopicPartition::new("plain", p),
        1 => TopicPartition::new("retained", p),
        _ => TopicPartition::new("compacted", p),
    }
}

fn manager_config(data: &Path) -> LogManagerConfig {
    let mut c = LogManagerConfig::new(data);
    c.default_config = small_config();
    c.max_open_segment_files = BUDGET;
    c.cleaner_enable = false;
    c.recovery_threads_per_data_dir = 2;
    c
}

/// Every record acknowledged to a partition, by offset: (key, value).
type Model = BTreeMap<i64, (Vec<u8>, Vec<u8>)>;

/// The log holds what the model says: from its log start offset on, exactly the model's
/// records; for a compacted partition, the last record of every key, and nothing that was
/// never written there.
fn check(m: &LogManager, tp: &TopicPartition, model: &Model) {
    let log = m.log(tp).unwrap();
    let log = log.lock().unwrap();
    let got: Vec<(i64, Vec<u8>, Vec<u8>)> = read_all(&log)
        .into_iter()
        .map(|r| (r.offset, r.key.unwrap(), r.value.unwrap()))
        .collect();
    let leo = model.keys().next_back().map_or(0, |o| o + 1);
    assert_eq!(log.log_end_offset(), leo, "{tp}");
    if &*tp.topic == "compacted" {
        for (o, k, v) in &got {
            assert_eq!(model.get(o), Some(&(k.clone(), v.clone())), "{tp} at {o}");
        }
        let mut last: HashMap<&[u8], i64> = HashMap::new();
        for (o, (k, _)) in model {
            last.insert(k, *o);
        }
        for (k, o) in last {
            assert!(
                got.iter().any(|(go, gk, _)| *go == o && gk == k),
                "{tp}: the last record of key {k:?} (offset {o}) is lost"
            );
        }
    } else {
        let start = log.log_start_offset();
        let want: Vec<(i64, Vec<u8>, Vec<u8>)> = model
            .range(start..)
            .map(|(o, (k, v))| (*o, k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want, "{tp} from {start}");
    }
}

/// What a slice read now must show: its records are the model's at their offsets.
fn check_slice(slice: &FileSlice, model: &Model, what: &str) {
    let bytes = slice.read_to_vec().unwrap();
    let recs = decode(&bytes);
    assert!(!recs.is_empty(), "{what}: a slice of a batch holds it");
    for r in recs {
        let want = model.get(&r.offset).unwrap();
        assert_eq!(
            (r.key.as_ref().unwrap(), r.value.as_ref().unwrap()),
            (&want.0, &want.1),
            "{what} at {}",
            r.offset
        );
    }
}

#[test]
fn hundreds_of_partitions_live_and_restart_within_sixteen_open_files() {
    // tmpfs where there is one: the evictions' fsyncs then cost nothing.
    let root = match Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let data = root.path().join("data");
    let (plain, retained, compacted) = configs();
    let topic_configs = HashMap::from([
        ("retained".to_string(), retained.clone()),
        ("compacted".to_string(), compacted.clone()),
    ]);
    let baseline = open_fds();
    // One lock per data directory, the budget, and the moments beyond it. Anything more
    // fails with EMFILE.
    let ceiling = baseline + 1 + BUDGET + TRANSIENT;
    let old_limit = set_nofile(ceiling as u64);
    let within_budget = |m: &LogManager, held: usize, step: &str| {
        let fds = open_fds();
        assert!(
            fds <= ceiling,
            "{step}: {fds} descriptors open, {baseline} before the test"
        );
        // Accounting: the budget, plus slices of closed files the test still holds.
        assert!(
            m.open_files() <= 1 + BUDGET + held,
            "{step}: open_files {} with {held} slices held",
            m.open_files()
        );
        assert!(fds <= baseline + m.open_files() + TRANSIENT, "{step}");
    };

    let (m, _) = LogManager::open(manager_config(&data), &topic_configs).unwrap();
    let mut models: Vec<Model> = vec![Model::new(); PARTITIONS as usize];
    for p in 0..PARTITIONS {
        let cfg = match p % 3 {
            0 => plain.clone(),
            1 => retained.clone(),
            _ => compacted.clone(),
        };
        m.get_or_create_log(&tp(p), uuid::Uuid::new_v4(), cfg)
            .unwrap();
    }
    within_budget(&m, 0, "after creating the partitions");

    let mut rng = fastrand::Rng::with_seed(0xfd_b0d9e7);
    let mut held: Vec<(usize, FileSlice)> = Vec::new();
    let mut map = OffsetMap::new(1 << 20);
    let mut counter = 0u64;
    for step in 0..15_000 {
        let p = rng.usize(0..PARTITIONS as usize);
        let t = tp(p as i32);
        match rng.u8(0..20) {
            // Appends: a batch of 1 to 4 records with keys from a small set.
            0..=10 => {
                let recs: Vec<(Vec<u8>, Vec<u8>)> = (0..rng.usize(1..=4))
                    .map(|_| {
                        counter += 1;
                        (
                            format!("k{}", rng.u8(0..8)).into_bytes(),
                            format!("v{counter}-{}", "x".repeat(rng.usize(0..60))).into_bytes(),
                        )
                    })
                    .collect();
                let view: Vec<RecIn<'_>> = recs
                    .iter()
                    .map(|(k, v)| (NOW, Some(k.as_slice()), Some(v.as_slice())))
                    .collect();
                let info = m
                    .log(&t)
                    .unwrap()
                    .lock()
                    .unwrap()
                    .append_as_leader(
                        batch(Compression::None, &view),
                        0,
                        NOW,
                        AppendOrigin::Client,
                    )
                    .unwrap();
                for (i, r) in recs.into_iter().enumerate() {
                    models[p].insert(info.first_offset + i as i64, r);
                }
            }
            // Reads: some slices are kept for a while, as fetches in flight are.
            11..=15 => {
                let log = m.log(&t).unwrap();
                let log = log.lock().unwrap();
                let (start, end) = (log.log_start_offset(), log.log_end_offset());
                if start < end {
                    let at = rng.i64(start..end);
                    let slice = log.read(at, 512, i64::MAX, true).unwrap().slice.unwrap();
                    drop(log);
                    if &*t.topic != "compacted" {
                        check_slice(&slice, &models[p], &format!("step {step}, {t}"));
                        if held.len() < 4 && rng.bool() {
                            held.push((p, slice));
                        }
                    }
                }
            }
            16 => m.run_scheduled(NOW, true),
            17 => {
                m.clean_filthiest(&mut map, NOW).unwrap();
            }
            18 => m.checkpoint().unwrap(),
            _ => {
                m.log(&t).unwrap().lock().unwrap().flush(NOW).unwrap();
            }
        }
        // A slice held across many evictions still reads its records (a retention pass may
        // have removed its segment meanwhile; the bytes stay readable all the same).
        if !held.is_empty() && rng.u8(0..8) == 0 {
            let (q, slice) = held.swap_remove(rng.usize(0..held.len()));
            check_slice(&slice, &models[q], &format!("step {step}, a held slice"));
        }
        within_budget(&m, held.len(), &format!("step {step}"));
    }
    held.clear();
    let logs = m.logs();
    let segments: usize = logs
        .iter()
        .map(|(_, l)| l.lock().unwrap().num_segments())
        .sum();
    assert!(
        segments > 50 * BUDGET,
        "many more segments ({segments}) than open files"
    );
    let open_logs = logs
        .iter()
        .filter(|(_, l)| l.lock().unwrap().open_segment_files() > 0)
        .count();
    assert!(
        open_logs <= BUDGET,
        "idle partitions hold no file: {open_logs} hold one"
    );
    drop(logs);
    for p in 0..PARTITIONS {
        check(&m, &tp(p), &models[p as usize]);
    }
    within_budget(&m, 0, "after reading every partition");

    // A crash: no shutdown, no flush, no clean-shutdown marker. The restart recovers from
    // the checkpointed recovery points within the same descriptor limit.
    drop(m);
    let (m, report) = LogManager::open(manager_config(&data), &topic_configs).unwrap();
    assert!(!report.had_clean_shutdown);
    assert_eq!(report.partitions, PARTITIONS as usize);
    within_budget(&m, 0, "after the restart");
    for p in 0..PARTITIONS {
        check(&m, &tp(p), &models[p as usize]);
    }
    within_budget(&m, 0, "after reading every partition again");
    m.shutdown().unwrap();
    drop(m);
    assert_eq!(open_fds(), baseline, "every descriptor is closed");
    set_nofile(old_limit);
}
