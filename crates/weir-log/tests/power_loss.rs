//! Power loss in fsync mode (`flush.messages=1`): no acknowledged record may be lost.
//!
//! A process crash keeps the page cache; a power loss keeps only what was fsynced. This
//! test watches every fsync the storage engine makes (`weir_log::durable`) and keeps what
//! a power loss would keep: each file's bytes as of its last fsync, and each directory's
//! entries as of its last fsync. A simulated crash strikes at a random fsync (that fsync
//! never happens), anywhere: in an append, a roll, a retention pass, a compaction, a
//! checkpoint, or the recovery after the previous crash. Then every file goes back to what the disk kept:
//! unsynced bytes are forgotten; files created or renamed into a directory since its last
//! fsync are gone; files removed or renamed away since then are back. The log manager then
//! starts on what is left. Every record acknowledged so far must be there, at its offset,
//! unless retention removed it (and a removal that did not reach the disk may bring
//! records back: only ones that were acknowledged, at their offsets).
//!
//! `POWER_LOSS_CYCLES` sets the number of crashes: 500 by default, the short form the test
//! command runs; `POWER_LOSS_CYCLES=10000` is the soak.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::*;
use weir_kafka::TopicPartition;
use weir_log::durable::{self, SyncWatcher};
use weir_log::{LogConfig, LogManager, LogManagerConfig};
use weir_record::Compression;

/// The panic payload of a simulated power loss.
struct PowerLoss;

#[derive(Default)]
struct Kept {
    /// By inode: the bytes a file had at its last fsync.
    files: HashMap<u64, Vec<u8>>,
    /// By directory: its entries (name → inode) at its last fsync.
    dirs: HashMap<PathBuf, HashMap<OsString, u64>>,
    syncs: u64,
    crash_at: u64,
    /// The crash struck (a recovery thread's panic reaches the test as another payload).
    struck: bool,
}

/// What the disk keeps through a power loss.
#[derive(Default)]
struct Disk {
    kept: Mutex<Kept>,
}

impl Disk {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts an fsync; strikes if this is the one chosen.
    fn tick(&self) {
        let crash = {
            let mut k = self.kept();
            k.syncs += 1;
            k.struck |= k.syncs == k.crash_at;
            k.syncs == k.crash_at
        };
        if crash {
            panic::panic_any(PowerLoss);
        }
    }

    fn arm(&self, after_syncs: u64) {
        let mut k = self.kept();
        k.crash_at = k.syncs + after_syncs;
        k.struck = false;
    }

    fn struck(&self) -> bool {
        self.kept().struck
    }

    fn entries(dir: &Path) -> HashMap<OsString, u64> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name(), e.metadata().unwrap().ino())
            })
            .collect()
    }

    /// A directory the test made before any crash: durable as it is.
    fn settle(&self, dir: &Path) {
        self.kept()
            .dirs
            .insert(dir.to_path_buf(), Disk::entries(dir));
    }

    /// Puts everything under `dir` back to what the disk kept. What is there afterwards is
    /// on the disk (files put back are new inodes): it is all durable.
    fn rewind(&self, dir: &Path) {
        let mut k = self.kept();
        rewind_dir(&k, dir);
        settle_tree(&mut k, dir);
    }
}

fn rewind_dir(k: &Kept, dir: &Path) {
    // A directory never synced keeps none of its entries.
    let empty = HashMap::new();
    let durable = k.dirs.get(dir).unwrap_or(&empty);
    let mut present = HashMap::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        present.insert(entry.file_name(), (meta.ino(), meta.is_dir()));
    }
    for (name, (ino, is_dir)) in &present {
        let path = dir.join(name);
        if durable.get(name) == Some(ino) {
            if *is_dir {
                rewind_dir(k, &path);
            } else {
                // Its name is durable; its bytes are those of its last fsync.
                fs::write(&path, k.files.get(ino).map_or(&[][..], |b| b)).unwrap();
            }
        } else if *is_dir {
            // Created (or renamed in) since the directory's last fsync: lost.
            fs::remove_dir_all(&path).unwrap();
        } else {
            fs::remove_file(&path).unwrap();
        }
    }
    // Names removed or renamed away since the last fsync come back, with the bytes of
    // their file's last fsync.
    for (name, ino) in durable {
        if present.get(name).map(|(i, _)| i) != Some(ino) {
            if let Some(bytes) = k.files.get(ino) {
                fs::write(dir.join(name), bytes).unwrap();
            } else if !present.contains_key(name) && !k.dirs.contains_key(&dir.join(name)) {
                // A file whose bytes were never synced comes back empty.
                fs::write(dir.join(name), []).unwrap();
            }
        }
    }
}

fn settle_tree(k: &mut Kept, dir: &Path) {
    k.dirs.insert(dir.to_path_buf(), Disk::entries(dir));
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            settle_tree(k, &entry.path());
        } else {
            k.files.insert(meta.ino(), fs::read(entry.path()).unwrap());
        }
    }
}

impl SyncWatcher for Disk {
    fn file_synced(&self, file: &File, path: &Path) {
        self.tick();
        let ino = file.metadata().unwrap().ino();
        let bytes = fs::read(path).unwrap();
        self.kept().files.insert(ino, bytes);
    }

    fn dir_synced(&self, dir: &Path) {
        self.tick();
        let entries = Disk::entries(dir);
        self.kept().dirs.insert(dir.to_path_buf(), entries);
    }
}

/// A record's value, which begins with its key: `k<key>|c<cycle>-b<batch>-r<record>`.
fn value(key: u8, cycle: u64, n: u64, i: usize) -> Vec<u8> {
    format!("k{key}|c{cycle}-b{n}-r{i}").into_bytes()
}

fn key_of(value: &[u8]) -> &[u8] {
    value.split(|b| *b == b'|').next().unwrap_or(value)
}

#[test]
fn no_acknowledged_record_is_lost_across_simulated_power_losses() {
    let cycles: u64 = std::env::var("POWER_LOSS_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(500);
    // tmpfs where there is one: the real fsyncs cost nothing there, and only the model's
    // view of them matters.
    let root = match Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let data = root.path().join("data");
    fs::create_dir(&data).unwrap();
    let disk = Arc::new(Disk::default());
    disk.settle(root.path());
    disk.settle(&data);
    durable::watch(Some(disk.clone()));
    let default_hook = panic::take_hook();
    let quiet = disk.clone();
    panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<PowerLoss>() && !quiet.struck() {
            default_hook(info);
        }
    }));

    let config = Arc::new(LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        segment_index_bytes: 4096,
        flush_messages: 1,
        retention_bytes: 32 * 1024,
        retention_ms: -1,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    });
    let mut manager_config = LogManagerConfig::new(&data);
    manager_config.default_config = config.clone();
    manager_config.cleaner_enable = false;
    // Partition "compact-0" is compacted, and its cleaner runs between appends: crashes
    // land in the middle of compactions too.
    let compact_config = Arc::new(LogConfig {
        cleanup_policy: weir_log::CleanupPolicy::Compact,
        min_cleanable_dirty_ratio: 0.01,
        retention_bytes: -1,
        ..(*config).clone()
    });
    let topic_configs = HashMap::from([("compact".to_string(), compact_config.clone())]);
    let mut offset_map = weir_log::cleaner::OffsetMap::new(1 << 20);

    let mut rng = fastrand::Rng::with_seed(0x9077_e105);
    // Each partition made so far, with every record ever acknowledged to it, by offset.
    let mut parts: Vec<(TopicPartition, BTreeMap<i64, Vec<u8>>)> = Vec::new();
    let mut verified = 0u64;
    let mut appended = 0u64;
    // The batch whose append the crash cut short: (partition, values).
    let mut in_flight: Option<(usize, Vec<Vec<u8>>)> = None;
    for cycle in 0..cycles {
        // One crash in four strikes during start-up and recovery; the rest after it.
        let during_startup = rng.u8(0..4) == 0;
        disk.arm(if during_startup {
            rng.u64(1..=48)
        } else {
            u64::MAX / 2
        });
        let run = panic::catch_unwind(AssertUnwindSafe(|| {
            let (manager, _) = LogManager::open(manager_config.clone(), &topic_configs).unwrap();
            for (p, (tp, acked)) in parts.iter_mut().enumerate() {
                let log = manager
                    .log(tp)
                    .unwrap_or_else(|| panic!("cycle {cycle}: partition {tp} is gone"));
                let log = log.lock().unwrap();
                let found: BTreeMap<i64, Vec<u8>> = read_all(&log)
                    .into_iter()
                    .map(|r| (r.offset, r.value.unwrap()))
                    .collect();
                let start = log.log_start_offset();
                if &*tp.topic == "compact" {
                    // The last acknowledged record of each key stays, unless a later record
                    // of that key is in the log.
                    let mut last: HashMap<&[u8], i64> = HashMap::new();
                    for (offset, value) in acked.iter() {
                        last.insert(key_of(value), *offset);
                    }
                    for (key, offset) in last {
                        assert!(
                            found.range(offset..).any(|(_, v)| key_of(v) == key),
                            "cycle {cycle}, {tp}: the last acknowledged record of key {} \
                             (offset {offset}) is lost",
                            String::from_utf8_lossy(key)
                        );
                    }
                } else {
                    for (offset, value) in acked.range(start..) {
                        assert_eq!(
                            found.get(offset),
                            Some(value),
                            "cycle {cycle}, {tp}: acknowledged offset {offset} lost (log start {start})"
                        );
                    }
                }
                // Past them, only the batch the crash cut short may have reached the disk.
                let last_acked = acked.keys().next_back().copied().unwrap_or(-1);
                let extra: Vec<&Vec<u8>> = found.range(last_acked + 1..).map(|(_, v)| v).collect();
                let cut: Vec<&Vec<u8>> = match &in_flight {
                    Some((q, values)) if *q == p => values.iter().collect(),
                    _ => Vec::new(),
                };
                assert!(
                    extra.is_empty() || extra == cut,
                    "cycle {cycle}, {tp}: records that were never appended: {extra:?}"
                );
                for (offset, value) in found.range(..=last_acked) {
                    assert_eq!(
                        acked.get(offset),
                        Some(value),
                        "cycle {cycle}, {tp}: offset {offset} holds a record never acknowledged there"
                    );
                }
                for (offset, value) in found.range(last_acked + 1..) {
                    acked.insert(*offset, value.clone());
                }
            }
            verified += 1;
            in_flight = None;
            if !during_startup {
                disk.arm(rng.u64(1..=48));
            }
            let mut n = 0u64;
            loop {
                // Now and then a new partition, which must survive as surely as records.
                if parts.is_empty() || (parts.len() < 8 && rng.u8(0..40) == 0) {
                    let (tp, cfg) = match parts.len() {
                        0 => (TopicPartition::new("compact", 0), compact_config.clone()),
                        n => (TopicPartition::new(format!("t{n}"), 0), config.clone()),
                    };
                    manager
                        .get_or_create_log(&tp, uuid::Uuid::new_v4(), cfg)
                        .unwrap();
                    parts.push((tp, BTreeMap::new()));
                }
                let p = rng.usize(0..parts.len());
                let log = manager.log(&parts[p].0).unwrap();
                let count = rng.usize(1..=4);
                let values: Vec<Vec<u8>> = (0..count)
                    .map(|i| value(rng.u8(0..12), cycle, n, i))
                    .collect();
                let records: Vec<RecIn<'_>> = values
                    .iter()
                    .map(|v| (NOW + n as i64, Some(key_of(v)), Some(v.as_slice())))
                    .collect();
                in_flight = Some((p, values.clone()));
                let info = log
                    .lock()
                    .unwrap()
                    .append_as_leader(
                        batch(Compression::None, &records),
                        0,
                        NOW,
                        weir_log::AppendOrigin::Client,
                    )
                    .unwrap();
                in_flight = None;
                appended += 1;
                for (i, v) in values.into_iter().enumerate() {
                    parts[p].1.insert(info.first_offset + i as i64, v);
                }
                n += 1;
                match rng.u8(0..10) {
                    0 => manager.run_scheduled(NOW, true),
                    1 => manager.checkpoint().unwrap(),
                    2 => {
                        manager.clean_filthiest(&mut offset_map, NOW).unwrap();
                    }
                    _ => {}
                }
            }
        }));
        match run {
            Err(_) if disk.struck() => disk.rewind(&data),
            Err(payload) => {
                durable::watch(None);
                panic::resume_unwind(payload)
            }
            Ok(()) => unreachable!("the loop only ends in a crash"),
        }
    }
    durable::watch(None);
    println!(
        "power loss: {cycles} crashes, {appended} acknowledged appends to {} partitions, \
         logs checked after {verified} restarts, {} records held at the end",
        parts.len(),
        parts.iter().map(|(_, a)| a.len()).sum::<usize>()
    );
    assert!(
        verified > cycles / 2,
        "most restarts should get as far as the check"
    );
    assert!(
        appended > cycles,
        "most cycles should append before the crash"
    );
}
