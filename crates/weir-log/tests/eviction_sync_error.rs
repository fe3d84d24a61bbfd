//! A segment file closed by the cache of open files is fsynced first when it holds writes
//! not yet flushed, and a failure of that fsync is handled as a failed flush is: the data
//! directory goes offline at once, and the partition's next flush reports the error.
//!
//! One test in this file: it makes the process's next fsync fail.

mod common;

use std::collections::HashMap;

use common::*;
use weir_kafka::TopicPartition;
use weir_log::{durable, is_disk_failure, AppendOrigin, LogManager, LogManagerConfig};
use weir_record::Compression;

#[test]
fn a_failed_fsync_before_closing_a_file_takes_its_directory_offline() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut cfg = LogManagerConfig::new(&data);
    cfg.default_config = small_config();
    cfg.max_open_segment_files = 1;
    let (m, _) = LogManager::open(cfg, &HashMap::new()).unwrap();
    let append = |tp: &TopicPartition, tag: &str| {
        m.log(tp).unwrap().lock().unwrap().append_as_leader(
            simple_batch(Compression::None, 2, tag, NOW),
            0,
            NOW,
            AppendOrigin::Client,
        )
    };
    let (a, b) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
    for tp in [&a, &b] {
        m.get_or_create_log(tp, uuid::Uuid::new_v4(), small_config())
            .unwrap();
    }
    // The one open file is a's, with records not yet flushed.
    append(&a, "unflushed").unwrap();
    assert_eq!(m.log(&a).unwrap().lock().unwrap().open_segment_files(), 1);
    // Writing to b closes a's file; its fsync fails, as on a disk going bad.
    durable::fail_sync_after(Some(1));
    append(&b, "other").unwrap();
    durable::fail_sync_after(None);
    assert_eq!(m.log(&a).unwrap().lock().unwrap().open_segment_files(), 0);
    assert_eq!(m.offline_dirs(), vec![data], "the directory goes offline");
    // a's next flush reports the error, as a flush of a file never closed would have.
    let err = m.log(&a).unwrap().lock().unwrap().flush(NOW).unwrap_err();
    assert!(is_disk_failure(&err), "{err}");
    // The failed flush did not move the recovery point: those records may not be on disk.
    assert_eq!(m.log(&a).unwrap().lock().unwrap().recovery_point(), 0);
}
