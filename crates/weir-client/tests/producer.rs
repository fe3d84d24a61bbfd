//! The producer against a real broker: every record acknowledged lands exactly once, in
//! order per partition, keys on murmur2's partition, in every codec; backpressure and an
//! unreachable broker end in clear errors within max.block.ms.

mod common;

use std::time::{Duration, Instant};

use weir_client::partitioner::partition_for_key;
use weir_client::{ClientError, Producer, ProducerRecord};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_record_lands_once_in_order_in_every_codec() {
    let mut b = common::broker(&[("num.partitions", "3")]).await;
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("p-{codec}");
        let p = Producer::from_properties([
            ("bootstrap.servers", b.bootstrap.as_str()),
            ("compression.type", codec),
            ("linger.ms", "2"),
        ])
        .unwrap();
        let mut futures = Vec::new();
        for i in 0..3000 {
            let rec = ProducerRecord::new(topic.as_str())
                .key(format!("key-{}", i % 50))
                .value(format!("{codec}-{i}"))
                .header("n", Some(i.to_string()));
            futures.push(p.send(rec).await.unwrap());
        }
        let mut acked = Vec::new();
        for f in futures {
            acked.push(f.await.unwrap());
        }
        p.close(Duration::from_secs(5)).await.unwrap();
        // Each key on murmur2's partition; offsets as acknowledged; order kept per partition.
        for (i, m) in acked.iter().enumerate() {
            let key = format!("key-{}", i % 50);
            assert_eq!(
                m.partition as usize,
                partition_for_key(key.as_bytes(), 3),
                "record {i}"
            );
        }
        let mut total = 0;
        for part in 0..3 {
            let stored = b.records(&topic, part);
            total += stored.len();
            let offsets: Vec<i64> = stored.iter().map(|r| r.0).collect();
            assert_eq!(
                offsets,
                (0..stored.len() as i64).collect::<Vec<_>>(),
                "no gaps, no duplicates"
            );
            let mine: Vec<&weir_client::RecordMetadata> =
                acked.iter().filter(|m| m.partition == part).collect();
            assert_eq!(mine.len(), stored.len());
            let mut last = -1;
            for m in mine {
                assert!(m.offset > last, "acknowledged in order");
                last = m.offset;
                let (_, _, value) = &stored[m.offset as usize];
                let i = acked.iter().position(|x| x == m).unwrap();
                assert_eq!(value.as_deref(), Some(format!("{codec}-{i}").as_bytes()));
            }
        }
        assert_eq!(total, 3000, "{codec}");
    }
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unkeyed_records_stick_to_a_partition_per_batch_and_spread() {
    let mut b = common::broker(&[("num.partitions", "4")]).await;
    let p = Producer::from_properties([
        ("bootstrap.servers", b.bootstrap.as_str()),
        ("batch.size", "2000"),
        ("linger.ms", "0"),
    ])
    .unwrap();
    let mut futures = Vec::new();
    for i in 0..4000 {
        futures.push(
            p.send(ProducerRecord::new("sticky").value(format!("v{i:06}-padding-padding")))
                .await
                .unwrap(),
        );
    }
    let mut per = [0usize; 4];
    let mut switches = 0;
    let mut last = -1;
    for f in futures {
        let m = f.await.unwrap();
        per[m.partition as usize] += 1;
        if m.partition != last {
            switches += 1;
            last = m.partition;
        }
    }
    assert!(
        per.iter().all(|n| *n > 300),
        "spread over partitions: {per:?}"
    );
    assert!(
        switches < 400,
        "records stick for a batch at a time: {switches} switches"
    );
    p.close(Duration::from_secs(5)).await.unwrap();
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_broker_means_a_clear_error_within_max_block_ms() {
    let p = Producer::from_properties([
        ("bootstrap.servers", "127.0.0.1:1"),
        ("max.block.ms", "500"),
    ])
    .unwrap();
    let start = Instant::now();
    let err = match p.send(ProducerRecord::new("t").value("x")).await {
        Err(e) => e,
        Ok(_) => panic!("sent without a broker"),
    };
    assert!(start.elapsed() < Duration::from_secs(3));
    assert!(
        matches!(
            err,
            ClientError::Connection { .. } | ClientError::Timeout { .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("max.block.ms"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_too_large_for_the_topic_fails_and_others_still_go() {
    let mut b = common::broker(&[("message.max.bytes", "2000")]).await;
    let p = Producer::from_properties([
        ("bootstrap.servers", b.bootstrap.as_str()),
        ("linger.ms", "0"),
    ])
    .unwrap();
    let big = p
        .send(ProducerRecord::new("limits").value(vec![b'x'; 5000]))
        .await
        .unwrap();
    let err = big.await.unwrap_err();
    assert_eq!(err.code(), Some(10), "MESSAGE_TOO_LARGE: {err}");
    let ok = p
        .send_and_wait(ProducerRecord::new("limits").value("fits"))
        .await
        .unwrap();
    assert_eq!(ok.offset, 0);
    let local = p
        .send(ProducerRecord::new("limits").value(vec![b'x'; 2 << 20]))
        .await;
    assert!(matches!(
        local,
        Err(ClientError::RecordTooLarge {
            setting: "max.request.size",
            ..
        })
    ));
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_the_broker_finds_too_large_is_split_so_only_the_big_record_fails() {
    let mut b = common::broker(&[("message.max.bytes", "300")]).await;
    for idempotent in ["true", "false"] {
        let topic = format!("split-{idempotent}");
        let p = Producer::from_properties([
            ("bootstrap.servers", b.bootstrap.as_str()),
            ("linger.ms", "100"),
            ("enable.idempotence", idempotent),
        ])
        .unwrap();
        // One lingering batch: small, big, small.
        let start = Instant::now();
        let first = p
            .send(ProducerRecord::new(topic.as_str()).value("a"))
            .await
            .unwrap();
        let big = p
            .send(ProducerRecord::new(topic.as_str()).value(vec![b'x'; 600]))
            .await
            .unwrap();
        let last = p
            .send(ProducerRecord::new(topic.as_str()).value("c"))
            .await
            .unwrap();
        assert_eq!(first.await.unwrap().offset, 0);
        assert_eq!(big.await.unwrap_err().code(), Some(10), "MESSAGE_TOO_LARGE");
        assert_eq!(last.await.unwrap().offset, 1);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        p.close(Duration::from_secs(5)).await.unwrap();
        let stored: Vec<_> = b
            .records(&topic, 0)
            .into_iter()
            .map(|r| r.2.unwrap())
            .collect();
        assert_eq!(stored, vec![b"a".to_vec(), b"c".to_vec()]);
    }
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_for_some_records_fails_those_as_invalid_and_the_rest_apart() {
    let mut b = common::broker(&[("log.cleanup.policy", "compact")]).await;
    for idempotent in ["true", "false"] {
        let topic = format!("compacted-{idempotent}");
        let p = Producer::from_properties([
            ("bootstrap.servers", b.bootstrap.as_str()),
            ("linger.ms", "100"),
            ("enable.idempotence", idempotent),
        ])
        .unwrap();
        // One lingering batch of five; records 1 and 3 have no key.
        let mut sent = Vec::new();
        for i in 0..5 {
            let r = ProducerRecord::new(topic.as_str()).value(format!("v{i}"));
            let r = if i % 2 == 1 {
                r
            } else {
                r.key(format!("k{i}"))
            };
            sent.push(p.send(r).await.unwrap());
        }
        let mut outcomes = Vec::new();
        for f in sent {
            outcomes.push(f.await.unwrap_err());
        }
        for (i, e) in outcomes.iter().enumerate() {
            if i % 2 == 1 {
                assert_eq!(e.code(), Some(87), "record {i}: INVALID_RECORD, got {e}");
                assert!(e.to_string().contains("without a key"), "{e}");
            } else {
                // The broker's summary of the batch: how many records it refused.
                assert!(
                    matches!(e, ClientError::InvalidDifferentRecord { reason }
                        if reason.starts_with("2 record(s) of the batch were refused")),
                    "record {i}: {e}"
                );
            }
        }
        // Nothing of that batch was written; the producer goes on.
        let ok = p
            .send_and_wait(ProducerRecord::new(topic.as_str()).key("k").value("after"))
            .await
            .unwrap();
        assert_eq!(ok.offset, 0);
        p.close(Duration::from_secs(5)).await.unwrap();
    }
    b.stop().await;
}

/// Collects what a `DeliveryListener` is told.
#[derive(Default)]
struct Reports(std::sync::Mutex<Vec<(u64, weir_client::Result<weir_client::RecordMetadata>)>>);

impl weir_client::DeliveryListener for Reports {
    fn on_delivery(&self, token: u64, result: weir_client::Result<weir_client::RecordMetadata>) {
        self.0.lock().unwrap().push((token, result));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_hears_of_every_record_once_with_its_token() {
    let b = common::broker(&[("num.partitions", "2")]).await;
    let reports = std::sync::Arc::new(Reports::default());
    let listener: std::sync::Arc<dyn weir_client::DeliveryListener> = reports.clone();
    let p = Producer::from_properties([
        ("bootstrap.servers", b.bootstrap.as_str()),
        ("max.request.size", "2000"),
    ])
    .unwrap();
    let topic: std::sync::Arc<str> = "heard".into();
    for i in 0..5000u64 {
        let rec = ProducerRecord::new(topic.clone())
            .partition((i % 2) as i32)
            .value(format!("v{i}"));
        p.send_with_listener(rec, &listener, i).await.unwrap();
    }
    p.flush().await.unwrap();
    p.close(Duration::from_secs(5)).await.unwrap();
    let mut got = std::mem::take(&mut *reports.0.lock().unwrap());
    got.sort_by_key(|(t, _)| *t);
    assert_eq!(got.len(), 5000);
    let mut next = [0i64; 2];
    for (i, (token, r)) in got.iter().enumerate() {
        assert_eq!(*token, i as u64);
        let m = r.as_ref().unwrap();
        assert_eq!(&*m.topic, "heard");
        assert_eq!(m.partition as u64, i as u64 % 2);
        // Tokens in send order meet offsets in send order, per partition.
        assert_eq!(m.offset, next[m.partition as usize]);
        next[m.partition as usize] += 1;
    }
}
