//! Sessions of several brokers against a real etcd: joining, the controller's election
//! and failover, topics led once created, a taken id refused, and the last image kept
//! while etcd is away.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use weir_cluster::records::{TopicRecord, RECORD_VERSION};
use weir_cluster::session::{ClusterConfig, ControllerConfig};
use weir_cluster::test_etcd::EtcdServer;
use weir_cluster::{Cluster, Endpoint, EtcdConnect, OpError};

fn config(etcd: &EtcdServer, prefix: &str, id: i32, port: u16) -> ClusterConfig {
    ClusterConfig {
        connect: EtcdConnect::parse(&format!("{}{prefix}", etcd.endpoint)).unwrap(),
        node_id: id,
        rack: None,
        endpoints: vec![Endpoint {
            listener: "PLAINTEXT".into(),
            security_protocol: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port,
        }],
        partition_capacity: 1000,
        session_timeout: Duration::from_secs(2),
        connection_timeout: Duration::from_secs(10),
        controller: ControllerConfig {
            auto_leader_rebalance: false,
            imbalance_check_interval: Duration::from_secs(300),
            imbalance_percentage: 10,
            unclean_default: false,
        },
    }
}

fn join(etcd: &EtcdServer, prefix: &str, id: i32, port: u16) -> Cluster {
    let c = Cluster::connect(config(etcd, prefix, id, port), None).unwrap();
    c.start().unwrap();
    c
}

fn wait(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

fn topic(partitions: Vec<Vec<i32>>) -> TopicRecord {
    TopicRecord {
        version: RECORD_VERSION,
        topic_id: weir_kafka::topic::uuid_to_base64(uuid::Uuid::new_v4()),
        partitions,
        reassigning: Default::default(),
    }
}

#[test]
fn brokers_elect_one_controller_which_leads_new_topics_and_fails_over() {
    let etcd = EtcdServer::start();
    let a = join(&etcd, "/w", 1, 19001);
    let b = join(&etcd, "/w", 2, 19002);
    assert_eq!(a.cluster_id(), b.cluster_id(), "one cluster id");
    wait("both see both", Duration::from_secs(5), || {
        a.image().brokers.len() == 2 && b.image().brokers.len() == 2
    });
    wait("a controller", Duration::from_secs(5), || {
        a.image().controller_id().is_some()
    });
    let first = a.image().controller_id().unwrap();
    assert_eq!(
        [a.is_controller(), b.is_controller()]
            .iter()
            .filter(|c| **c)
            .count(),
        1
    );

    // A topic written by either broker is led by the replica it names.
    let a2 = a.clone();
    a.block_on(async move {
        a2.create_topic("t", topic(vec![vec![1], vec![2], vec![1]]), BTreeMap::new())
            .await
    })
    .unwrap();
    wait("every partition led", Duration::from_secs(5), || {
        let img = b.image();
        (0..3).all(|p| img.leader("t", p).is_some())
    });
    let img = b.image();
    assert_eq!(img.leader("t", 1), Some(2));
    assert_eq!(img.topic("t").unwrap().state(0).unwrap().leader_epoch, 0);

    // Creating it again is a conflict.
    let b2 = b.clone();
    let again = b.block_on(async move {
        b2.create_topic("t", topic(vec![vec![2]]), BTreeMap::new())
            .await
    });
    assert!(matches!(again, Err(OpError::Conflict(_))), "{again:?}");

    // The controller leaves (its lease is revoked): the other takes over at once, and
    // the partitions of the broker that left lose their leader.
    let (gone, stays) = if first == 1 { (a, b) } else { (b, a) };
    let g = gone.clone();
    gone.block_on(async move { g.resign().await });
    let took = wait("the other broker controls", Duration::from_secs(5), || {
        stays.is_controller()
    });
    println!("controller failover after a clean leave: {took:?}");
    let gone_id = if first == 1 { 1 } else { 2 };
    wait("its partitions leaderless", Duration::from_secs(5), || {
        let img = stays.image();
        (0..3).all(|p| {
            let s = img.topic("t").unwrap().state(p).unwrap();
            s.leader != gone_id
                && (img.topic("t").unwrap().replicas(p)[0] != gone_id || s.leader == -1)
        })
    });
    let img = stays.image();
    let p = if gone_id == 1 { 0 } else { 1 };
    let s = img.topic("t").unwrap().state(p).unwrap();
    assert_eq!(
        (s.leader, s.isr.clone()),
        (-1, vec![gone_id]),
        "the last ISR member stays"
    );
    assert!(img.controller.as_ref().unwrap().value.epoch >= 2);
}

#[test]
fn a_live_id_is_refused_and_a_restart_on_the_same_listeners_takes_its_place() {
    let etcd = EtcdServer::start();
    let a = join(&etcd, "", 1, 19101);
    let first = a.image().revision;
    wait("registered", Duration::from_secs(5), || {
        a.image().brokers.contains_key(&1)
    });
    let original = a.image().brokers[&1].clone();
    let other = Cluster::connect(config(&etcd, "", 1, 19102), None).unwrap();
    let e = other.start().unwrap_err();
    assert!(e.contains("node.id 1 is taken"), "{e}");
    assert!(e.contains("19101"), "names the other's listeners: {e}");
    // The same listeners: this broker's previous process, killed and restarted within
    // its lease. (Its session is dropped without resigning, as a crash leaves it.)
    let restarted = Cluster::connect(config(&etcd, "", 1, 19101), None).unwrap();
    restarted.start().unwrap();
    assert!(original.create_revision > first);

    wait(
        "the new incarnation registered",
        Duration::from_secs(5),
        || {
            restarted.image().brokers.get(&1).is_some_and(|b| {
                b.mod_revision > original.mod_revision
                    && b.value.incarnation != original.value.incarnation
            })
        },
    );
    drop(a);
}

#[test]
fn a_crashed_controller_is_replaced_within_the_lease_and_etcd_outages_keep_the_image() {
    let mut etcd = EtcdServer::start();
    let a = join(&etcd, "/x", 1, 19201);
    wait("a controls", Duration::from_secs(5), || a.is_controller());
    let b = join(&etcd, "/x", 2, 19202);
    let a2 = a.clone();
    a.block_on(async move {
        a2.create_topic("t", topic(vec![vec![2]]), BTreeMap::new())
            .await
    })
    .unwrap();
    wait("led", Duration::from_secs(5), || {
        b.image().leader("t", 0) == Some(2)
    });
    // A crash: the session stops renewing without revoking (etcd is paused for longer
    // than the lease, which stops every renewal, then the controller's session is dropped).
    drop(a);
    let start = Instant::now();
    wait("b controls", Duration::from_secs(8), || b.is_controller());
    println!("controller failover after a crash: {:?}", start.elapsed());

    // etcd goes away: b keeps its last image, and says it is cut off.
    let before = b.image();
    etcd.kill();
    wait("b notices", Duration::from_secs(15), || !b.is_connected());
    assert_eq!(b.image().leader("t", 0), Some(2));
    assert_eq!(b.image().revision, before.revision);
    let b2 = b.clone();
    let refused = b.block_on(async move {
        b2.create_topic("u", topic(vec![vec![2]]), BTreeMap::new())
            .await
    });
    assert!(
        matches!(refused, Err(OpError::Unavailable(_))),
        "{refused:?}"
    );
    etcd.restart();
    wait("b is back", Duration::from_secs(15), || b.is_connected());
    let b2 = b.clone();
    b.block_on(async move {
        b2.create_topic("u", topic(vec![vec![2]]), BTreeMap::new())
            .await
    })
    .unwrap();
    wait("u led", Duration::from_secs(10), || {
        b.image().leader("u", 0) == Some(2)
    });
}
