//! The transactional producer against a real broker: commit and abort across partitions
//! as read_committed and read_uncommitted consumers see them, consume-transform-produce
//! with the group's offsets in the transaction, a zombie fenced by its successor, an
//! abortable error recovered from, and misuse refused.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use weir_client::admin::{Admin, NewTopic};
use weir_client::{
    ClientError, Consumer, ConsumerGroupMetadata, OffsetAndMetadata, Producer, ProducerRecord,
    TopicPartition,
};

const BROKER: &[(&str, &str)] = &[
    ("transaction.state.log.num.partitions", "4"),
    ("num.partitions", "1"),
];

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

fn txn_producer(bootstrap: &str, id: &str) -> Producer {
    Producer::from_properties([
        ("bootstrap.servers", bootstrap),
        ("transactional.id", id),
        ("linger.ms", "2"),
        ("max.block.ms", "20000"),
    ])
    .unwrap()
}

fn consumer(bootstrap: &str, extra: &[(&str, &str)]) -> Consumer {
    let mut props = vec![
        ("bootstrap.servers", bootstrap),
        ("fetch.max.wait.ms", "100"),
        ("heartbeat.interval.ms", "100"),
        ("session.timeout.ms", "6000"),
        ("default.api.timeout.ms", "10000"),
        ("auto.offset.reset", "earliest"),
    ];
    props.extend_from_slice(extra);
    Consumer::from_properties(props).unwrap()
}

async fn create(bootstrap: &str, topic: NewTopic) {
    let admin = Admin::from_properties([("bootstrap.servers", bootstrap)]).unwrap();
    for (name, r) in admin.create_topics(&[topic], false).await.unwrap() {
        r.unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
}

/// Every value of `topics`' partitions up to their end (the last stable offset under
/// read_committed), by partition.
async fn read_all(
    bootstrap: &str,
    isolation: &str,
    partitions: &[TopicPartition],
) -> BTreeMap<TopicPartition, Vec<String>> {
    let mut c = consumer(bootstrap, &[("isolation.level", isolation)]);
    c.assign(partitions.iter().cloned()).unwrap();
    c.seek_to_beginning(&[]).unwrap();
    let ends = c.end_offsets(partitions).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out: BTreeMap<TopicPartition, Vec<String>> =
        partitions.iter().map(|p| (p.clone(), Vec::new())).collect();
    loop {
        let mut done = true;
        for p in partitions {
            done &= c.position(p).await.unwrap() >= ends[p];
        }
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "reading to {ends:?}");
        for r in c.poll(Duration::from_millis(100)).await.unwrap() {
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            out.get_mut(&tp(&r.topic, r.partition)).unwrap().push(value);
        }
    }
    c.close().await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_and_abort_across_partitions() {
    let mut b = common::broker(BROKER).await;
    create(&b.bootstrap, NewTopic::new("tx", 3, 1)).await;
    let parts: Vec<_> = (0..3).map(|p| tp("tx", p)).collect();
    let p = txn_producer(&b.bootstrap, "commit-abort");
    p.init_transactions().await.unwrap();

    let send_all = |tag: &'static str| {
        let p = p.clone();
        async move {
            let mut acks = Vec::new();
            for i in 0..30 {
                let rec = ProducerRecord::new("tx")
                    .partition(i % 3)
                    .value(format!("{tag}-{i}"));
                acks.push(p.send(rec).await.unwrap());
            }
            acks
        }
    };
    // Committed.
    p.begin_transaction().unwrap();
    let acks = send_all("one").await;
    p.commit_transaction().await.unwrap();
    for a in acks {
        a.await.unwrap();
    }
    // Aborted after every record reached the log.
    p.begin_transaction().unwrap();
    let acks = send_all("two").await;
    p.flush().await.unwrap();
    for a in acks {
        a.await.unwrap();
    }
    p.abort_transaction().await.unwrap();
    // Aborted before the records were sent: they fail, as aborted.
    p.begin_transaction().unwrap();
    let unsent = p
        .send(ProducerRecord::new("tx").partition(0).value("never"))
        .await
        .unwrap();
    p.abort_transaction().await.unwrap();
    match unsent.await {
        Ok(_) => {} // it went out before the abort reached it
        Err(ClientError::TransactionAborted(id)) => assert_eq!(id, "commit-abort"),
        Err(e) => panic!("an aborted record failed with {e}"),
    }
    // Committed again.
    p.begin_transaction().unwrap();
    let acks = send_all("three").await;
    p.commit_transaction().await.unwrap();
    for a in acks {
        a.await.unwrap();
    }
    p.close(Duration::from_secs(5)).await.unwrap();

    let expect = |tags: &[&str], part: i32| -> Vec<String> {
        tags.iter()
            .flat_map(|t| {
                (0..30)
                    .filter(move |i| i % 3 == part)
                    .map(move |i| format!("{t}-{i}"))
            })
            .collect()
    };
    let committed = read_all(&b.bootstrap, "read_committed", &parts).await;
    for part in 0..3 {
        assert_eq!(committed[&tp("tx", part)], expect(&["one", "three"], part));
    }
    // The aborted records are in the log: read_uncommitted sees them.
    let everything = read_all(&b.bootstrap, "read_uncommitted", &parts).await;
    for part in 0..3 {
        let seen = &everything[&tp("tx", part)];
        let mut want = expect(&["one", "two"], part);
        want.extend(seen.iter().filter(|v| *v == "never").cloned());
        want.extend(expect(&["three"], part));
        assert_eq!(seen, &want, "partition {part}");
    }
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_transform_produce_commits_offsets_with_the_outputs() {
    let mut b = common::broker(BROKER).await;
    create(&b.bootstrap, NewTopic::new("in", 2, 1)).await;
    create(&b.bootstrap, NewTopic::new("out", 2, 1)).await;
    let plain = Producer::from_properties([("bootstrap.servers", b.bootstrap.as_str())]).unwrap();
    for i in 0..200 {
        let rec = ProducerRecord::new("in")
            .partition(i % 2)
            .value(format!("{i}"));
        plain.send(rec).await.unwrap();
    }
    plain.flush().await.unwrap();
    plain.close(Duration::from_secs(5)).await.unwrap();

    let group = [
        ("group.id", "ctp"),
        ("enable.auto.commit", "false"),
        ("isolation.level", "read_committed"),
        ("max.poll.records", "25"),
    ];
    let mut c = consumer(&b.bootstrap, &group);
    c.subscribe(["in"], None).unwrap();
    let p = txn_producer(&b.bootstrap, "ctp-pipeline");
    p.init_transactions().await.unwrap();
    let inputs = [tp("in", 0), tp("in", 1)];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut transactions = 0;
    let mut aborted = 0;
    loop {
        let mut done = true;
        for t in &inputs {
            done &= matches!(c.committed(std::slice::from_ref(t)).await.unwrap()[t], Some(ref o) if o.offset == 100);
        }
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "the pipeline did not finish");
        let records = c.poll(Duration::from_millis(200)).await.unwrap();
        if records.is_empty() {
            continue;
        }
        p.begin_transaction().unwrap();
        let mut next: HashMap<TopicPartition, OffsetAndMetadata> = HashMap::new();
        for r in &records {
            let value = format!(
                "{}-{}",
                r.partition,
                String::from_utf8_lossy(r.value.as_ref().unwrap())
            );
            p.send(
                ProducerRecord::new("out")
                    .partition(r.partition)
                    .value(value),
            )
            .await
            .unwrap();
            next.insert(
                tp(&r.topic, r.partition),
                OffsetAndMetadata::new(r.offset + 1),
            );
        }
        let meta = c.group_metadata().unwrap();
        assert_eq!(meta.group_id, "ctp");
        assert!(
            meta.generation_id > 0 && !meta.member_id.is_empty(),
            "{meta:?}"
        );
        p.send_offsets_to_transaction(&next, &meta).await.unwrap();
        transactions += 1;
        if transactions % 3 == 2 {
            // Aborted: its outputs must never show, and its inputs are read again from
            // the group's committed offsets.
            p.flush().await.unwrap();
            p.abort_transaction().await.unwrap();
            aborted += 1;
            for t in &inputs {
                let at = c.committed(std::slice::from_ref(t)).await.unwrap()[t]
                    .as_ref()
                    .map_or(0, |o| o.offset);
                c.seek(t, at).unwrap();
            }
            continue;
        }
        p.commit_transaction().await.unwrap();
    }
    assert!(aborted > 0);
    p.close(Duration::from_secs(5)).await.unwrap();
    c.close().await.unwrap();

    let outputs = [tp("out", 0), tp("out", 1)];
    let committed = read_all(&b.bootstrap, "read_committed", &outputs).await;
    for part in 0..2i32 {
        let want: Vec<String> = (0..200)
            .filter(|i| i % 2 == part)
            .map(|i| format!("{part}-{i}"))
            .collect();
        assert_eq!(committed[&tp("out", part)], want, "exactly once, in order");
    }
    let everything = read_all(&b.bootstrap, "read_uncommitted", &outputs).await;
    let total: usize = everything.values().map(Vec::len).sum();
    assert!(total > 200, "the aborted outputs reached the log ({total})");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_is_fenced_by_its_successor() {
    let mut b = common::broker(BROKER).await;
    let zombie = txn_producer(&b.bootstrap, "fenced");
    zombie.init_transactions().await.unwrap();
    zombie.begin_transaction().unwrap();
    zombie
        .send_and_wait(ProducerRecord::new("fence").value("zombie"))
        .await
        .unwrap();

    // The successor's init aborts the zombie's open transaction and fences it.
    let successor = txn_producer(&b.bootstrap, "fenced");
    successor.init_transactions().await.unwrap();
    let fatal = zombie.commit_transaction().await.unwrap_err();
    assert!(
        matches!(fatal, ClientError::TransactionFatal(_)),
        "a fenced producer's commit: {fatal}"
    );
    let code = fatal.root_code();
    assert!(code == Some(90) || code == Some(47), "{fatal}");
    // Fatal for good: every later call says so.
    assert!(matches!(
        zombie.begin_transaction(),
        Err(ClientError::TransactionFatal(_))
    ));
    assert!(matches!(
        zombie.abort_transaction().await,
        Err(ClientError::TransactionFatal(_))
    ));

    successor.begin_transaction().unwrap();
    successor
        .send(ProducerRecord::new("fence").value("successor"))
        .await
        .unwrap();
    successor.commit_transaction().await.unwrap();
    let seen = read_all(&b.bootstrap, "read_committed", &[tp("fence", 0)]).await;
    assert_eq!(seen[&tp("fence", 0)], ["successor"]);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abortable_error_is_aborted_and_the_producer_goes_on() {
    let mut b = common::broker(BROKER).await;
    create(
        &b.bootstrap,
        NewTopic::new("small", 1, 1).config("max.message.bytes", "1000"),
    )
    .await;
    let p = txn_producer(&b.bootstrap, "abortable");
    p.init_transactions().await.unwrap();
    p.begin_transaction().unwrap();
    let ok = p
        .send(ProducerRecord::new("small").value("fits"))
        .await
        .unwrap();
    ok.await.unwrap();
    let big = p
        .send(ProducerRecord::new("small").value(vec![b'x'; 4000]))
        .await
        .unwrap();
    let refused = big.await.unwrap_err();
    assert!(refused.code().is_some(), "the broker refused it: {refused}");
    let e = p.commit_transaction().await.unwrap_err();
    assert!(
        matches!(e, ClientError::TransactionAbortable(_)),
        "commit after a refused record: {e}"
    );
    // Sends are refused with the same error until the abort.
    assert!(matches!(
        p.send(ProducerRecord::new("small").value("later")).await,
        Err(ClientError::TransactionAbortable(_))
    ));
    p.abort_transaction().await.unwrap();
    p.begin_transaction().unwrap();
    p.send(ProducerRecord::new("small").value("after"))
        .await
        .unwrap();
    p.commit_transaction().await.unwrap();
    let seen = read_all(&b.bootstrap, "read_committed", &[tp("small", 0)]).await;
    assert_eq!(seen[&tp("small", 0)], ["after"]);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misuse_is_refused_as_illegal_state() {
    let mut b = common::broker(BROKER).await;
    let p = txn_producer(&b.bootstrap, "misuse");
    let illegal = |r: Result<(), ClientError>| {
        assert!(matches!(r, Err(ClientError::IllegalState(_))), "{r:?}");
    };
    illegal(p.begin_transaction());
    p.init_transactions().await.unwrap();
    illegal(p.init_transactions().await);
    illegal(
        p.send(ProducerRecord::new("misuse").value("outside"))
            .await
            .map(drop),
    );
    illegal(p.commit_transaction().await);
    illegal(p.abort_transaction().await);
    p.begin_transaction().unwrap();
    illegal(p.begin_transaction());
    // An empty transaction commits without the coordinator.
    p.commit_transaction().await.unwrap();
    let offsets = HashMap::from([(tp("misuse", 0), OffsetAndMetadata::new(1))]);
    illegal(
        p.send_offsets_to_transaction(&offsets, &ConsumerGroupMetadata::new("g"))
            .await,
    );

    let plain = Producer::from_properties([("bootstrap.servers", b.bootstrap.as_str())]).unwrap();
    illegal(plain.begin_transaction());
    b.stop().await;
}
