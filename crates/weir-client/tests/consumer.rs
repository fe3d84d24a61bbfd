//! The consumer against a real broker: every record exactly once in offset order in every
//! codec; groups split partitions without overlap (range and cooperative-sticky, the latter
//! moving only what must move) and hand everything to the survivor; commits resume where
//! they left off; the KIP-848 consumer protocol (the coordinator assigns, members hand
//! partitions over committed, a member that stops polling loses them); seeks, resets and
//! offset lookups; the assignors against Kafka's results; and a long poll loop that keeps up
//! with a producer.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::JoinHandle;
use weir_client::consumer::{
    CooperativeStickyAssignor, MemberSubscription, PartitionAssignor, RangeAssignor,
    RoundRobinAssignor,
};
use weir_client::{
    ClientError, Consumer, ConsumerRecord, OffsetAndMetadata, Producer, ProducerRecord,
    RebalanceContext, RebalanceListener, TimestampType, TopicPartition,
};

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

fn consumer(bootstrap: &str, extra: &[(&str, &str)]) -> Consumer {
    let mut props = vec![
        ("bootstrap.servers", bootstrap),
        ("fetch.max.wait.ms", "100"),
        ("heartbeat.interval.ms", "100"),
        ("session.timeout.ms", "6000"),
        ("default.api.timeout.ms", "10000"),
    ];
    props.extend_from_slice(extra);
    Consumer::from_properties(props).unwrap()
}

/// Polls until `n` records arrived (or `limit` passed).
async fn poll_n(c: &mut Consumer, n: usize, limit: Duration) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        out.extend(c.poll(Duration::from_millis(100)).await.unwrap());
    }
    out
}

async fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Produces `n` records to one partition; values "v<i>", keys "k<i>".
async fn produce(bootstrap: &str, topic: &str, partition: i32, n: usize) {
    let p =
        Producer::from_properties([("bootstrap.servers", bootstrap), ("linger.ms", "2")]).unwrap();
    let mut futures = Vec::new();
    for i in 0..n {
        let rec = ProducerRecord::new(topic)
            .partition(partition)
            .key(format!("k{i}"))
            .value(format!("v{i}"));
        futures.push(p.send(rec).await.unwrap());
    }
    for f in futures {
        f.await.unwrap();
    }
    p.close(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assign_and_poll_every_codec_exactly_once_in_order() {
    let mut b = common::broker(&[("num.partitions", "3")]).await;
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("c-{codec}");
        let p = Producer::from_properties([
            ("bootstrap.servers", b.bootstrap.as_str()),
            ("compression.type", codec),
            ("linger.ms", "5"),
        ])
        .unwrap();
        let mut futures = Vec::new();
        let mut sent = Vec::new();
        for i in 0..2000u32 {
            let mut rec = ProducerRecord::new(topic.as_str()).value(format!("{codec}-{i}"));
            if i % 7 != 0 {
                rec = rec.key(format!("key-{}", i % 40));
            }
            if i % 11 == 0 {
                rec.value = None; // a tombstone
            }
            rec = rec
                .header("n", Some(i.to_string()))
                .header("null", None::<Bytes>)
                .header("bin", Some(Bytes::from(vec![0xff, i as u8])));
            sent.push(rec.clone());
            futures.push(p.send(rec).await.unwrap());
        }
        let mut expected: HashMap<(i32, i64), ProducerRecord> = HashMap::new();
        for (f, rec) in futures.into_iter().zip(sent) {
            let m = f.await.unwrap();
            expected.insert((m.partition, m.offset), rec);
        }
        p.close(Duration::from_secs(5)).await.unwrap();

        let mut c = consumer(&b.bootstrap, &[("max.poll.records", "300")]);
        let parts = c.partitions_for(&topic).await.unwrap();
        assert_eq!(parts.len(), 3);
        c.assign(parts.clone()).unwrap();
        c.seek_to_beginning(&[]).unwrap();
        let got = poll_n(&mut c, 2000, Duration::from_secs(30)).await;
        assert_eq!(got.len(), 2000, "{codec}: every record");
        let mut last: HashMap<i32, i64> = HashMap::new();
        for r in &got {
            let prev = last.insert(r.partition, r.offset);
            assert_eq!(
                r.offset,
                prev.map_or(0, |o| o + 1),
                "{codec}: offset order, no gaps"
            );
            let rec = &expected[&(r.partition, r.offset)];
            assert_eq!(&*r.topic, topic);
            assert_eq!(r.key, rec.key, "{codec}: key");
            assert_eq!(r.value, rec.value, "{codec}: value");
            assert_eq!(r.headers, rec.headers, "{codec}: headers");
            assert_eq!(r.timestamp_type, TimestampType::CreateTime);
            assert!(r.timestamp > 0);
        }
        assert!(c.poll(Duration::from_millis(200)).await.unwrap().is_empty());
        for p in &parts {
            assert_eq!(c.position(p).await.unwrap(), last[&p.partition] + 1);
        }
        c.close().await.unwrap();
    }
    b.stop().await;
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Revoked(BTreeSet<TopicPartition>),
    Assigned(BTreeSet<TopicPartition>),
    Lost(BTreeSet<TopicPartition>),
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Call>>>);

impl Recorder {
    fn calls(&self) -> Vec<Call> {
        self.0.lock().unwrap().clone()
    }
}

impl RebalanceListener for Recorder {
    fn on_partitions_revoked(&mut self, _: &mut RebalanceContext<'_>, p: &[TopicPartition]) {
        self.0
            .lock()
            .unwrap()
            .push(Call::Revoked(p.iter().cloned().collect()));
    }
    fn on_partitions_assigned(&mut self, _: &mut RebalanceContext<'_>, p: &[TopicPartition]) {
        self.0
            .lock()
            .unwrap()
            .push(Call::Assigned(p.iter().cloned().collect()));
    }
    fn on_partitions_lost(&mut self, _: &mut RebalanceContext<'_>, p: &[TopicPartition]) {
        self.0
            .lock()
            .unwrap()
            .push(Call::Lost(p.iter().cloned().collect()));
    }
}

/// A group member polling in a task of its own, publishing its assignment and the
/// records it got.
struct Member {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Consumer>,
    assignment: Arc<Mutex<BTreeSet<TopicPartition>>>,
    member_id: Arc<Mutex<String>>,
    calls: Recorder,
    records: Arc<Mutex<Vec<(TopicPartition, i64)>>>,
}

impl Member {
    fn start(mut c: Consumer, topic: &str) -> Member {
        let calls = Recorder::default();
        c.subscribe([topic], Some(Box::new(calls.clone()))).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let assignment = Arc::new(Mutex::new(BTreeSet::new()));
        let member_id = Arc::new(Mutex::new(String::new()));
        let records = Arc::new(Mutex::new(Vec::new()));
        let task = {
            let (stop, assignment, member_id, records) = (
                stop.clone(),
                assignment.clone(),
                member_id.clone(),
                records.clone(),
            );
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let got = c.poll(Duration::from_millis(50)).await.unwrap();
                    records.lock().unwrap().extend(
                        got.into_iter()
                            .map(|r| (TopicPartition::new(&*r.topic, r.partition), r.offset)),
                    );
                    *assignment.lock().unwrap() = c.assignment();
                    if let Some((id, _)) = c.group_member() {
                        *member_id.lock().unwrap() = id;
                    }
                }
                c
            })
        };
        Member {
            stop,
            task,
            assignment,
            member_id,
            calls,
            records,
        }
    }

    fn records(&self) -> Vec<(TopicPartition, i64)> {
        self.records.lock().unwrap().clone()
    }

    fn assignment(&self) -> BTreeSet<TopicPartition> {
        self.assignment.lock().unwrap().clone()
    }

    async fn stop(self) -> (Consumer, Recorder) {
        self.stop.store(true, Ordering::SeqCst);
        (self.task.await.unwrap(), self.calls)
    }
}

fn all(topic: &str, n: i32) -> BTreeSet<TopicPartition> {
    (0..n).map(|p| tp(topic, p)).collect()
}

/// Waits until the members' assignments are disjoint and cover every partition.
async fn wait_for_split(members: &[&Member], expected: &BTreeSet<TopicPartition>) {
    wait_until(
        Duration::from_secs(20),
        "a complete, disjoint assignment",
        || {
            let sets: Vec<BTreeSet<TopicPartition>> =
                members.iter().map(|m| m.assignment()).collect();
            let total: usize = sets.iter().map(BTreeSet::len).sum();
            let union: BTreeSet<TopicPartition> = sets.iter().flatten().cloned().collect();
            sets.iter().all(|s| !s.is_empty()) && total == expected.len() && &union == expected
        },
    )
    .await;
}

async fn group_topic(b: &common::TestBroker, topic: &str) {
    // Creates the 4-partition topic.
    produce(&b.bootstrap, topic, 0, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_splits_the_partitions_and_the_survivor_takes_all() {
    let mut b = common::broker(&[("num.partitions", "4")]).await;
    group_topic(&b, "range-t").await;
    let opts = [
        ("group.id", "range-g"),
        ("partition.assignment.strategy", "range"),
    ];
    let mut first = opts.to_vec();
    first.push(("client.id", "a"));
    let mut second = opts.to_vec();
    second.push(("client.id", "b"));
    let a = Member::start(consumer(&b.bootstrap, &first), "range-t");
    wait_until(
        Duration::from_secs(20),
        "the first member's assignment",
        || a.assignment() == all("range-t", 4),
    )
    .await;
    let bm = Member::start(consumer(&b.bootstrap, &second), "range-t");
    wait_for_split(&[&a, &bm], &all("range-t", 4)).await;
    // Range by member id: "a-..." sorts before "b-...", so it takes the first half.
    assert!(a.member_id.lock().unwrap().as_str() < bm.member_id.lock().unwrap().as_str());
    assert_eq!(a.assignment(), [tp("range-t", 0), tp("range-t", 1)].into());
    assert_eq!(bm.assignment(), [tp("range-t", 2), tp("range-t", 3)].into());
    // Eager: the first member revoked everything before the split.
    let (ca, calls_a) = a.stop().await;
    assert!(calls_a.calls().contains(&Call::Revoked(all("range-t", 4))));
    ca.close().await.unwrap();
    wait_until(
        Duration::from_secs(20),
        "the survivor to take every partition",
        || bm.assignment() == all("range-t", 4),
    )
    .await;
    let (cb, calls_b) = bm.stop().await;
    let calls_b = calls_b.calls();
    assert_eq!(
        calls_b.last(),
        Some(&Call::Assigned(all("range-t", 4))),
        "{calls_b:?}"
    );
    cb.close().await.unwrap();
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_moves_only_what_must_move() {
    let mut b = common::broker(&[("num.partitions", "4")]).await;
    group_topic(&b, "coop-t").await;
    let opts = [
        ("group.id", "coop-g"),
        ("partition.assignment.strategy", "cooperative-sticky"),
    ];
    let a = Member::start(consumer(&b.bootstrap, &opts), "coop-t");
    wait_until(
        Duration::from_secs(20),
        "the first member's assignment",
        || a.assignment() == all("coop-t", 4),
    )
    .await;
    let bm = Member::start(consumer(&b.bootstrap, &opts), "coop-t");
    wait_for_split(&[&a, &bm], &all("coop-t", 4)).await;
    let kept = a.assignment();
    let moved = bm.assignment();
    assert_eq!((kept.len(), moved.len()), (2, 2), "balanced");
    // The staying member revoked exactly the partitions that moved, never everything.
    let calls_a = a.calls.calls();
    let revoked: Vec<&BTreeSet<TopicPartition>> = calls_a
        .iter()
        .filter_map(|c| match c {
            Call::Revoked(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(revoked, vec![&moved], "{calls_a:?}");
    assert!(!calls_a.iter().any(|c| matches!(c, Call::Lost(_))));
    assert_eq!(calls_a.first(), Some(&Call::Assigned(all("coop-t", 4))));
    // The newcomer got them only in the second rebalance, after the revocation.
    let calls_b = bm.calls.calls();
    assert_eq!(
        calls_b.last(),
        Some(&Call::Assigned(moved.clone())),
        "{calls_b:?}"
    );

    // The newcomer leaves: the stayer keeps its two and gains two, revoking nothing.
    let (cb, _) = bm.stop().await;
    cb.close().await.unwrap();
    wait_until(
        Duration::from_secs(20),
        "the survivor to take every partition",
        || a.assignment() == all("coop-t", 4),
    )
    .await;
    let (ca, calls_a) = a.stop().await;
    let calls_a = calls_a.calls();
    assert_eq!(calls_a.last(), Some(&Call::Assigned(moved)), "{calls_a:?}");
    assert_eq!(
        calls_a
            .iter()
            .filter(|c| matches!(c, Call::Revoked(_)))
            .count(),
        1,
        "{calls_a:?}"
    );
    ca.close().await.unwrap();
    b.stop().await;
}

/// A consumer of the KIP-848 protocol: the coordinator decides the session and heartbeat
/// (the test broker beats every 100 ms), so they are not set here.
fn kip848_consumer(bootstrap: &str, group: &str, extra: &[(&str, &str)]) -> Consumer {
    let mut props = vec![
        ("bootstrap.servers", bootstrap),
        ("group.id", group),
        ("group.protocol", "consumer"),
        ("auto.offset.reset", "earliest"),
        ("fetch.max.wait.ms", "100"),
        ("default.api.timeout.ms", "10000"),
    ];
    props.extend_from_slice(extra);
    Consumer::from_properties(props).unwrap()
}

fn revoked_by(calls: &[Call]) -> BTreeSet<TopicPartition> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Revoked(p) => Some(p.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_members_share_partitions_and_hand_them_over_committed() {
    let mut b = common::broker(&[
        ("num.partitions", "6"),
        ("group.consumer.heartbeat.interval.ms", "100"),
    ])
    .await;
    let topic = "kip848-t";
    for p in 0..6 {
        produce(&b.bootstrap, topic, p, 10).await;
    }
    let start = |id: &str| {
        Member::start(
            kip848_consumer(&b.bootstrap, "kip848-g", &[("client.id", id)]),
            topic,
        )
    };
    let a = start("a");
    wait_until(
        Duration::from_secs(20),
        "the first member's assignment",
        || a.assignment() == all(topic, 6),
    )
    .await;
    wait_until(
        Duration::from_secs(20),
        "the first member's records",
        || a.records().len() == 60,
    )
    .await;
    let bm = start("b");
    wait_for_split(&[&a, &bm], &all(topic, 6)).await;
    assert_eq!(
        (a.assignment().len(), bm.assignment().len()),
        (3, 3),
        "uniform"
    );
    let c = start("c");
    wait_for_split(&[&a, &bm, &c], &all(topic, 6)).await;
    let sizes: Vec<usize> = [&a, &bm, &c].iter().map(|m| m.assignment().len()).collect();
    assert_eq!(sizes, vec![2, 2, 2]);

    // A consumer of the classic protocol cannot join the group while it has members of the
    // consumer protocol.
    let mut classic = consumer(&b.bootstrap, &[("group.id", "kip848-g")]);
    classic.subscribe([topic], None).unwrap();
    let refused = async {
        loop {
            if let Err(e) = classic.poll(Duration::from_millis(100)).await {
                return e;
            }
        }
    };
    let e = tokio::time::timeout(Duration::from_secs(20), refused)
        .await
        .expect("the classic consumer is refused");
    assert_eq!(e.code(), Some(23), "INCONSISTENT_GROUP_PROTOCOL: {e}");
    classic.close().await.unwrap();

    // b leaves: its partitions go to the others, committed where it left them.
    let mut seen = bm.records();
    let (cb, calls_b) = bm.stop().await;
    cb.close().await.unwrap();
    wait_for_split(&[&a, &c], &all(topic, 6)).await;
    for p in 0..6 {
        produce(&b.bootstrap, topic, p, 1).await;
    }
    wait_until(Duration::from_secs(20), "the six new records", || {
        a.records().len() + c.records().len() == 60 + 6
    })
    .await;
    seen.extend(a.records());
    seen.extend(c.records());
    let (ca, calls_a) = a.stop().await;
    let (cc, calls_c) = c.stop().await;
    // Every record exactly once across the members, through three moves.
    seen.sort();
    let want: Vec<(TopicPartition, i64)> = (0..6)
        .flat_map(|p| (0..=10).map(move |o| (tp(topic, p), o)))
        .collect();
    assert_eq!(seen, want);
    // Nothing was lost (no fencing); a revoked only what moved away, and took nothing back
    // before it had been revoked.
    let (calls_a, calls_b, calls_c) = (calls_a.calls(), calls_b.calls(), calls_c.calls());
    for calls in [&calls_a, &calls_b, &calls_c] {
        assert!(
            !calls.iter().any(|c| matches!(c, Call::Lost(_))),
            "{calls:?}"
        );
    }
    assert_eq!(calls_a.first(), Some(&Call::Assigned(all(topic, 6))));
    assert_eq!(
        revoked_by(&calls_a).len(),
        4,
        "a gave up 3, then 1: {calls_a:?}"
    );
    ca.close().await.unwrap();
    cc.close().await.unwrap();
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_member_that_stops_polling_loses_its_partitions_and_rejoins() {
    let mut b = common::broker(&[
        ("num.partitions", "2"),
        ("group.consumer.heartbeat.interval.ms", "100"),
    ])
    .await;
    let topic = "kip848-stall";
    produce(&b.bootstrap, topic, 0, 1).await;
    let calls = Recorder::default();
    let mut slow = kip848_consumer(
        &b.bootstrap,
        "kip848-stall-g",
        &[("max.poll.interval.ms", "1500")],
    );
    slow.subscribe([topic], Some(Box::new(calls.clone())))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while slow.assignment() != all(topic, 2) {
        assert!(Instant::now() < deadline, "the first member's assignment");
        slow.poll(Duration::from_millis(50)).await.unwrap();
    }
    let other = Member::start(kip848_consumer(&b.bootstrap, "kip848-stall-g", &[]), topic);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(slow.assignment().len() == 1 && other.assignment().len() == 1) {
        assert!(Instant::now() < deadline, "a split of one and one");
        slow.poll(Duration::from_millis(50)).await.unwrap();
    }
    let kept = slow.assignment();
    // No poll for longer than max.poll.interval.ms: the member leaves, the other takes all.
    wait_until(
        Duration::from_secs(20),
        "the other member to take both",
        || other.assignment() == all(topic, 2),
    )
    .await;
    // The next poll gives the partition up as lost, then the member joins again.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(slow.assignment().len() == 1 && other.assignment().len() == 1) {
        assert!(Instant::now() < deadline, "the member back in the group");
        slow.poll(Duration::from_millis(50)).await.unwrap();
    }
    // Lost, never revoked: the member was out of the group when it gave the partition up.
    let calls = calls.calls();
    let lost = calls.iter().position(|c| *c == Call::Lost(kept.clone()));
    assert!(lost.is_some(), "{calls:?}");
    assert!(
        !calls.iter().any(|c| *c == Call::Revoked(kept.clone())),
        "{calls:?}"
    );
    let (co, _) = other.stop().await;
    co.close().await.unwrap();
    slow.close().await.unwrap();
    b.stop().await;
}

/// A transactional batch of `values` from producer `pid` (sequence from `seq`).
fn txn_batch(pid: i64, seq: i32, values: &[&str]) -> Vec<u8> {
    let mut b = weir_record::BatchBuilder::new(weir_record::Compression::None, 0, usize::MAX)
        .producer(pid, 0, seq)
        .transactional(true);
    for v in values {
        b.append(1_700_000_000_000, None, Some(v.as_bytes()), &[])
            .unwrap();
    }
    b.build().unwrap().bytes
}

async fn values_read(c: &mut Consumer, tp: &TopicPartition, until: i64) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    while c.position(tp).await.unwrap() < until {
        assert!(
            Instant::now() < deadline,
            "position {} of {until}",
            c.position(tp).await.unwrap()
        );
        for r in c.poll(Duration::from_millis(100)).await.unwrap() {
            out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_drops_aborted_transactions_and_stops_at_the_stable_offset() {
    use weir_record::{ControlRecordType, EndTransactionMarker};
    let mut b = common::broker(&[("num.partitions", "1")]).await;
    produce(&b.bootstrap, "rc", 0, 1).await; // offset 0: "v0"
    let tp = tp("rc", 0);
    {
        // What a transaction coordinator's markers leave in the log: producer 100 writes
        // 1..=3, producer 200 writes 4..=5, 100 aborts (6), 200 commits (7), and 300's
        // transaction at 8 stays open.
        let broker = &b.running.as_ref().unwrap().broker;
        let p = broker.partition("rc", 0).unwrap();
        let mut log = p.log.lock().unwrap();
        let now = weir_log::now_ms();
        let epoch = weir_broker::partition::SINGLE_NODE_LEADER_EPOCH;
        let client = weir_log::AppendOrigin::Client;
        for bytes in [
            txn_batch(100, 0, &["a-0", "a-1", "a-2"]),
            txn_batch(200, 0, &["b-0", "b-1"]),
        ] {
            log.append_as_leader(bytes, epoch, now, client).unwrap();
        }
        for (pid, kind) in [
            (100, ControlRecordType::Abort),
            (200, ControlRecordType::Commit),
        ] {
            let marker = EndTransactionMarker {
                kind,
                coordinator_epoch: 0,
            };
            log.append_end_txn_marker(pid, 0, marker, epoch, now)
                .unwrap();
        }
        log.append_as_leader(txn_batch(300, 0, &["c-0"]), epoch, now, client)
            .unwrap();
        assert_eq!((log.last_stable_offset(), log.high_watermark()), (8, 9));
        drop(log);
        p.appended.notify_waiters();
    }
    let committed = [("isolation.level", "read_committed")];
    let mut c = consumer(&b.bootstrap, &committed);
    c.assign([tp.clone()]).unwrap();
    c.seek_to_beginning(&[]).unwrap();
    // Up to the last stable offset: the committed records, not the aborted ones, and
    // nothing of the open transaction.
    assert_eq!(values_read(&mut c, &tp, 8).await, ["v0", "b-0", "b-1"]);
    assert!(c.poll(Duration::from_millis(300)).await.unwrap().is_empty());
    assert_eq!(c.position(&tp).await.unwrap(), 8);
    assert_eq!(
        c.end_offsets(std::slice::from_ref(&tp)).await.unwrap()[&tp],
        8
    );
    c.close().await.unwrap();

    // read_uncommitted shows that the aborted records did reach the log.
    let mut c = consumer(&b.bootstrap, &[]);
    c.assign([tp.clone()]).unwrap();
    c.seek_to_beginning(&[]).unwrap();
    assert_eq!(
        values_read(&mut c, &tp, 9).await,
        ["v0", "a-0", "a-1", "a-2", "b-0", "b-1", "c-0"]
    );
    assert_eq!(
        c.end_offsets(std::slice::from_ref(&tp)).await.unwrap()[&tp],
        9
    );
    c.close().await.unwrap();
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_resume_and_auto_commit_on_close() {
    let mut b = common::broker(&[("num.partitions", "1")]).await;
    produce(&b.bootstrap, "commits", 0, 100).await;
    let p0 = tp("commits", 0);

    // commit_sync of an explicit offset, then a new member resumes there.
    let manual = [
        ("group.id", "g-manual"),
        ("enable.auto.commit", "false"),
        ("auto.offset.reset", "earliest"),
    ];
    let mut c = consumer(&b.bootstrap, &manual);
    c.subscribe(["commits"], None).unwrap();
    let got = poll_n(&mut c, 30, Duration::from_secs(20)).await;
    assert!(got.len() >= 30);
    assert_eq!(got[0].offset, 0);
    c.commit_sync(Some(HashMap::from([(
        p0.clone(),
        OffsetAndMetadata::new(30).with_metadata("checkpoint"),
    )])))
    .await
    .unwrap();
    let committed = c.committed(std::slice::from_ref(&p0)).await.unwrap();
    let at = committed[&p0].clone().unwrap();
    assert_eq!((at.offset, at.metadata.as_str()), (30, "checkpoint"));
    c.close().await.unwrap();
    let mut c = consumer(&b.bootstrap, &manual);
    c.subscribe(["commits"], None).unwrap();
    let got = poll_n(&mut c, 1, Duration::from_secs(20)).await;
    assert_eq!(got[0].offset, 30, "resumes from the committed offset");
    // commit_sync(None) commits the consumed position.
    let got_more = poll_n(&mut c, 70 - got.len(), Duration::from_secs(20)).await;
    let last = got_more
        .last()
        .map_or(got.last().unwrap().offset, |r| r.offset);
    c.commit_sync(None).await.unwrap();
    assert_eq!(
        c.committed(std::slice::from_ref(&p0)).await.unwrap()[&p0]
            .as_ref()
            .unwrap()
            .offset,
        last + 1
    );
    let async_commit = c.commit_async(Some(HashMap::from([(p0.clone(), 99.into())])));
    async_commit.await.unwrap();
    c.close().await.unwrap();

    // Auto-commit: the position is committed on close.
    let auto = [("group.id", "g-auto"), ("auto.offset.reset", "earliest")];
    let mut c = consumer(&b.bootstrap, &auto);
    c.subscribe(["commits"], None).unwrap();
    assert_eq!(
        poll_n(&mut c, 100, Duration::from_secs(20)).await.len(),
        100
    );
    c.close().await.unwrap();
    let mut c = consumer(&b.bootstrap, &auto);
    c.assign([p0.clone()]).unwrap();
    let committed = c.committed(std::slice::from_ref(&p0)).await.unwrap();
    assert_eq!(committed[&p0].as_ref().map(|o| o.offset), Some(100));
    // assign() with a group resumes from the committed offset too.
    assert_eq!(c.position(&p0).await.unwrap(), 100);
    c.close().await.unwrap();

    // Without a group there is nothing to commit to.
    let mut c = consumer(&b.bootstrap, &[]);
    c.assign([p0.clone()]).unwrap();
    assert!(matches!(
        c.commit_sync(None).await,
        Err(ClientError::Config(_))
    ));
    assert!(c.subscribe(["commits"], None).is_err());
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_positions_and_offsets_for_times() {
    let mut b = common::broker(&[("num.partitions", "1")]).await;
    let base = 1_700_000_000_000i64;
    let p = Producer::from_properties([("bootstrap.servers", b.bootstrap.as_str())]).unwrap();
    for i in 0..50i64 {
        p.send_and_wait(
            ProducerRecord::new("times")
                .value(format!("v{i}"))
                .timestamp(base + i * 10),
        )
        .await
        .unwrap();
    }
    p.close(Duration::from_secs(5)).await.unwrap();
    let t0 = tp("times", 0);
    let mut c = consumer(&b.bootstrap, &[]);
    assert!(
        c.poll(Duration::from_millis(10)).await.is_err(),
        "poll before assign"
    );
    c.assign([t0.clone()]).unwrap();
    // Default auto.offset.reset=latest.
    assert_eq!(c.position(&t0).await.unwrap(), 50);
    c.seek(&t0, 10).unwrap();
    assert_eq!(c.position(&t0).await.unwrap(), 10);
    let got = poll_n(&mut c, 5, Duration::from_secs(10)).await;
    assert_eq!(got[0].offset, 10);
    assert_eq!(got[0].timestamp, base + 100);
    c.seek_to_beginning(std::slice::from_ref(&t0)).unwrap();
    assert_eq!(c.position(&t0).await.unwrap(), 0);
    assert_eq!(
        poll_n(&mut c, 1, Duration::from_secs(10)).await[0].offset,
        0
    );
    c.seek_to_end(&[]).unwrap();
    assert_eq!(c.position(&t0).await.unwrap(), 50);
    assert!(c.poll(Duration::from_millis(200)).await.unwrap().is_empty());

    let found = c
        .offsets_for_times(HashMap::from([(t0.clone(), base + 105)]))
        .await
        .unwrap();
    let hit = found[&t0].unwrap();
    assert_eq!((hit.offset, hit.timestamp), (11, base + 110));
    let none = c
        .offsets_for_times(HashMap::from([(t0.clone(), base + 10_000)]))
        .await
        .unwrap();
    assert_eq!(none[&t0], None);
    assert!(c
        .offsets_for_times(HashMap::from([(t0.clone(), -5)]))
        .await
        .is_err());
    assert_eq!(
        c.beginning_offsets(std::slice::from_ref(&t0))
            .await
            .unwrap()[&t0],
        0
    );
    assert_eq!(
        c.end_offsets(std::slice::from_ref(&t0)).await.unwrap()[&t0],
        50
    );
    assert!(c.seek(&tp("times", 7), 0).is_err(), "not assigned");
    assert!(c.seek(&t0, -1).is_err());
    // pause keeps the position, resume goes on.
    c.seek(&t0, 40).unwrap();
    c.pause(std::slice::from_ref(&t0)).unwrap();
    assert!(c.poll(Duration::from_millis(300)).await.unwrap().is_empty());
    c.resume(std::slice::from_ref(&t0)).unwrap();
    assert_eq!(
        poll_n(&mut c, 1, Duration::from_secs(10)).await[0].offset,
        40
    );
    c.close().await.unwrap();
    let c = consumer(&b.bootstrap, &[("allow.auto.create.topics", "false")]);
    let err = c.partitions_for("no-such-topic").await.unwrap_err();
    assert_eq!(err.code(), Some(3), "{err}");
    assert!(err.to_string().contains("no-such-topic"), "{err}");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_offset_reset_earliest_latest_and_none() {
    let mut b = common::broker(&[("num.partitions", "1")]).await;
    produce(&b.bootstrap, "reset", 0, 10).await;
    let r0 = tp("reset", 0);

    let mut earliest = consumer(
        &b.bootstrap,
        &[("group.id", "r-e"), ("auto.offset.reset", "earliest")],
    );
    earliest.assign([r0.clone()]).unwrap();
    let got = poll_n(&mut earliest, 10, Duration::from_secs(10)).await;
    assert_eq!(
        got.iter().map(|r| r.offset).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );

    let mut latest = consumer(
        &b.bootstrap,
        &[("group.id", "r-l"), ("auto.offset.reset", "latest")],
    );
    latest.subscribe(["reset"], None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while latest.assignment().is_empty() {
        assert!(Instant::now() < deadline, "no assignment");
        assert!(latest
            .poll(Duration::from_millis(50))
            .await
            .unwrap()
            .is_empty());
    }
    assert_eq!(latest.position(&r0).await.unwrap(), 10);
    produce(&b.bootstrap, "reset", 0, 5).await;
    let got = poll_n(&mut latest, 5, Duration::from_secs(10)).await;
    assert_eq!(
        got.iter().map(|r| r.offset).collect::<Vec<_>>(),
        (10..15).collect::<Vec<_>>()
    );

    let mut none = consumer(
        &b.bootstrap,
        &[("group.id", "r-n"), ("auto.offset.reset", "none")],
    );
    none.assign([r0.clone()]).unwrap();
    let err = loop {
        match none.poll(Duration::from_millis(200)).await {
            Err(e) => break e,
            Ok(r) => assert!(r.is_empty()),
        }
    };
    assert!(err.to_string().contains("auto.offset.reset"), "{err}");
    assert!(err.to_string().contains("reset-0"), "{err}");
    // Seeking gets it going; an out-of-range position is an error too (no reset policy).
    none.seek(&r0, 100).unwrap();
    let err = loop {
        match none.poll(Duration::from_millis(200)).await {
            Err(e) => break e,
            Ok(r) => assert!(r.is_empty()),
        }
    };
    assert_eq!(err.code(), Some(1), "OFFSET_OUT_OF_RANGE: {err}");
    none.seek(&r0, 12).unwrap();
    assert_eq!(poll_n(&mut none, 3, Duration::from_secs(10)).await.len(), 3);
    // With a reset policy, an out-of-range position resets.
    earliest.seek(&r0, 1000).unwrap();
    assert_eq!(
        poll_n(&mut earliest, 1, Duration::from_secs(10)).await[0].offset,
        0
    );
    for c in [earliest, latest, none] {
        c.close().await.unwrap();
    }
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_loop_keeps_up_with_a_producer() {
    const N: usize = 200_000;
    let mut b = common::broker(&[("num.partitions", "2")]).await;
    produce(&b.bootstrap, "stream", 0, 1).await;
    let bootstrap = b.bootstrap.clone();
    let producer = tokio::spawn(async move {
        let p = Producer::from_properties([
            ("bootstrap.servers", bootstrap.as_str()),
            ("linger.ms", "5"),
            ("batch.size", "65536"),
        ])
        .unwrap();
        let mut futures = Vec::new();
        for i in 0..N - 1 {
            let rec = ProducerRecord::new("stream").value(format!("{i:08}"));
            futures.push(p.send(rec).await.unwrap());
        }
        for f in futures {
            f.await.unwrap();
        }
        p.close(Duration::from_secs(10)).await.unwrap();
    });
    let mut c = consumer(&b.bootstrap, &[("fetch.max.wait.ms", "50")]);
    c.assign([tp("stream", 0), tp("stream", 1)]).unwrap();
    c.seek_to_beginning(&[]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let mut total = 0;
    while total < N {
        assert!(
            Instant::now() < deadline,
            "only {total} of {N} records arrived"
        );
        for r in c.poll(Duration::from_millis(100)).await.unwrap() {
            let expected = next.entry(r.partition).or_insert(0);
            assert_eq!(
                r.offset, *expected,
                "partition {} in order, once",
                r.partition
            );
            *expected += 1;
            total += 1;
        }
    }
    producer.await.unwrap();
    assert!(c.poll(Duration::from_millis(200)).await.unwrap().is_empty());
    let ends = c
        .end_offsets(&[tp("stream", 0), tp("stream", 1)])
        .await
        .unwrap();
    assert_eq!(ends.values().sum::<i64>() as usize, N);
    c.close().await.unwrap();
    b.stop().await;
}

// ---- the assignors ----

fn parts(v: &[(&str, i32)]) -> BTreeMap<String, i32> {
    v.iter().map(|(t, n)| (t.to_string(), *n)).collect()
}

fn assigned(v: &[(&str, i32)]) -> Vec<TopicPartition> {
    v.iter().map(|(t, p)| tp(t, *p)).collect()
}

#[test]
fn range_matches_kafka() {
    // Two members, one topic of three partitions: [0, 1] and [2].
    let members = vec![
        MemberSubscription::new("c1", &["t"]),
        MemberSubscription::new("c0", &["t"]),
    ];
    let out = RangeAssignor.assign(&parts(&[("t", 3)]), &members);
    assert_eq!(out["c0"], assigned(&[("t", 0), ("t", 1)]));
    assert_eq!(out["c1"], assigned(&[("t", 2)]));
    // Per topic: RangeAssignorTest.testTwoConsumersTwoTopicsSixPartitions.
    let members = vec![
        MemberSubscription::new("consumer1", &["t1", "t2"]),
        MemberSubscription::new("consumer2", &["t1", "t2"]),
    ];
    let out = RangeAssignor.assign(&parts(&[("t1", 3), ("t2", 3)]), &members);
    assert_eq!(
        out["consumer1"],
        assigned(&[("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)])
    );
    assert_eq!(out["consumer2"], assigned(&[("t1", 2), ("t2", 2)]));
    // Only subscribers of a topic share it; more members than partitions leaves some idle.
    let members = vec![
        MemberSubscription::new("a", &["t1"]),
        MemberSubscription::new("b", &["t1", "t2"]),
        MemberSubscription::new("c", &["t1"]),
    ];
    let out = RangeAssignor.assign(&parts(&[("t1", 2), ("t2", 2), ("unused", 5)]), &members);
    assert_eq!(out["a"], assigned(&[("t1", 0)]));
    assert_eq!(out["b"], assigned(&[("t1", 1), ("t2", 0), ("t2", 1)]));
    assert_eq!(out["c"], assigned(&[]));
    // Static members come first, ordered by instance id.
    let mut s = MemberSubscription::new("zzz", &["t"]);
    s.group_instance_id = Some("instance".into());
    let out = RangeAssignor.assign(
        &parts(&[("t", 3)]),
        &[MemberSubscription::new("aaa", &["t"]), s],
    );
    assert_eq!(out["zzz"], assigned(&[("t", 0), ("t", 1)]));
    assert_eq!(out["aaa"], assigned(&[("t", 2)]));
    // A topic that does not exist gets nobody anything.
    let out = RangeAssignor.assign(&parts(&[]), &[MemberSubscription::new("a", &["t"])]);
    assert_eq!(out["a"], assigned(&[]));
}

#[test]
fn round_robin_matches_kafka() {
    // RoundRobinAssignorTest.testTwoConsumersTwoTopicsSixPartitions.
    let members = vec![
        MemberSubscription::new("consumer1", &["t1", "t2"]),
        MemberSubscription::new("consumer2", &["t1", "t2"]),
    ];
    let out = RoundRobinAssignor.assign(&parts(&[("t1", 3), ("t2", 3)]), &members);
    assert_eq!(
        out["consumer1"],
        assigned(&[("t1", 0), ("t1", 2), ("t2", 1)])
    );
    assert_eq!(
        out["consumer2"],
        assigned(&[("t1", 1), ("t2", 0), ("t2", 2)])
    );
    // testMultipleConsumersMixedTopics.
    let members = vec![
        MemberSubscription::new("consumer1", &["t1"]),
        MemberSubscription::new("consumer2", &["t1", "t2"]),
        MemberSubscription::new("consumer3", &["t1"]),
    ];
    let out = RoundRobinAssignor.assign(&parts(&[("t1", 3), ("t2", 2)]), &members);
    assert_eq!(out["consumer1"], assigned(&[("t1", 0)]));
    assert_eq!(
        out["consumer2"],
        assigned(&[("t1", 1), ("t2", 0), ("t2", 1)])
    );
    assert_eq!(out["consumer3"], assigned(&[("t1", 2)]));
}

fn counts(out: &BTreeMap<String, Vec<TopicPartition>>) -> Vec<usize> {
    out.values().map(Vec::len).collect()
}

#[test]
fn cooperative_sticky_is_balanced_and_sticky_and_moves_in_two_steps() {
    let topics = parts(&[("t", 6)]);
    // Fresh group: balanced.
    let fresh = vec![
        MemberSubscription::new("a", &["t"]),
        MemberSubscription::new("b", &["t"]),
        MemberSubscription::new("c", &["t"]),
    ];
    let out = CooperativeStickyAssignor.assign(&topics, &fresh);
    assert_eq!(counts(&out), vec![2, 2, 2]);
    // Stable membership: nothing moves.
    let owning: Vec<MemberSubscription> = fresh
        .iter()
        .map(|m| {
            let owned: Vec<(&str, i32)> = out[&m.member_id]
                .iter()
                .map(|p| ("t", p.partition))
                .collect();
            m.clone().owning(&owned, 3)
        })
        .collect();
    let again = CooperativeStickyAssignor.assign(&topics, &owning);
    assert_eq!(again, out, "sticky");

    // "a" owns everything, "b" joins: first round, "a" keeps 3 and nobody gets the 3 that
    // move (a must revoke them first); second round, "b" gets them.
    let all6: Vec<(&str, i32)> = (0..6).map(|p| ("t", p)).collect();
    let first = CooperativeStickyAssignor.assign(
        &topics,
        &[
            MemberSubscription::new("a", &["t"]).owning(&all6, 5),
            MemberSubscription::new("b", &["t"]),
        ],
    );
    assert_eq!(first["a"].len(), 3);
    assert!(
        first["b"].is_empty(),
        "moved partitions wait for their revocation"
    );
    let kept: Vec<(&str, i32)> = first["a"].iter().map(|p| ("t", p.partition)).collect();
    let second = CooperativeStickyAssignor.assign(
        &topics,
        &[
            MemberSubscription::new("a", &["t"]).owning(&kept, 6),
            MemberSubscription::new("b", &["t"]),
        ],
    );
    assert_eq!(second["a"], first["a"], "a keeps what it kept");
    assert_eq!(second["b"].len(), 3);
    let union: BTreeSet<TopicPartition> = second.values().flatten().cloned().collect();
    assert_eq!(union.len(), 6);

    // A member leaves: its partitions go to the others, who keep their own.
    let out = CooperativeStickyAssignor.assign(
        &topics,
        &[
            MemberSubscription::new("a", &["t"]).owning(&[("t", 0), ("t", 1)], 7),
            MemberSubscription::new("c", &["t"]).owning(&[("t", 4), ("t", 5)], 7),
        ],
    );
    assert!(out["a"].starts_with(&assigned(&[("t", 0), ("t", 1)])));
    assert!(out["c"].ends_with(&assigned(&[("t", 4), ("t", 5)])));
    assert_eq!(counts(&out), vec![3, 3]);

    // A stale claim (older generation) loses to a current one.
    let out = CooperativeStickyAssignor.assign(
        &parts(&[("t", 2)]),
        &[
            MemberSubscription::new("a", &["t"]).owning(&[("t", 0), ("t", 1)], 8),
            MemberSubscription::new("b", &["t"]).owning(&[("t", 0)], 3),
        ],
    );
    assert!(out["a"].contains(&tp("t", 0)));
    assert!(out["b"].is_empty(), "t-1 moves from a to b next round");
}

/// A partition whose next batch is larger than what a response has room for left must
/// still be read: the consumer lists it first in a later request, where the broker sends a
/// whole batch however large (KIP-74), while another partition has plenty of small records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_the_fetch_limits_is_read_next_to_a_busy_partition() {
    let b = common::broker(&[("num.partitions", "2")]).await;
    let topic = "wide";
    produce(&b.bootstrap, topic, 0, 3000).await;
    let p = Producer::from_properties([
        ("bootstrap.servers", b.bootstrap.as_str()),
        ("max.request.size", "200000"),
    ])
    .unwrap();
    for i in 0..3 {
        let value = vec![b'a' + i; 50_000];
        p.send_and_wait(ProducerRecord::new(topic).partition(1).value(value))
            .await
            .unwrap();
    }
    p.close(Duration::from_secs(5)).await.unwrap();

    let mut c = consumer(
        &b.bootstrap,
        &[
            ("fetch.max.bytes", "4000"),
            ("max.partition.fetch.bytes", "4000"),
        ],
    );
    c.assign([tp(topic, 0), tp(topic, 1)]).unwrap();
    c.seek_to_beginning(&[]).unwrap();
    let got = poll_n(&mut c, 3003, Duration::from_secs(30)).await;
    let big: Vec<&ConsumerRecord> = got.iter().filter(|r| r.partition == 1).collect();
    assert_eq!(big.len(), 3, "every large record of partition 1");
    assert!(big
        .iter()
        .all(|r| r.value.as_ref().is_some_and(|v| v.len() == 50_000)));
    assert_eq!(got.len(), 3003);
}
