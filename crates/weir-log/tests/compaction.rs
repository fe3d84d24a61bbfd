//! Log compaction on real files: what remains after a pass is checked record by record
//! through kafka-python's parser (an implementation that is not ours); tombstones live
//! until their delete horizon; a small dedupe buffer means several passes; and a crash
//! between any two steps of the segment swap loads back to a consistent log.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::*;
use weir_kafka::TopicPartition;
use weir_log::cleaner::{self, CrashPoint, OffsetMap};
use weir_log::{AppendOrigin, CleanupPolicy, LoadParams, LogConfig, PartitionLog};
use weir_record::{Compression, ControlRecordType, EndTransactionMarker};

fn compact_config() -> Arc<LogConfig> {
    Arc::new(LogConfig {
        cleanup_policy: CleanupPolicy::Compact,
        segment_bytes: 2048,
        index_interval_bytes: 128,
        segment_index_bytes: 4096,
        retention_ms: -1,
        delete_retention_ms: 60_000,
        min_cleanable_dirty_ratio: 0.01,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    })
}

/// Writes `n` batches of keyed records (some tombstones); returns the log and every record.
fn write_keyed(
    pdir: &std::path::Path,
    config: Arc<LogConfig>,
    n: usize,
    keys: usize,
) -> (PartitionLog, Vec<Rec>) {
    let mut log = PartitionLog::create(
        pdir,
        TopicPartition::new("cmp", 0),
        uuid::Uuid::new_v4(),
        config,
        NOW,
    )
    .unwrap();
    let mut rng = fastrand::Rng::with_seed(42);
    let mut all = Vec::new();
    for b in 0..n {
        let recs: Vec<(i64, Vec<u8>, Option<Vec<u8>>)> = (0..rng.usize(1..6))
            .map(|i| {
                let k = format!("key-{}", rng.usize(0..keys)).into_bytes();
                let v = (rng.u8(0..10) != 0)
                    .then(|| format!("v{b}.{i}-{}", "x".repeat(rng.usize(0..40))).into_bytes());
                (NOW + b as i64, k, v)
            })
            .collect();
        let view: Vec<RecIn<'_>> = recs
            .iter()
            .map(|(t, k, v)| (*t, Some(k.as_slice()), v.as_deref()))
            .collect();
        let codec = Compression::ALL[b % 5];
        let info = log
            .append_as_leader(batch(codec, &view), 0, NOW, AppendOrigin::Client)
            .unwrap();
        for (i, (t, k, v)) in recs.into_iter().enumerate() {
            all.push(Rec {
                offset: info.first_offset + i as i64,
                timestamp: t,
                key: Some(k),
                value: v,
            });
        }
    }
    (log, all)
}

fn latest_by_key(recs: &[Rec]) -> BTreeMap<Vec<u8>, Rec> {
    let mut m = BTreeMap::new();
    for r in recs {
        m.insert(r.key.clone().unwrap(), r.clone());
    }
    m
}

/// One full pass as the manager runs it: measure, then clean (the cleaner takes the
/// log's lock itself).
fn pass(log: &Mutex<PartitionLog>, checkpoint: Option<i64>, now: i64, map: &mut OffsetMap) -> i64 {
    let c = cleaner::cleanability(&mut log.lock().unwrap(), checkpoint, now);
    cleaner::clean(
        log,
        map,
        c.first_dirty_offset,
        c.first_uncleanable_offset,
        now,
    )
    .unwrap()
    .end_offset
}

#[test]
fn compaction_keeps_the_latest_value_of_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("cmp-0");
    let (mut log, all) = write_keyed(&pdir, compact_config(), 300, 25);
    log.roll(None, NOW).unwrap(); // everything but an empty active segment is cleanable
    let size_before = log.size_in_bytes();
    let c = cleaner::cleanability(&mut log, None, NOW);
    assert!(c.is_cleanable(0.5), "{c:?}");
    let log = Mutex::new(log);
    let mut map = OffsetMap::new(1 << 20);
    let end = pass(&log, None, NOW, &mut map);
    let mut log = log.into_inner().unwrap();
    assert_eq!(end, log.log_end_offset());
    assert!(
        log.size_in_bytes() < size_before / 2,
        "{} -> {}",
        size_before,
        log.size_in_bytes()
    );

    let kept = read_all(&log);
    // Offsets never change: every kept record is the record that had that offset.
    let by_offset: BTreeMap<i64, &Rec> = all.iter().map(|r| (r.offset, r)).collect();
    for r in &kept {
        assert_eq!(by_offset[&r.offset], r);
    }
    // Exactly the latest record of every key is left (tombstones included, within their horizon).
    let mut want: Vec<Rec> = latest_by_key(&all).into_values().collect();
    want.sort_by_key(|r| r.offset);
    assert_eq!(kept, want);
    // kafka-python reads the compacted files the same (batches with gaps, empty batches).
    if let Some(py) = kafka_python_records(&pdir) {
        assert_eq!(py, want);
    }
    // After the delete horizon, the next pass drops the tombstones.
    let later = NOW + 60_001;
    log.roll(None, later).unwrap();
    let log = Mutex::new(log);
    pass(&log, None, later, &mut map);
    let mut log = log.into_inner().unwrap();
    let kept = read_all(&log);
    let want: Vec<Rec> = want.into_iter().filter(|r| r.value.is_some()).collect();
    assert_eq!(kept, want);
    if let Some(py) = kafka_python_records(&pdir) {
        assert_eq!(py, want);
    }
    // Appends continue at the same offset; the log reloads identically.
    let leo = log.log_end_offset();
    log.close(later).unwrap();
    drop(log);
    let params = LoadParams {
        recovery_point: None,
        log_start_offset: None,
        had_clean_shutdown: false,
        now_ms: later,
    };
    let (mut log, _) = PartitionLog::open(
        &pdir,
        TopicPartition::new("cmp", 0),
        compact_config(),
        params,
    )
    .unwrap();
    assert_eq!(read_all(&log), want);
    let info = log
        .append_as_leader(
            simple_batch(Compression::None, 1, "z", later),
            0,
            later,
            AppendOrigin::Client,
        )
        .unwrap();
    assert_eq!(info.first_offset, leo);
}

#[test]
fn a_small_dedupe_buffer_cleans_in_several_passes() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("cmp-0");
    let (mut log, all) = write_keyed(&pdir, compact_config(), 200, 400);
    log.roll(None, NOW).unwrap();
    let log = Mutex::new(log);
    // Room for ~90 keys: far fewer than the log holds.
    let mut map = OffsetMap::new(24 * 100);
    let mut checkpoint = None;
    let mut passes = 0;
    loop {
        let c = cleaner::cleanability(&mut log.lock().unwrap(), checkpoint, NOW);
        if c.dirty_bytes == 0 {
            break;
        }
        let end = pass(&log, checkpoint, NOW, &mut map);
        assert!(end > c.first_dirty_offset, "each pass makes progress");
        checkpoint = Some(end);
        passes += 1;
        assert!(passes < 100);
    }
    assert!(passes > 1, "{passes} passes");
    let mut want: Vec<Rec> = latest_by_key(&all).into_values().collect();
    want.sort_by_key(|r| r.offset);
    // Every key keeps its latest record; older duplicates may remain only where one pass
    // could not see another's range.
    let kept = read_all(&log.lock().unwrap());
    assert_eq!(latest_by_key(&kept).len(), want.len());
    for w in &want {
        assert!(kept.contains(w), "latest record of {:?} kept", w.key);
    }
}

#[test]
fn min_compaction_lag_keeps_recent_segments_dirty() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("cmp-0");
    let mut cfg = (*compact_config()).clone();
    cfg.min_compaction_lag_ms = 1_000_000;
    let (mut log, _) = write_keyed(&pdir, Arc::new(cfg), 100, 10);
    log.roll(None, NOW).unwrap();
    let c = cleaner::cleanability(&mut log, None, NOW + 10);
    assert_eq!(c.dirty_bytes, 0, "every record is younger than the lag");
    let c = cleaner::cleanability(&mut log, None, NOW + 2_000_000);
    assert!(c.dirty_bytes > 0);
}

#[test]
fn a_crash_at_any_step_of_the_swap_loads_a_consistent_log() {
    for crash in [
        CrashPoint::AfterCleaned,
        CrashPoint::AfterSwap,
        CrashPoint::AfterDeleted,
    ] {
        for clean_shutdown in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let pdir = dir.path().join("cmp-0");
            let (mut log, all) = write_keyed(&pdir, compact_config(), 150, 20);
            log.roll(None, NOW).unwrap();
            let rp = log.recovery_point();
            let leo = log.log_end_offset();
            let c = cleaner::cleanability(&mut log, None, NOW);
            let log = Mutex::new(log);
            let mut map = OffsetMap::new(1 << 20);
            cleaner::clean_with_crash(
                &log,
                &mut map,
                c.first_dirty_offset,
                c.first_uncleanable_offset,
                NOW,
                Some(crash),
            )
            .unwrap();
            drop(log); // the crash
            let params = LoadParams {
                recovery_point: Some(rp),
                log_start_offset: None,
                had_clean_shutdown: clean_shutdown,
                now_ms: NOW,
            };
            let (log, _) = PartitionLog::open(
                &pdir,
                TopicPartition::new("cmp", 0),
                compact_config(),
                params,
            )
            .unwrap();
            let got = read_all(&log);
            // Consistent: offsets increase, every record is an original one, and every key's
            // latest value is there.
            let by_offset: BTreeMap<i64, &Rec> = all.iter().map(|r| (r.offset, r)).collect();
            assert!(
                got.windows(2).all(|w| w[0].offset < w[1].offset),
                "{crash:?}"
            );
            for r in &got {
                assert_eq!(by_offset[&r.offset], r, "{crash:?}");
            }
            for w in latest_by_key(&all).values() {
                assert!(got.contains(w), "{crash:?}: latest of {:?}", w.key);
            }
            assert_eq!(log.log_end_offset(), leo, "{crash:?}");
            let leftovers: Vec<String> = std::fs::read_dir(&pdir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.ends_with(".cleaned") || n.ends_with(".swap") || n.ends_with(".deleted")
                })
                .collect();
            assert!(leftovers.is_empty(), "{crash:?}: {leftovers:?}");
            // And a full pass afterwards gives the fully compacted log.
            let log = Mutex::new(log);
            pass(&log, None, NOW, &mut map);
            let mut want: Vec<Rec> = latest_by_key(&all).into_values().collect();
            want.sort_by_key(|r| r.offset);
            assert_eq!(read_all(&log.lock().unwrap()), want, "{crash:?}");
        }
    }
}

/// A new, empty compacted log in `pdir`.
fn new_log(pdir: &std::path::Path) -> PartitionLog {
    PartitionLog::create(
        pdir,
        TopicPartition::new("cmp", 0),
        uuid::Uuid::new_v4(),
        compact_config(),
        NOW,
    )
    .unwrap()
}

/// The log in `pdir` opened again after an unclean stop, recovered from its start.
fn reopen(pdir: &std::path::Path, now_ms: i64) -> PartitionLog {
    let params = LoadParams {
        recovery_point: Some(0),
        log_start_offset: None,
        had_clean_shutdown: false,
        now_ms,
    };
    PartitionLog::open(
        pdir,
        TopicPartition::new("cmp", 0),
        compact_config(),
        params,
    )
    .unwrap()
    .0
}

/// A batch of keyed records; with `producer` (id, epoch, base sequence, transactional),
/// as that producer sends it.
fn keyed(producer: Option<(i64, i16, i32, bool)>, recs: &[(&str, &str)]) -> Vec<u8> {
    let mut b = weir_record::BatchBuilder::new(Compression::None, 0, usize::MAX);
    if let Some((pid, epoch, seq, transactional)) = producer {
        b = b.producer(pid, epoch, seq).transactional(transactional);
    }
    for (k, v) in recs {
        b.append(NOW, Some(k.as_bytes()), Some(v.as_bytes()), &[])
            .unwrap();
    }
    b.build().unwrap().bytes
}

/// Appends `bytes` as the leader; the first offset it got.
fn append(log: &mut PartitionLog, bytes: Vec<u8>) -> i64 {
    log.append_as_leader(bytes, 0, NOW, AppendOrigin::Client)
        .unwrap()
        .first_offset
}

/// Appends a COMMIT or ABORT marker of `pid` at `epoch`; its offset.
fn end_txn(log: &mut PartitionLog, pid: i64, epoch: i16, kind: ControlRecordType) -> i64 {
    let marker = EndTransactionMarker {
        kind,
        coordinator_epoch: 0,
    };
    log.append_end_txn_marker(pid, epoch, marker, 0, NOW)
        .unwrap()
        .first_offset
}

#[test]
fn aborted_transactions_never_win_a_key_and_nothing_past_the_stable_offset_is_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("cmp-0");
    let mut log = new_log(&pdir);
    let txn = |pid| Some((pid, 0, 0, true));
    let end = |log: &mut PartitionLog, pid, kind| end_txn(log, pid, 0, kind);
    let filler = "x".repeat(60);
    append(&mut log, keyed(None, &[("k1", "v1"), ("k2", "v2")])); // 0, 1
    append(
        &mut log,
        keyed(txn(7), &[("k1", "aborted"), ("k3", "aborted-only")]),
    ); // 2, 3
    let abort_at = end(&mut log, 7, ControlRecordType::Abort); // 4
    append(&mut log, keyed(txn(8), &[("k2", "committed")])); // 5
    let commit_at = end(&mut log, 8, ControlRecordType::Commit); // 6
    for i in 0..40 {
        append(&mut log, keyed(None, &[(&format!("f{}", i % 5), &filler)]));
    }
    // A transaction still open, and records after it: none of this may be cleaned yet.
    let open = append(&mut log, keyed(txn(9), &[("k1", "open")]));
    for i in 0..20 {
        append(&mut log, keyed(None, &[(&format!("f{}", i % 5), &filler)]));
    }
    log.roll(None, NOW).unwrap();
    assert_eq!(log.last_stable_offset(), open);
    let before = read_all(&log);
    let c = cleaner::cleanability(&mut log, None, NOW);
    assert!(c.first_uncleanable_offset <= open, "{c:?}");
    let log = Mutex::new(log);
    let mut map = OffsetMap::new(1 << 20);
    let cleaned_to = pass(&log, None, NOW, &mut map);
    assert!(cleaned_to <= open && cleaned_to > commit_at, "{cleaned_to}");
    let log = log.into_inner().unwrap();
    let kept = read_all(&log);
    let values = |key: &str| -> Vec<String> {
        kept.iter()
            .filter(|r| r.key.as_deref() == Some(key.as_bytes()))
            .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
            .collect()
    };
    // The aborted value of k1 did not replace v1; the open transaction's is untouched.
    assert_eq!(values("k1"), ["v1", "open"]);
    assert_eq!(values("k2"), ["committed"]);
    assert!(
        values("k3").is_empty(),
        "an aborted transaction's records go"
    );
    // The markers stay, and so does the index entry of the aborted transaction.
    for at in [abort_at, commit_at] {
        assert!(kept.iter().any(|r| r.offset == at), "marker at {at}");
    }
    assert_eq!(
        log.collect_aborted_transactions(0, log.log_end_offset())
            .iter()
            .map(|t| (t.producer_id, t.first_offset, t.last_offset))
            .collect::<Vec<_>>(),
        vec![(7, 2, abort_at)]
    );
    // From the open transaction on, every record is still there.
    let tail =
        |recs: &[Rec]| -> Vec<Rec> { recs.iter().filter(|r| r.offset >= open).cloned().collect() };
    assert_eq!(tail(&kept), tail(&before));
    assert!(kept.len() < before.len(), "the pass removed something");

    // While the partition still knows pid 7, its last batch stays (emptied: an aborted
    // transaction's records are gone), and with it the ABORT marker and its index entry,
    // as Kafka's cleaner keeps them.
    let log = Mutex::new(log);
    pass(&log, None, NOW, &mut map);
    let mut log = log.into_inner().unwrap();
    assert_eq!(log.collect_aborted_transactions(0, open).len(), 1);
    let pid7_data = |log: &PartitionLog| {
        batches(log)
            .into_iter()
            .filter(|b| b.2 == 7 && b.0 != abort_at)
            .count()
    };
    assert_eq!(pid7_data(&log), 1, "pid 7's last batch, emptied");
    // Once pid 7 has expired (and pid 8 with it; pid 9's transaction is open), a pass
    // drops that batch; the one after finds nothing left of pid 7's transaction: its
    // ABORT marker gets a delete horizon and loses its index entry; pid 8's COMMIT stays
    // (its record does).
    assert_eq!(log.remove_expired_producers(NOW + 1, 0), 2);
    let log = Mutex::new(log);
    pass(&log, None, NOW, &mut map);
    let log = log.into_inner().unwrap();
    assert_eq!(pid7_data(&log), 0);
    let log = Mutex::new(log);
    pass(&log, None, NOW, &mut map);
    let log = log.into_inner().unwrap();
    assert!(log.collect_aborted_transactions(0, open).is_empty());
    assert!(
        read_all(&log).iter().any(|r| r.offset == abort_at),
        "kept until its horizon"
    );
    let later = NOW + 60_001;
    let log = Mutex::new(log);
    pass(&log, None, later, &mut map);
    let log = log.into_inner().unwrap();
    let kept = read_all(&log);
    assert!(
        !kept.iter().any(|r| r.offset == abort_at),
        "gone after its horizon"
    );
    assert!(kept.iter().any(|r| r.offset == commit_at));
    let k1: Vec<&[u8]> = kept
        .iter()
        .filter(|r| r.key.as_deref() == Some(&b"k1"[..]))
        .map(|r| r.value.as_deref().unwrap())
        .collect();
    assert_eq!(k1, [&b"v1"[..], &b"open"[..]]);
    assert_eq!(tail(&kept), tail(&before));
    // What is left reloads to the same state: no transaction open but pid 9's.
    let leo = log.log_end_offset();
    drop(log);
    let log = reopen(&pdir, later);
    assert_eq!(read_all(&log), kept);
    assert_eq!(
        (log.log_end_offset(), log.last_stable_offset()),
        (leo, open)
    );
}

/// The batches of the whole log: (base offset, last offset, producer id, producer epoch,
/// base sequence, record count).
fn batches(log: &PartitionLog) -> Vec<(i64, i64, i64, i16, i32, i32)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let data = log.read(offset, 64 * 1024, i64::MAX, true).unwrap();
        let bytes = data.slice.unwrap().read_to_vec().unwrap();
        for item in weir_record::LogEntries::new(&bytes) {
            let Ok((_, weir_record::LogEntry::V2(b))) = item else {
                break;
            };
            if b.last_offset() >= offset {
                out.push((
                    b.base_offset(),
                    b.last_offset(),
                    b.producer_id(),
                    b.producer_epoch(),
                    b.base_sequence(),
                    b.records_count(),
                ));
            }
        }
        offset = out.last().map_or(offset, |b| b.1 + 1);
    }
    out
}

/// Removes the producer-state snapshots of the log in `pdir`, as if none had survived.
fn remove_snapshots(pdir: &std::path::Path) {
    for f in std::fs::read_dir(pdir).unwrap() {
        let path = f.unwrap().path();
        if path.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(path).unwrap();
        }
    }
}

#[test]
fn a_producer_s_last_batch_survives_compaction_so_its_sequence_does() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("cmp-0");
    let mut log = new_log(&pdir);
    let idempotent = |seq| Some((5, 3, seq, false));
    // An idempotent producer writes two batches (sequences 0-1 and 2-3), then goes quiet;
    // later records, from no producer, replace every key it wrote.
    append(&mut log, keyed(idempotent(0), &[("a", "1"), ("b", "1")])); // 0, 1
    let last = append(&mut log, keyed(idempotent(2), &[("a", "2"), ("c", "2")])); // 2, 3
    let filler = "x".repeat(60);
    for i in 0..40 {
        let v = format!("{i}{filler}");
        append(&mut log, keyed(None, &[("a", &v), ("b", &v), ("c", &v)]));
    }
    log.roll(None, NOW).unwrap();
    let log = Mutex::new(log);
    let mut map = OffsetMap::new(1 << 20);
    assert!(pass(&log, None, NOW, &mut map) > last + 1);
    let log = log.into_inner().unwrap();
    // None of pid 5's records survive, but its last batch does, empty, with the producer
    // fields that carry its sequence; its first batch is gone.
    let mine: Vec<_> = batches(&log).into_iter().filter(|b| b.2 == 5).collect();
    assert_eq!(mine, vec![(last, last + 1, 5, 3, 2, 0)]);
    assert!(!read_all(&log).iter().any(|r| r.offset <= last + 1));

    // A broker that rebuilds producer state from the log alone (no snapshot survived)
    // still knows pid 5's last sequence, so a retry of that batch is a duplicate.
    drop(log);
    remove_snapshots(&pdir);
    let log = reopen(&pdir, NOW);
    let entry = &log.producer_state().producers()[&5];
    assert_eq!((entry.producer_epoch, entry.last_seq()), (3, Some(3)));
}

#[test]
fn the_marker_that_bumped_a_producer_s_epoch_outlives_its_delete_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("cmp-0");
    let mut log = new_log(&pdir);
    // pid 11 commits a transaction at epoch 0, then its next one is aborted at epoch 1
    // (a fenced producer's transaction, KIP-890), which leaves it no data batch of its
    // current epoch: the ABORT marker is its last entry. Later records replace its keys.
    append(
        &mut log,
        keyed(Some((11, 0, 0, true)), &[("m", "committed")]),
    );
    let commit_at = end_txn(&mut log, 11, 0, ControlRecordType::Commit);
    append(&mut log, keyed(Some((11, 0, 1, true)), &[("m", "aborted")]));
    let abort_at = end_txn(&mut log, 11, 1, ControlRecordType::Abort);
    let filler = "x".repeat(60);
    for i in 0..40 {
        append(&mut log, keyed(None, &[("m", &format!("{i}{filler}"))]));
    }
    log.roll(None, NOW).unwrap();
    let log = Mutex::new(log);
    let mut map = OffsetMap::new(1 << 20);
    // The first pass drops both transactions' records; the next gives both markers a
    // delete horizon; one after it removes the COMMIT, which is no producer's last entry.
    for now in [NOW, NOW, NOW + 60_001] {
        pass(&log, None, now, &mut map);
    }
    let log = log.into_inner().unwrap();
    let markers: Vec<i64> = batches(&log)
        .into_iter()
        .filter(|b| b.2 == 11)
        .map(|b| b.0)
        .collect();
    assert_eq!(markers, vec![abort_at], "COMMIT at {commit_at} gone");
    // Rebuilt from the log alone, pid 11 is still at epoch 1, so epoch 0 stays fenced.
    drop(log);
    remove_snapshots(&pdir);
    let log = reopen(&pdir, NOW + 60_001);
    assert_eq!(log.producer_state().producers()[&11].producer_epoch, 1);
}
