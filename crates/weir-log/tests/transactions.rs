//! Transactions in the log, on real files: transactional batches open a transaction per
//! producer, COMMIT/ABORT markers close it, the last stable offset waits for the oldest
//! open one, and ABORT markers fill the segments' `.txnindex` files (Kafka's 34-byte
//! entries, read back here byte by byte, not through weir-log's reader). All of it comes
//! back after a crash that lost every `.txnindex`, after a clean restart, and after a
//! truncation through a marker.

mod common;

use std::path::Path;

use common::*;
use weir_kafka::TopicPartition;
use weir_log::txn_index::AbortedTxn;
use weir_log::{AppendOrigin, LoadParams, LogError, PartitionLog};
use weir_record::{BatchBuilder, Compression, ControlRecordType, EndTransactionMarker};

fn txn_batch(pid: i64, seq: i32, n: usize, prefix: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, 0, usize::MAX)
        .producer(pid, 0, seq)
        .transactional(true);
    for i in 0..n {
        let v = format!("{prefix}-{i}");
        b.append(NOW + i as i64, None, Some(v.as_bytes()), &[])
            .unwrap();
    }
    b.build().unwrap().bytes
}

fn marker(kind: ControlRecordType, coordinator_epoch: i32) -> EndTransactionMarker {
    EndTransactionMarker {
        kind,
        coordinator_epoch,
    }
}

fn open(pdir: &Path, clean: bool) -> PartitionLog {
    let params = LoadParams {
        recovery_point: Some(0),
        log_start_offset: None,
        had_clean_shutdown: clean,
        now_ms: NOW,
    };
    PartitionLog::open(pdir, TopicPartition::new("t", 0), small_config(), params)
        .unwrap()
        .0
}

/// Every `.txnindex` entry of the partition, decoded here from the bytes as Kafka lays
/// them out: i16 version 0, then producer id, first offset, last offset and last stable
/// offset, each an i64, big-endian.
fn txnindex_on_disk(pdir: &Path) -> Vec<AbortedTxn> {
    let mut files: Vec<_> = std::fs::read_dir(pdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txnindex"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        assert_eq!(bytes.len() % 34, 0, "{}", f.display());
        for e in bytes.chunks(34) {
            assert_eq!(&e[0..2], &[0, 0], "version 0");
            let at = |i: usize| i64::from_be_bytes(e[i..i + 8].try_into().unwrap());
            out.push(AbortedTxn {
                producer_id: at(2),
                first_offset: at(10),
                last_offset: at(18),
                last_stable_offset: at(26),
            });
        }
    }
    out
}

#[test]
fn markers_close_transactions_and_aborts_are_indexed_through_crashes() {
    use ControlRecordType::{Abort, Commit};
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("t-0");
    let mut log = PartitionLog::create(
        &pdir,
        TopicPartition::new("t", 0),
        uuid::Uuid::new_v4(),
        small_config(),
        NOW,
    )
    .unwrap();
    let append = |log: &mut PartitionLog, bytes: Vec<u8>| {
        log.append_as_leader(bytes, 0, NOW, AppendOrigin::Client)
            .unwrap()
    };
    assert_eq!(append(&mut log, txn_batch(1, 0, 5, "a")).first_offset, 0); // 0..=4
    assert_eq!(append(&mut log, txn_batch(2, 0, 3, "b")).first_offset, 5); // 5..=7
    assert_eq!(append(&mut log, txn_batch(1, 5, 2, "a")).first_offset, 8); // 8..=9
    assert_eq!(log.high_watermark(), 10);
    assert_eq!(log.last_stable_offset(), 0, "pid 1's transaction is open");
    // A producer with a transaction open may not write outside it.
    let plain = BatchBuilder::new(Compression::None, 0, usize::MAX).producer(1, 0, 7);
    let mut plain = plain;
    plain.append(NOW, None, Some(b"x"), &[]).unwrap();
    assert!(matches!(
        log.append_as_leader(plain.build().unwrap().bytes, 0, NOW, AppendOrigin::Client),
        Err(LogError::InvalidTxnState(_))
    ));

    let info = log
        .append_end_txn_marker(1, 0, marker(Abort, 0), 0, NOW)
        .unwrap();
    assert_eq!(info.first_offset, 10);
    assert_eq!(log.last_stable_offset(), 5, "pid 2's transaction is open");
    let pid1 = AbortedTxn {
        producer_id: 1,
        first_offset: 0,
        last_offset: 10,
        last_stable_offset: 5,
    };
    assert_eq!(log.collect_aborted_transactions(0, 11), vec![pid1]);
    assert_eq!(log.collect_aborted_transactions(11, 20), vec![]);
    log.append_end_txn_marker(2, 0, marker(Commit, 0), 0, NOW)
        .unwrap();
    assert_eq!(log.last_stable_offset(), 12);

    // Twenty more transactions, every other one aborted, over several segments.
    let mut want = vec![pid1];
    for i in 0..20i64 {
        let pid = 10 + i;
        let first = append(&mut log, txn_batch(pid, 0, 3, "c")).first_offset;
        let kind = if i % 2 == 0 { Abort } else { Commit };
        let at = log
            .append_end_txn_marker(pid, 0, marker(kind, 5), 0, NOW)
            .unwrap()
            .first_offset;
        if kind == Abort {
            want.push(AbortedTxn {
                producer_id: pid,
                first_offset: first,
                last_offset: at,
                last_stable_offset: at + 1,
            });
        }
    }
    // An older coordinator is fenced.
    assert!(matches!(
        log.append_end_txn_marker(10, 0, marker(Abort, 4), 0, NOW),
        Err(LogError::TransactionCoordinatorFenced(_))
    ));
    assert!(log.num_segments() > 3, "{} segments", log.num_segments());
    let end = log.log_end_offset();
    assert_eq!(log.collect_aborted_transactions(0, end), want);
    assert_eq!(txnindex_on_disk(&pdir), want);
    // A transaction left open holds the stable offset back.
    let open_at = append(&mut log, txn_batch(99, 0, 2, "d")).first_offset;
    assert_eq!(log.last_stable_offset(), open_at);

    // A crash that lost every .txnindex: recovery rebuilds them from the markers.
    drop(log);
    for e in std::fs::read_dir(&pdir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "txnindex") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let mut log = open(&pdir, false);
    assert_eq!(log.collect_aborted_transactions(0, end), want);
    assert_eq!(txnindex_on_disk(&pdir), want);
    assert_eq!(
        log.last_stable_offset(),
        open_at,
        "the open transaction is known again"
    );

    // A clean restart keeps it all.
    log.close(NOW).unwrap();
    drop(log);
    let mut log = open(&pdir, true);
    assert_eq!(log.collect_aborted_transactions(0, end), want);
    assert_eq!(log.last_stable_offset(), open_at);
    log.append_end_txn_marker(99, 0, marker(Commit, 5), 0, NOW)
        .unwrap();
    assert_eq!(log.last_stable_offset(), log.log_end_offset());

    // Truncating through an ABORT marker drops its entry and opens its transaction again.
    let cut = want[5];
    log.truncate_to(cut.last_offset, NOW).unwrap();
    assert_eq!(
        log.collect_aborted_transactions(0, cut.last_offset),
        want[..5].to_vec()
    );
    assert_eq!(txnindex_on_disk(&pdir), want[..5].to_vec());
    assert_eq!(log.last_stable_offset(), cut.first_offset);
}

#[test]
fn an_abort_after_a_roll_is_found_from_the_segment_where_its_transaction_began() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("t-0");
    let mut log = PartitionLog::create(
        &pdir,
        TopicPartition::new("t", 0),
        uuid::Uuid::new_v4(),
        small_config(),
        NOW,
    )
    .unwrap();
    log.append_as_leader(txn_batch(5, 0, 3, "x"), 0, NOW, AppendOrigin::Client)
        .unwrap(); // 0..=2
    log.roll(None, NOW).unwrap();
    let at = log
        .append_end_txn_marker(5, 0, marker(ControlRecordType::Abort, 0), 0, NOW)
        .unwrap()
        .first_offset;
    assert_eq!(log.segment_bases(), vec![0, 3]);
    let want = vec![AbortedTxn {
        producer_id: 5,
        first_offset: 0,
        last_offset: at,
        last_stable_offset: at + 1,
    }];
    // A fetch of the first segment stops at its end; the entry lives in the next one.
    let data = log.read(0, 1 << 20, log.high_watermark(), true).unwrap();
    assert_eq!(data.segment_base, 0);
    assert_eq!(log.aborted_transactions_in(0, &data), want);
    assert_eq!(log.collect_aborted_transactions(0, 3), want);
}
