//! Two `weir serve` brokers on one real etcd, asked at the wire what a Kafka client
//! would ask: who leads each partition (Metadata, from either broker), what a request to
//! the wrong broker gets (NOT_LEADER_OR_FOLLOWER, with the leader in Fetch v12's
//! `current_leader`), what an old leader epoch gets (FENCED_LEADER_EPOCH), and what
//! Metadata says of a partition whose broker is gone (LEADER_NOT_AVAILABLE, its replica
//! offline). The client-level cluster tests are `scripts/cluster-suite.sh`.

mod common;

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

async fn metadata(addr: &str, topic: &str) -> MetadataResponse {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(topic_name(topic));
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![t]);
    match call(addr, ApiKey::Metadata, 12, RequestKind::Metadata(r)).await {
        ResponseKind::Metadata(m) => m,
        other => panic!("{other:?}"),
    }
}

fn start(etcd: &EtcdServer, dir: &std::path::Path, id: i32) -> Server {
    Server::start(
        &dir.join(format!("b{id}")),
        &[
            format!("node.id={id}"),
            format!("etcd.connect={}/wire", etcd.endpoint),
            "etcd.session.timeout.ms=2000".into(),
        ],
    )
}

async fn wait_for<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: not within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn requests_find_their_leader_and_a_lost_broker_s_partitions_are_offline() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let b1 = start(&etcd, dir.path(), 1);
    let mut b2 = start(&etcd, dir.path(), 2);
    wait_for("two brokers", async || {
        (metadata(&b1.addr, "none").await.brokers.len() == 2).then_some(())
    })
    .await;
    weir(&[
        "topics",
        "create",
        "--bootstrap",
        &b1.addr,
        "--topic",
        "w",
        "--partitions",
        "4",
    ]);
    // Both brokers say the same: every partition led, by one of the two.
    let m1 = metadata(&b1.addr, "w").await;
    let m2 = wait_for("the same view on both", async || {
        let m = metadata(&b2.addr, "w").await;
        (m.topics[0].partitions == m1.topics[0].partitions).then_some(m)
    })
    .await;
    let parts = &m2.topics[0].partitions;
    assert_eq!(parts.len(), 4);
    assert!(parts.iter().any(|p| p.leader_id.0 == 1) && parts.iter().any(|p| p.leader_id.0 == 2));
    assert_eq!(m1.controller_id, m2.controller_id);
    let on_2 = parts.iter().find(|p| p.leader_id.0 == 2).unwrap();
    let (p2, epoch) = (on_2.partition_index, on_2.leader_epoch);
    assert_eq!(on_2.replica_nodes, vec![BrokerId(2)]);
    assert_eq!(on_2.isr_nodes, vec![BrokerId(2)]);

    // Produce to broker 1 for a partition broker 2 leads.
    let mut b = weir_record::BatchBuilder::new(weir_record::Compression::None, 0, usize::MAX);
    b.append(1_700_000_000_000, Some(b"k"), Some(b"v"), &[])
        .unwrap();
    let mut pd = produce_request::PartitionProduceData::default();
    pd.index = p2;
    pd.records = Some(Bytes::from(b.build().unwrap().bytes));
    let mut td = produce_request::TopicProduceData::default();
    td.name = topic_name("w");
    td.partition_data = vec![pd];
    let mut pr = ProduceRequest::default();
    pr.acks = 1;
    pr.timeout_ms = 5000;
    pr.topic_data = vec![td];
    let ResponseKind::Produce(r) = call(
        &b1.addr,
        ApiKey::Produce,
        9,
        RequestKind::Produce(pr.clone()),
    )
    .await
    else {
        panic!()
    };
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 6, "NOT_LEADER_OR_FOLLOWER: {p:?}");
    assert!(
        p.error_message.as_ref().unwrap().contains("broker 2 leads"),
        "{p:?}"
    );
    // The leader takes it.
    let ResponseKind::Produce(r) =
        call(&b2.addr, ApiKey::Produce, 9, RequestKind::Produce(pr)).await
    else {
        panic!()
    };
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);

    // Fetch from the wrong broker: told who leads (v12's current_leader); with an old
    // epoch, from the right one: fenced.
    let fetch = |leader_epoch: i32| {
        let mut fp = fetch_request::FetchPartition::default();
        fp.partition = p2;
        fp.current_leader_epoch = leader_epoch;
        fp.partition_max_bytes = 1 << 20;
        let mut ft = fetch_request::FetchTopic::default();
        ft.topic = topic_name("w");
        ft.partitions = vec![fp];
        let mut f = FetchRequest::default();
        f.replica_id = BrokerId(-1);
        f.max_wait_ms = 10;
        f.max_bytes = 1 << 20;
        f.topics = vec![ft];
        RequestKind::Fetch(f)
    };
    let ResponseKind::Fetch(r) = call(&b1.addr, ApiKey::Fetch, 12, fetch(epoch)).await else {
        panic!()
    };
    let pd = &r.responses[0].partitions[0];
    assert_eq!(pd.error_code, 6);
    assert_eq!(
        (pd.current_leader.leader_id, pd.current_leader.leader_epoch),
        (BrokerId(2), epoch)
    );
    let ResponseKind::Fetch(r) = call(&b2.addr, ApiKey::Fetch, 12, fetch(epoch)).await else {
        panic!()
    };
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    assert_eq!(r.responses[0].partitions[0].high_watermark, 1);
    let ResponseKind::Fetch(r) = call(&b2.addr, ApiKey::Fetch, 12, fetch(epoch + 1)).await else {
        panic!()
    };
    assert_eq!(
        r.responses[0].partitions[0].error_code, 75,
        "UNKNOWN_LEADER_EPOCH"
    );

    // Broker 2 is lost: broker 1 says its partitions have no leader and an offline
    // replica; broker 2's restart brings them back at a new leader epoch.
    b2.child.kill().unwrap();
    b2.child.wait().unwrap();
    let gone = wait_for("broker 2's partitions offline", async || {
        let m = metadata(&b1.addr, "w").await;
        let p = m.topics[0].partitions[p2 as usize].clone();
        (p.error_code == 5).then_some(p)
    })
    .await;
    assert_eq!(gone.leader_id, BrokerId(-1));
    assert_eq!(gone.offline_replicas, vec![BrokerId(2)]);
    let port = b2.port();
    drop(b2);
    let b2 = Server::start_on(
        &dir.path().join("b2"),
        &[
            "node.id=2".into(),
            format!("etcd.connect={}/wire", etcd.endpoint),
            "etcd.session.timeout.ms=2000".into(),
        ],
        port,
    );
    let back = wait_for("led again, as broker 2 itself sees it", async || {
        let m = metadata(&b2.addr, "w").await;
        let p = m.topics[0].partitions[p2 as usize].clone();
        (p.leader_id == BrokerId(2)).then_some(p)
    })
    .await;
    assert!(
        back.leader_epoch > epoch,
        "{} after {epoch}",
        back.leader_epoch
    );
    let ResponseKind::Fetch(r) = call(&b2.addr, ApiKey::Fetch, 12, fetch(epoch)).await else {
        panic!()
    };
    assert_eq!(
        r.responses[0].partitions[0].error_code, 74,
        "FENCED_LEADER_EPOCH"
    );
    let ResponseKind::Fetch(r) = call(&b2.addr, ApiKey::Fetch, 12, fetch(back.leader_epoch)).await
    else {
        panic!()
    };
    assert_eq!(
        r.responses[0].partitions[0].high_watermark, 1,
        "the acknowledged record survived"
    );
    drop(b1);
}
