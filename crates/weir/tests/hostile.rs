//! Hostile input against a started `weir serve`, the way a scanner, a broken client or an
//! attacker meets the port: impossible size prefixes, truncated frames, garbage, huge array
//! counts and absurd fields, decompression bombs in every codec, slowloris connections,
//! a client that never reads its responses, and 10,000 idle connections. Throughout, a
//! well-behaved producer keeps sending; at the end the broker must still be up, that
//! producer must have had every record acknowledged in order, and the broker's peak memory
//! must stay under the bound RELIABILITY.md states:
//!
//!   resident memory ≤ memory at start + queued.max.request.bytes
//!                     + cores × MAX_DECOMPRESSED_BYTES + 16 KiB per connection
//!                     + per connection whose client does not read its answers:
//!                       1 MiB of them, or one larger one, and the one being written.
//!
//! The figures it prints (latencies of the well-behaved producer, peak memory) are
//! recorded in RELIABILITY.md; the assertions are limits of correctness, not speed.

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use common::{frame, read_frame, weir, Server};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_client::{Producer, ProducerRecord};
use weir_record::{BatchBuilder, Compression};

/// `queued.max.request.bytes` for the broker under attack.
const REQUEST_MEMORY: u64 = 64 << 20;
/// weir_log's validator inflates a batch at most this far.
const MAX_DECOMPRESSED: u64 = 64 << 20;
const IDLE_CONNECTIONS: usize = 10_000;

/// Starts `weir serve` on a new directory, with `queued.max.request.bytes` set.
fn start() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &[format!("queued.max.request.bytes={REQUEST_MEMORY}")],
    );
    (server, dir)
}

/// A frame of hand-written bytes after a header of `api`/`version` (header v1, or v2 with
/// its empty tagged fields when `flexible`).
fn raw_frame(api: i16, version: i16, flexible: bool, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&api.to_be_bytes());
    b.extend_from_slice(&version.to_be_bytes());
    b.extend_from_slice(&7i32.to_be_bytes());
    b.extend_from_slice(&7i16.to_be_bytes());
    b.extend_from_slice(b"hostile");
    if flexible {
        b.push(0);
    }
    b.extend_from_slice(body);
    let mut out = (b.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&b);
    out
}

/// Sends `bytes` on a new connection and returns what came back: a response frame, or
/// `None` when the broker closed the connection. Either is fine; hanging is not.
async fn send_raw(addr: &str, bytes: &[u8]) -> Option<Bytes> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    if s.write_all(bytes).await.is_err() {
        return None;
    }
    read_frame(&mut s).await
}

/// Sends a frame the broker must refuse by closing the connection.
async fn expect_closed(addr: &str, bytes: &[u8], what: &str) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "{what}: the broker should have closed the connection, got {read:?}"
    );
}

fn produce_request(topic: &str, records: Bytes) -> RequestKind {
    let mut p = produce_request::PartitionProduceData::default();
    p.index = 0;
    p.records = Some(records);
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_data.push(p);
    let mut req = ProduceRequest::default();
    req.acks = 1;
    req.timeout_ms = 10_000;
    req.topic_data.push(t);
    RequestKind::Produce(req)
}

/// The first partition's error code of a Produce v3 response frame.
fn produce_error(mut frame: Bytes) -> i16 {
    frame.advance(4); // the correlation id
    let resp = ProduceResponse::decode(&mut frame, 3).unwrap();
    resp.responses[0].partition_responses[0].error_code
}

/// A batch of one record of `size` zero bytes: a few KiB compressed in most codecs,
/// `size` once inflated.
fn bomb(codec: Compression, size: usize) -> Bytes {
    let zeros = vec![0u8; size];
    let mut b = BatchBuilder::new(codec, 0, usize::MAX);
    b.append(0, None, Some(&zeros), &[]).unwrap();
    Bytes::from(b.build().unwrap().bytes)
}

async fn impossible_sizes(addr: &str) {
    for size in [i32::MIN, -1, 0, 7, 104_857_601, i32::MAX] {
        expect_closed(addr, &size.to_be_bytes(), &format!("size prefix {size}")).await;
    }
}

async fn truncated_frames(addr: &str) {
    // A frame cut short, and a half-written size prefix, then the client hangs up.
    for (announced, sent) in [(1000i32, 100usize), (10 << 20, 4096), (64, 0)] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut bytes = announced.to_be_bytes().to_vec();
        bytes.resize(4 + sent, 0xAB);
        s.write_all(&bytes).await.unwrap();
        drop(s);
    }
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0, 0]).await.unwrap();
    drop(s);
}

async fn garbage(addr: &str) {
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..300 {
        let len = rng.usize(8..2048);
        let mut body: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
        // Mostly real API keys and versions, so the garbage reaches the body decoders.
        body[0] = 0;
        body[1] = rng.u8(0..70);
        body[2] = 0;
        body[3] = rng.u8(0..16);
        let mut bytes = (len as i32).to_be_bytes().to_vec();
        bytes.extend_from_slice(&body);
        let _ = send_raw(addr, &bytes).await;
    }
}

async fn absurd_fields(addr: &str) {
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // Metadata v1: a topic array of 2^31-1 entries, and nothing behind it.
    cases.push((
        "metadata array count",
        raw_frame(3, 1, false, &i32::MAX.to_be_bytes()),
    ));
    // Metadata v4: two topics, the first named by a 32767-byte string of 3 bytes.
    let mut b = 2i32.to_be_bytes().to_vec();
    b.extend_from_slice(&32767i16.to_be_bytes());
    b.extend_from_slice(b"abc");
    cases.push(("string longer than the frame", raw_frame(3, 4, false, &b)));
    // Metadata v4: a topic name of negative length (-2).
    let mut b = 1i32.to_be_bytes().to_vec();
    b.extend_from_slice(&(-2i16).to_be_bytes());
    cases.push(("negative string length", raw_frame(3, 4, false, &b)));
    // Produce v3: 2^31-1 topics.
    let mut b = (-1i16).to_be_bytes().to_vec();
    b.extend_from_slice(&1i16.to_be_bytes());
    b.extend_from_slice(&1000i32.to_be_bytes());
    b.extend_from_slice(&i32::MAX.to_be_bytes());
    cases.push(("produce topic count", raw_frame(0, 3, false, &b)));
    // Produce v9 (flexible): a compact array count of 2^32-2, as a maximal varint.
    let mut b = vec![0u8];
    b.extend_from_slice(&1i16.to_be_bytes());
    b.extend_from_slice(&1000i32.to_be_bytes());
    b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    cases.push(("compact array count", raw_frame(0, 9, true, &b)));
    // Produce v9: no topics, then 2^32-2 tagged fields.
    let mut b = vec![0u8];
    b.extend_from_slice(&1i16.to_be_bytes());
    b.extend_from_slice(&1000i32.to_be_bytes());
    b.push(1);
    b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    cases.push(("tagged field count", raw_frame(0, 9, true, &b)));
    // Produce v9: a varint that never ends.
    let mut b = vec![0u8];
    b.extend_from_slice(&1i16.to_be_bytes());
    b.extend_from_slice(&1000i32.to_be_bytes());
    b.extend_from_slice(&[0xff; 64]);
    cases.push(("endless varint", raw_frame(0, 9, true, &b)));
    // Produce v3: one topic, one partition, records of length 2^31-1 and of length -5.
    for len in [i32::MAX, -5] {
        let mut b = (-1i16).to_be_bytes().to_vec();
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&1000i32.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&4i16.to_be_bytes());
        b.extend_from_slice(b"good");
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(&[0u8; 61]);
        cases.push(("records length", raw_frame(0, 3, false, &b)));
    }
    // An API key no one has, and ApiVersions at a version from the future.
    cases.push(("unknown API", raw_frame(9999, 0, false, &[])));
    cases.push(("future ApiVersions", raw_frame(18, i16::MAX, false, &[])));
    for (what, bytes) in &cases {
        // Answered with an error, or closed: both fine, as long as the broker lives on.
        let _ = tokio::time::timeout(Duration::from_secs(30), send_raw(addr, bytes))
            .await
            .unwrap_or_else(|_| panic!("{what}: the broker neither answered nor closed"));
    }

    // Absurd but well-formed requests get Kafka's error codes.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut t = create_topics_request::CreatableTopic::default();
    t.name = TopicName(StrBytes::from_static_str("absurd"));
    t.num_partitions = i32::MAX;
    t.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics.push(t);
    req.timeout_ms = 5000;
    s.write_all(&frame(
        ApiKey::CreateTopics,
        2,
        1,
        &RequestKind::CreateTopics(req),
    ))
    .await
    .unwrap();
    let mut resp = read_frame(&mut s).await.expect("a CreateTopics answer");
    resp.advance(4);
    let resp = CreateTopicsResponse::decode(&mut resp, 2).unwrap();
    assert_eq!(
        resp.topics[0].error_code, 44,
        "POLICY_VIOLATION for 2^31-1 partitions, more than one request may create"
    );
}

async fn decompression_bombs(addr: &str) {
    // 80 MiB of zeros inflates past the validator's 64 MiB: refused, never held whole.
    let size = 80 << 20;
    let mut codecs = Vec::new();
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let batch = tokio::task::spawn_blocking(move || bomb(codec, size))
            .await
            .unwrap();
        codecs.push((codec, batch));
    }
    for (codec, batch) in &codecs {
        let bytes = frame(
            ApiKey::Produce,
            3,
            1,
            &produce_request("bombs", batch.clone()),
        );
        let resp = send_raw(addr, &bytes)
            .await
            .unwrap_or_else(|| panic!("{codec:?} bomb: no answer"));
        let code = produce_error(resp);
        // CORRUPT_MESSAGE, MESSAGE_TOO_LARGE (the batch itself is over max.message.bytes).
        assert!(
            matches!(code, 2 | 10),
            "{codec:?} bomb ({} bytes compressed): error code {code}",
            batch.len()
        );
    }
    // Then twenty at once, in the codec that packs the most into one request.
    let zstd = codecs
        .iter()
        .find(|(c, _)| *c == Compression::Zstd)
        .unwrap()
        .1
        .clone();
    let bytes = frame(ApiKey::Produce, 3, 1, &produce_request("bombs", zstd));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (addr, bytes) = (addr.to_string(), bytes.clone());
        tasks.push(tokio::spawn(async move { send_raw(&addr, &bytes).await }));
    }
    for t in tasks {
        let resp = t.await.unwrap().expect("a zstd bomb got no answer");
        assert_eq!(produce_error(resp), 2);
    }
}

/// Connections that announce a large request and send it a byte at a time, or send half
/// a size prefix and stop. They run until `stop`.
fn slowloris(addr: &str, n: usize, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|i| {
            let (addr, stop) = (addr.to_string(), stop.clone());
            tokio::spawn(async move {
                let Ok(mut s) = TcpStream::connect(&addr).await else {
                    return;
                };
                if i % 2 == 0 {
                    let _ = s.write_all(&[0, 0]).await;
                } else {
                    let _ = s.write_all(&(50_000_000i32).to_be_bytes()).await;
                }
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if i % 2 == 1 && s.write_all(&[1]).await.is_err() {
                        return;
                    }
                }
            })
        })
        .collect()
}

/// A client that pipelines fetches of a full partition and never reads the answers.
async fn never_reads(addr: &str, topic: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    for corr in 0..300 {
        let mut p = fetch_request::FetchPartition::default();
        p.partition = 0;
        p.fetch_offset = 0;
        p.partition_max_bytes = 8 << 20;
        let mut t = fetch_request::FetchTopic::default();
        t.topic = TopicName(StrBytes::from_string(topic.to_string()));
        t.partitions.push(p);
        let mut req = FetchRequest::default();
        req.replica_id = BrokerId(-1);
        req.max_wait_ms = 0;
        req.max_bytes = 8 << 20;
        req.topics.push(t);
        let bytes = frame(ApiKey::Fetch, 4, corr, &RequestKind::Fetch(req));
        if tokio::time::timeout(Duration::from_secs(2), s.write_all(&bytes))
            .await
            .is_err()
        {
            break; // the broker stopped reading from us: what it should do
        }
    }
    s
}

/// Each side of the test (this process and the broker it starts) opens a descriptor per
/// connection; the broker inherits this limit.
fn raise_fd_limit() {
    let need = IDLE_CONNECTIONS + 2000;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    assert!(
        lim.rlim_cur as usize >= need,
        "this test needs {need} open files; ulimit -Hn is {}",
        lim.rlim_max
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_cannot_take_the_broker_down_or_its_memory_past_the_bound() {
    raise_fd_limit();
    let (mut server, _dir) = start();
    let addr = server.addr.clone();
    for topic in ["good", "bombs", "full"] {
        weir(&["topics", "create", "--bootstrap", &addr, "--topic", topic]);
    }
    // 8 MiB in "full", for the client that never reads.
    let filler =
        Producer::from_properties([("bootstrap.servers", addr.as_str()), ("acks", "1")]).unwrap();
    let value = Bytes::from(vec![7u8; 8192]);
    let mut acks = Vec::new();
    for _ in 0..1024 {
        acks.push(
            filler
                .send(ProducerRecord::new("full").value(value.clone()))
                .await
                .unwrap(),
        );
    }
    for ack in acks {
        ack.await.unwrap();
    }
    filler.flush().await.unwrap();
    filler.close(Duration::from_secs(10)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (at_start, _) = server.memory_kib();

    // The well-behaved producer: one record at a time, each awaited.
    let stop = Arc::new(AtomicBool::new(false));
    let good = {
        let (addr, stop) = (addr.clone(), stop.clone());
        tokio::spawn(async move {
            let producer =
                Producer::from_properties([("bootstrap.servers", addr.as_str()), ("acks", "all")])
                    .unwrap();
            let mut latencies = Vec::new();
            let mut offsets = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let md = producer
                    .send_and_wait(ProducerRecord::new("good").value(&b"still here"[..]))
                    .await
                    .expect("the well-behaved producer's record was refused");
                latencies.push(started.elapsed());
                offsets.push(md.offset);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            producer.close(Duration::from_secs(10)).await.unwrap();
            (latencies, offsets)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    let slow = slowloris(&addr, 1000, stop.clone());
    let silent = never_reads(&addr, "full").await;
    impossible_sizes(&addr).await;
    truncated_frames(&addr).await;
    garbage(&addr).await;
    absurd_fields(&addr).await;
    decompression_bombs(&addr).await;

    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for _ in 0..IDLE_CONNECTIONS {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    // Long enough for the broker to have accepted them all, the good producer to go on.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (with_idle, _) = server.memory_kib();
    assert!(server.alive(), "the broker died");

    stop.store(true, Ordering::Relaxed);
    let (latencies, offsets) = good.await.unwrap();
    for s in slow {
        s.await.unwrap();
    }
    let (_, peak) = server.memory_kib();
    drop(idle);
    drop(silent);
    assert!(server.alive(), "the broker died");

    // Every record of the well-behaved producer acknowledged, in order, nothing skipped.
    assert!(latencies.len() > 20, "the good producer barely ran");
    let expected: Vec<i64> = (0..offsets.len() as i64).collect();
    assert_eq!(offsets, expected);
    let mut sorted = latencies.clone();
    sorted.sort();
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p) as usize];
    let max = *sorted.last().unwrap();
    assert!(
        max < Duration::from_secs(5),
        "a well-behaved request waited {max:?} during the attack"
    );

    let connections = (IDLE_CONNECTIONS + 1000 + 1) as u64;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let bound = at_start
        + REQUEST_MEMORY / 1024
        + cores * MAX_DECOMPRESSED / 1024
        + 16 * connections
        // The client that never reads: its answers wait, at most 1 MiB of them.
        + 1024;
    let report = format!(
        "hostile: {} well-behaved sends during the attack, latency p50 {:?} p99 {:?} max {:?}; \
         broker memory {} MiB at start, {} MiB with {} idle + 1000 slowloris connections, \
         peak {} MiB (bound {} MiB)",
        latencies.len(),
        pct(0.5),
        pct(0.99),
        max,
        at_start / 1024,
        with_idle / 1024,
        IDLE_CONNECTIONS,
        peak / 1024,
        bound / 1024
    );
    println!("{report}");
    let _ = std::io::stdout().flush();
    assert!(peak <= bound, "{report}");
}
