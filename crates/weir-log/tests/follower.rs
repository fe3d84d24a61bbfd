//! A replica that follows: it takes the leader's batches byte for byte (their offsets,
//! leader epochs and producers), keeps its high watermark where the leader says, and
//! truncates where its log diverged from the leader's.

mod common;

use common::*;
use weir_kafka::TopicPartition;
use weir_log::{AppendOrigin, PartitionLog};
use weir_record::Compression;

fn new_log(dir: &std::path::Path, name: &str) -> PartitionLog {
    PartitionLog::create(
        &dir.join(name),
        TopicPartition::new("t", 0),
        uuid::Uuid::new_v4(),
        small_config(),
        NOW,
    )
    .unwrap()
}

/// Every whole batch the leader holds from `offset` on, as a follower's fetch reads them.
fn leader_bytes(leader: &PartitionLog, offset: i64) -> Vec<u8> {
    let data = leader
        .read(offset, usize::MAX >> 1, leader.log_end_offset(), true)
        .unwrap();
    data.slice
        .map(|s| s.read_to_vec().unwrap())
        .unwrap_or_default()
}

#[test]
fn a_follower_holds_the_leader_s_batches_byte_for_byte_and_its_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let mut leader = new_log(dir.path(), "leader");
    let mut follower = new_log(dir.path(), "follower");
    leader.set_replicated(None);
    follower.set_replicated(None);
    for (i, epoch) in [(0, 0), (1, 0), (2, 3), (3, 5)] {
        leader
            .append_as_leader(
                simple_batch(Compression::ALL[i % 5], 10, &format!("b{i}"), NOW),
                epoch,
                NOW,
                AppendOrigin::Client,
            )
            .unwrap();
    }
    assert_eq!(leader.high_watermark(), 0, "replicated: appends leave it");
    // The follower fetches in two goes.
    let bytes = leader_bytes(&leader, 0);
    let first_two = {
        let d = leader.read(0, 1, leader.log_end_offset(), true).unwrap();
        d.slice.unwrap().read_to_vec().unwrap()
    };
    let a = follower.append_as_follower(&first_two, NOW).unwrap();
    assert_eq!((a.first_offset, a.batches), (0, 1));
    let rest = leader_bytes(&leader, follower.log_end_offset());
    follower.append_as_follower(&rest, NOW).unwrap();
    assert_eq!(follower.log_end_offset(), 40);
    assert_eq!(leader_bytes(&follower, 0), bytes, "byte for byte");
    assert_eq!(
        follower.leader_epochs().entries(),
        leader.leader_epochs().entries()
    );
    assert_eq!(read_all(&follower), read_all(&leader));
    // A batch below the log end is refused, and so is a bad CRC.
    assert!(follower.append_as_follower(&first_two, NOW).is_err());
    let mut bad = leader_bytes(&leader, 30);
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let mut copy = new_log(dir.path(), "copy");
    copy.set_replicated(None);
    copy.append_as_follower(&leader_bytes(&leader, 0)[..first_two.len()], NOW)
        .unwrap();
    let e = copy.append_as_follower(&bad, NOW).unwrap_err();
    assert!(e.to_string().contains("from the leader"), "{e}");
    assert_eq!(copy.log_end_offset(), 10, "nothing of it appended");
    // The high watermark moves only when told, and never past the log end.
    assert!(follower.advance_high_watermark(25));
    assert!(!follower.advance_high_watermark(20));
    assert!(follower.advance_high_watermark(99));
    assert_eq!(follower.high_watermark(), 40);
}

#[test]
fn a_diverged_follower_truncates_to_where_the_epochs_agree() {
    let dir = tempfile::tempdir().unwrap();
    let mut leader = new_log(dir.path(), "leader");
    let mut follower = new_log(dir.path(), "follower");
    follower.set_replicated(None);
    leader.set_replicated(None);
    let b = |i: usize| simple_batch(Compression::None, 5, &format!("b{i}"), NOW);
    // Both hold epoch 0's 10 records; the follower, once leader at epoch 1, also took 5
    // records the new leader (epoch 2) never saw.
    leader
        .append_as_leader(b(0), 0, NOW, AppendOrigin::Client)
        .unwrap();
    leader
        .append_as_leader(b(1), 0, NOW, AppendOrigin::Client)
        .unwrap();
    follower
        .append_as_follower(&leader_bytes(&leader, 0), NOW)
        .unwrap();
    follower.assign_leader_epoch(1).unwrap();
    follower
        .append_as_leader(b(9), 1, NOW, AppendOrigin::Client)
        .unwrap();
    leader.assign_leader_epoch(2).unwrap();
    leader
        .append_as_leader(b(2), 2, NOW, AppendOrigin::Client)
        .unwrap();
    // The leader answers the follower's last epoch (1) with where its epoch ≤ 1 ended.
    let (epoch, end) = leader
        .leader_epochs()
        .end_offset_for(1, leader.log_end_offset());
    assert_eq!((epoch, end), (0, 10));
    follower.truncate_to(end, NOW).unwrap();
    assert_eq!(follower.log_end_offset(), 10);
    follower
        .append_as_follower(&leader_bytes(&leader, 10), NOW)
        .unwrap();
    assert_eq!(read_all(&follower), read_all(&leader));
    assert_eq!(
        follower.leader_epochs().entries(),
        leader.leader_epochs().entries()
    );
}

#[test]
fn an_epoch_led_without_a_batch_goes_when_the_follower_truncates_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut follower = new_log(dir.path(), "follower");
    follower.set_replicated(None);
    follower
        .append_as_leader(
            simple_batch(Compression::None, 5, "b", NOW),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    // It led at epoch 1 without appending anything, then another replica led at 2.
    follower.assign_leader_epoch(1).unwrap();
    assert_eq!(follower.leader_epochs().latest_epoch(), Some(1));
    // The new leader has no epoch 1: where epoch 0 ended, which is this log's end.
    follower.truncate_to(5, NOW).unwrap();
    assert_eq!(follower.log_end_offset(), 5);
    assert_eq!(
        follower.leader_epochs().latest_epoch(),
        Some(0),
        "the empty epoch is gone, so the next fetch names epoch 0"
    );
}
