//! Three `weir serve` brokers on one real etcd, with a partition of three replicas: what
//! acks=all promises, asked at the wire. Every acknowledged record is on every in-sync
//! replica, byte for byte; the leader's `kill -9` hands leadership to an ISR member that
//! has every acknowledged record; writes go on while min.insync.replicas holds and are
//! refused with NOT_ENOUGH_REPLICAS when it does not; a restarted broker catches up and
//! comes back into the ISR. The fault harness (`scripts/fault-suite.sh`) does this under
//! random faults; this is the deterministic core.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{frame, read_frame, weir, Server};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir_cluster::test_etcd::EtcdServer;

async fn call(addr: &str, api: ApiKey, version: i16, req: RequestKind) -> ResponseKind {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&frame(api, version, 1, &req)).await.unwrap();
    let mut resp = read_frame(&mut s)
        .await
        .unwrap_or_else(|| panic!("no answer to {api:?}"));
    ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
    ResponseKind::decode(api, &mut resp, version).unwrap()
}

fn topic_name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_string()))
}

async fn partition(addr: &str, topic: &str) -> metadata_response::MetadataResponsePartition {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(topic_name(topic));
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![t]);
    match call(addr, ApiKey::Metadata, 12, RequestKind::Metadata(r)).await {
        // Not known there yet: no leader.
        ResponseKind::Metadata(m) => m.topics[0].partitions.first().cloned().unwrap_or_else(|| {
            let mut p = metadata_response::MetadataResponsePartition::default();
            p.leader_id = BrokerId(-1);
            p
        }),
        other => panic!("{other:?}"),
    }
}

fn overrides(etcd: &EtcdServer, id: i32) -> Vec<String> {
    vec![
        format!("node.id={id}"),
        format!("etcd.connect={}/replication", etcd.endpoint),
        "etcd.session.timeout.ms=2000".into(),
        // Lost brokers leave the ISR when their lease lapses (2 s); followers slow to
        // start on a loaded machine must not leave it before (Kafka's default is 30 s).
        "replica.lag.time.max.ms=10000".into(),
    ]
}

async fn wait_for<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: not within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One acks=all produce of `n` records tagged `tag`: the partition's error code and base
/// offset.
async fn produce(addr: &str, tag: &str, n: usize) -> (i16, i64) {
    let mut b = weir_record::BatchBuilder::new(weir_record::Compression::None, 0, usize::MAX);
    for i in 0..n {
        let v = format!("{tag}-{i}");
        b.append(1_700_000_000_000, None, Some(v.as_bytes()), &[])
            .unwrap();
    }
    let mut pd = produce_request::PartitionProduceData::default();
    pd.index = 0;
    pd.records = Some(Bytes::from(b.build().unwrap().bytes));
    let mut td = produce_request::TopicProduceData::default();
    td.name = topic_name("r");
    td.partition_data = vec![pd];
    let mut pr = ProduceRequest::default();
    pr.acks = -1;
    pr.timeout_ms = 10_000;
    pr.topic_data = vec![td];
    let ResponseKind::Produce(r) = call(addr, ApiKey::Produce, 9, RequestKind::Produce(pr)).await
    else {
        panic!()
    };
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// `produce`, again while the broker answers that it does not lead the partition yet
/// (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER): a leader
/// applies its leadership when its own watch brings it, a moment after others see it.
async fn produce_led(addr: &str, tag: &str, n: usize) -> (i16, i64) {
    let start = Instant::now();
    loop {
        let r = produce(addr, tag, n).await;
        if !matches!(r.0, 3 | 5 | 6) || start.elapsed() > Duration::from_secs(30) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The partition's segment bytes on one broker, up to `len` bytes.
fn log_bytes(dir: &Path) -> Vec<u8> {
    let d: PathBuf = dir.join("r-0");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.iter()
        .flat_map(|p| std::fs::read(p).unwrap())
        .collect()
}

/// Three brokers on `etcd`, each with its data under `dir`, once broker 1 lists them all.
async fn three_brokers(etcd: &EtcdServer, dir: &Path) -> Vec<Server> {
    let brokers: Vec<Server> = (1..=3)
        .map(|id| Server::start(&dir.join(format!("b{id}")), &overrides(etcd, id)))
        .collect();
    let a1 = brokers[0].addr.clone();
    wait_for("three brokers", async || {
        let mut r = MetadataRequest::default();
        r.topics = Some(vec![]);
        match call(&a1, ApiKey::Metadata, 12, RequestKind::Metadata(r)).await {
            ResponseKind::Metadata(m) => (m.brokers.len() == 3).then_some(()),
            _ => None,
        }
    })
    .await;
    brokers
}

/// Topic "r" of one partition of `rf` replicas (min.insync.replicas at most 2), once
/// broker 1 (`a1`) sees it led: broker 1 applies the leadership when its watch brings it.
async fn create_r(a1: &str, rf: usize) -> metadata_response::MetadataResponsePartition {
    let min_isr = format!("min.insync.replicas={}", rf.min(2));
    let rf = rf.to_string();
    weir(&[
        "topics",
        "create",
        "--bootstrap",
        a1,
        "--topic",
        "r",
        "--partitions",
        "1",
        "--replication-factor",
        &rf,
        "--config",
        &min_isr,
    ]);
    wait_for("the topic led, as broker 1 sees it", async || {
        let p = partition(a1, "r").await;
        (p.leader_id.0 >= 0).then_some(p)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_are_on_every_in_sync_replica_and_survive_the_leader() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let data = |id: i32| dir.path().join(format!("b{id}"));
    let mut brokers: Vec<Option<Server>> = three_brokers(&etcd, dir.path())
        .await
        .into_iter()
        .map(Some)
        .collect();
    let addr =
        |bs: &Vec<Option<Server>>, id: i32| bs[(id - 1) as usize].as_ref().unwrap().addr.clone();
    let a1 = addr(&brokers, 1);
    let p = create_r(&a1, 3).await;
    assert_eq!(p.replica_nodes.len(), 3, "{p:?}");
    assert_eq!(p.isr_nodes.len(), 3, "{p:?}");
    let leader = p.leader_id.0;

    // acks=all: each answer comes once every in-sync replica has the records.
    let mut acked = 0i64;
    for i in 0..20 {
        let (code, base) = produce_led(&addr(&brokers, leader), &format!("a{i}"), 5).await;
        assert_eq!((code, base), (0, acked), "batch {i}");
        acked += 5;
    }
    // The followers' copies are the leader's, byte for byte (their high watermark comes
    // with their next fetch; the bytes are there already).
    let on_leader = log_bytes(&data(leader));
    for id in (1..=3).filter(|id| *id != leader) {
        assert_eq!(log_bytes(&data(id)), on_leader, "broker {id}'s replica");
    }

    // The leader is lost: an ISR member leads, with everything acknowledged.
    let mut old = brokers[(leader - 1) as usize].take().unwrap();
    let old_port = old.port();
    old.child.kill().unwrap();
    old.child.wait().unwrap();
    drop(old);
    let other = (1..=3).find(|id| *id != leader).unwrap();
    let a_other = addr(&brokers, other);
    let p = wait_for("a new leader", async || {
        let p = partition(&a_other, "r").await;
        (p.leader_id.0 >= 0 && p.leader_id.0 != leader).then_some(p)
    })
    .await;
    let new_leader = p.leader_id.0;
    let (code, base) = produce_led(&addr(&brokers, new_leader), "b", 5).await;
    assert_eq!(
        (code, base),
        (0, acked),
        "the new leader has every acknowledged record"
    );
    acked += 5;

    // With only the leader left in sync, acks=all is refused: min.insync.replicas=2.
    let third = (1..=3)
        .find(|id| *id != leader && *id != new_leader)
        .unwrap();
    let mut t = brokers[(third - 1) as usize].take().unwrap();
    t.child.kill().unwrap();
    t.child.wait().unwrap();
    let third_port = t.port();
    drop(t);
    let a_new = addr(&brokers, new_leader);
    wait_for("the ISR down to the leader", async || {
        let p = partition(&a_new, "r").await;
        (p.isr_nodes == vec![BrokerId(new_leader)]).then_some(())
    })
    .await;
    let (code, _) = produce(&a_new, "c", 5).await;
    assert_eq!(code, 19, "NOT_ENOUGH_REPLICAS");

    // Both come back, catch up, and rejoin the ISR; every replica is the same again.
    brokers[(leader - 1) as usize] = Some(Server::start_on(
        &data(leader),
        &overrides(&etcd, leader),
        old_port,
    ));
    brokers[(third - 1) as usize] = Some(Server::start_on(
        &data(third),
        &overrides(&etcd, third),
        third_port,
    ));
    wait_for("all three in sync again", async || {
        let p = partition(&a_new, "r").await;
        (p.isr_nodes.len() == 3).then_some(())
    })
    .await;
    let (code, base) = produce_led(&a_new, "d", 5).await;
    assert_eq!((code, base), (0, acked));
    acked += 5;
    let on_leader = log_bytes(&data(new_leader));
    for id in (1..=3).filter(|id| *id != new_leader) {
        assert_eq!(
            log_bytes(&data(id)).len(),
            on_leader.len(),
            "broker {id}'s replica"
        );
        assert!(
            log_bytes(&data(id)) == on_leader,
            "broker {id}'s replica differs"
        );
    }
    // A consumer reads every acknowledged record once, in order.
    let out = weir(&[
        "consume",
        "--bootstrap",
        &a_new,
        "--topic",
        "r",
        "--from-beginning",
        "--max-messages",
        &acked.to_string(),
        "--timeout-ms",
        "10000",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len() as i64, acked, "{out}");
    for (i, line) in lines.iter().enumerate() {
        assert!(line.contains(&format!("\"offset\":{i},")), "{line}");
    }
    assert!(lines[0].contains("\"value\":\"a0-0\""), "{}", lines[0]);
    assert!(lines[100].contains("\"value\":\"b-0\""), "{}", lines[100]);
    assert!(lines[105].contains("\"value\":\"d-0\""), "{}", lines[105]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_moves_to_other_brokers_with_every_record() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let data = |id: i32| dir.path().join(format!("b{id}"));
    let brokers = three_brokers(&etcd, dir.path()).await;
    let a1 = brokers[0].addr.clone();
    let p = create_r(&a1, 1).await;
    let from = p.leader_id.0;
    let addr = |id: i32| brokers[(id - 1) as usize].addr.clone();
    for i in 0..10 {
        assert_eq!(
            produce_led(&addr(from), &format!("m{i}"), 5).await,
            (0, i * 5)
        );
    }
    // From one replica on `from` to two on the other brokers: the replication factor
    // changes, the leader moves, and `from` drops its copy.
    let to: Vec<i32> = (1..=3).filter(|b| *b != from).collect();
    let list = to
        .iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let out = weir(&[
        "topics",
        "reassign",
        "--bootstrap",
        &a1,
        "--topic",
        "r",
        "--partition",
        "0",
        "--replicas",
        &list,
    ]);
    assert!(out.contains("Moving r-0"), "{out}");
    let done = wait_for("the move done", async || {
        let p = partition(&a1, "r").await;
        let replicas: Vec<i32> = p.replica_nodes.iter().map(|b| b.0).collect();
        let mut isr: Vec<i32> = p.isr_nodes.iter().map(|b| b.0).collect();
        isr.sort();
        (replicas == to && isr == to).then_some(p)
    })
    .await;
    assert_eq!(done.leader_id.0, to[0], "the target's first replica leads");
    assert!(done.leader_epoch > p.leader_epoch);
    let listed = weir(&["topics", "reassign", "--bootstrap", &a1, "--list"]);
    assert!(listed.contains("No partition is being moved"), "{listed}");
    wait_for("the old copy removed", async || {
        (!data(from).join("r-0").exists()).then_some(())
    })
    .await;
    assert_eq!(produce_led(&addr(to[0]), "after", 5).await, (0, 50));
    let on_leader = log_bytes(&data(to[0]));
    wait_for("the follower has it all", async || {
        (log_bytes(&data(to[1])) == on_leader).then_some(())
    })
    .await;
    // Nothing to cancel now; a move to a broker that is not there is refused.
    let r = common::weir_result(&[
        "topics",
        "reassign",
        "--bootstrap",
        &a1,
        "--topic",
        "r",
        "--partition",
        "0",
        "--cancel",
    ]);
    assert!(!r.status.success());
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("NO_REASSIGNMENT_IN_PROGRESS"),
        "{r:?}"
    );
    let r = common::weir_result(&[
        "topics",
        "reassign",
        "--bootstrap",
        &a1,
        "--topic",
        "r",
        "--partition",
        "0",
        "--replicas",
        "1,9",
    ]);
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("broker 9"),
        "{r:?}"
    );
}
