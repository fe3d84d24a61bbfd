//! Creating a partition's log is all or nothing. The process's descriptor limit is set so
//! that creation runs out of descriptors (EMFILE), with no descriptor to spare, then one,
//! and so on until it succeeds; and each fsync creation makes fails in turn (EIO, as from
//! a failing disk). After every failure the data directory is exactly as it was, nothing
//! is registered, and no descriptor stays open. A log just created is then removed again,
//! as a broker rolls back a topic whose later partitions failed: nothing of it stays on
//! disk or open.
//!
//! One test in this file: it lowers the process's RLIMIT_NOFILE.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use common::*;
use weir_kafka::TopicPartition;
use weir_log::durable;
use weir_log::{AppendOrigin, LogManager, LogManagerConfig, PartitionLog, SegmentFileCache};
use weir_record::Compression;

fn open_fds() -> usize {
    // The listing holds one descriptor of its own while it runs.
    std::fs::read_dir("/proc/self/fd").unwrap().count() - 1
}

/// The soft limit under which exactly `free` more descriptors can be opened (new ones take
/// the lowest free numbers, and the limit bounds the numbers).
fn limit_allowing(free: usize) -> u64 {
    let names: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
        .collect();
    // SAFETY: F_GETFD only asks whether a number is an open descriptor; the listing's own
    // descriptor is closed by now and answers no.
    let open: Vec<i32> = names
        .into_iter()
        .filter(|fd| unsafe { libc::fcntl(*fd, libc::F_GETFD) } >= 0)
        .collect();
    let mut left = free;
    let mut n = 0;
    loop {
        if !open.contains(&n) {
            if left == 0 {
                return n as u64;
            }
            left -= 1;
        }
        n += 1;
    }
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

/// Every file and directory under `dir`, with each file's length and checksum.
fn tree(dir: &Path) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let name = e.path().strip_prefix(dir).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
                out.insert(name, None);
            } else {
                let bytes = std::fs::read(e.path()).unwrap();
                let sum = format!("{} bytes, crc {:08x}", bytes.len(), crc32c::crc32c(&bytes));
                out.insert(name, Some(sum));
            }
        }
    }
    out
}

#[test]
fn a_creation_that_fails_at_any_step_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut cfg = LogManagerConfig::new(&data);
    cfg.default_config = small_config();
    cfg.max_open_segment_files = 8;
    let (m, _) = LogManager::open(cfg, &HashMap::new()).unwrap();
    // Partitions that exist already, with records, and their checkpoints.
    for p in 0..3 {
        let log = m
            .get_or_create_log(
                &TopicPartition::new("old", p),
                uuid::Uuid::new_v4(),
                small_config(),
            )
            .unwrap();
        log.lock()
            .unwrap()
            .append_as_leader(
                simple_batch(Compression::None, 3, "old", NOW),
                0,
                NOW,
                AppendOrigin::Client,
            )
            .unwrap();
    }
    m.checkpoint().unwrap();

    let tp = TopicPartition::new("new", 0);
    let before = tree(&data);
    let fds = open_fds();
    let held = m.open_files();
    let mut failures = 0;
    for extra in 0.. {
        assert!(extra < 64, "creation never succeeded");
        let old = set_nofile(limit_allowing(extra));
        let created = m.get_or_create_log(&tp, uuid::Uuid::new_v4(), small_config());
        set_nofile(old);
        let Err(e) = created else { break };
        failures += 1;
        assert!(e.to_string().contains("Too many open files"), "{e}");
        assert!(m.log(&tp).is_none(), "{extra}: nothing registered");
        assert_eq!(
            tree(&data),
            before,
            "{extra}: the data directory is as it was"
        );
        assert_eq!(open_fds(), fds, "{extra}: no descriptor is held");
        assert_eq!(m.open_files(), held, "{extra}");
        assert!(
            m.offline_dirs().is_empty(),
            "running out of descriptors is not a disk failure"
        );
    }
    assert!(
        failures >= 2,
        "creation holds two files at once at most; it failed {failures} times"
    );

    // Created, then removed again as a rollback: nothing of it stays.
    let log = m.log(&tp).expect("created at last");
    assert!(data.join("new-0").is_dir());
    drop(log);
    assert!(m.delete_log(&tp).unwrap());
    assert!(m.log(&tp).is_none());
    assert_eq!(
        tree(&data),
        before,
        "a rolled-back log leaves nothing on disk"
    );
    assert_eq!(open_fds(), fds, "nor a descriptor");
    assert_eq!(m.open_files(), held);

    // Each fsync of the creation fails in turn: the directory goes again each time.
    let files = SegmentFileCache::new(4);
    let pdir = data.join("synced-0");
    let mut failures = 0;
    for n in 1.. {
        assert!(n < 64, "creation never succeeded");
        durable::fail_sync_after(Some(n));
        let created = PartitionLog::create_in(
            &pdir,
            TopicPartition::new("synced", 0),
            uuid::Uuid::new_v4(),
            small_config(),
            NOW,
            &files,
        );
        durable::fail_sync_after(None);
        let Err(e) = created else { break };
        failures += 1;
        assert!(weir_log::is_disk_failure(&e), "{n}: {e}");
        assert_eq!(tree(&data), before, "{n}: the data directory is as it was");
        assert_eq!(open_fds(), fds, "{n}: no descriptor is held");
        assert_eq!(files.open_files(), 0, "{n}");
    }
    assert!(
        failures >= 4,
        "creation fsyncs at several steps; it failed {failures} times"
    );
    std::fs::remove_dir_all(&pdir).unwrap();

    // The manager and the disk are fine: the old partitions are intact after a restart.
    m.shutdown().unwrap();
    drop(m);
    let mut cfg = LogManagerConfig::new(&data);
    cfg.default_config = small_config();
    let (m, report) = LogManager::open(cfg, &HashMap::new()).unwrap();
    assert_eq!(report.partitions, 3);
    for p in 0..3 {
        let log = m.log(&TopicPartition::new("old", p)).unwrap();
        assert_eq!(read_all(&log.lock().unwrap()).len(), 3);
    }
    m.shutdown().unwrap();
}
