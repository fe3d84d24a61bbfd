//! One request must not cripple the broker (issue 18). Each scenario starts `weir serve`
//! as a child process with a low limit of open files set for the child alone (soft and
//! hard, so it cannot raise them), sends what an unauthenticated client can send, and
//! checks what a user would notice:
//!
//! - the broker answers, with Kafka's error code and a message that says what to fix;
//! - a producer on another connection saw no request slower than 1 s meanwhile, and new
//!   connections were answered too;
//! - the broker's open descriptors (`/proc/<pid>/fd`) came back to their baseline;
//! - nothing was left on disk that is not a whole topic;
//! - the broker stops and starts again cleanly, with the topics it had.
//!
//! The figures each scenario prints (latencies, descriptors, what was created) are those
//! RELIABILITY.md quotes. Latency bounds here are limits of correctness (a stopped world
//! takes seconds), not speed targets.

mod common;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_kafka::ErrorCode;

use bytes::{Buf, Bytes};
use common::{frame, read_frame, Server};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir_client::{Producer, ProducerRecord};

/// No request of a well-behaved client may take this long while another client does its
/// worst: a broker that stops the world for a topic creation takes many seconds.
const STALL: Duration = Duration::from_secs(1);

/// The scenarios run one at a time: each measures latencies on a shared 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const THROTTLING_QUOTA_EXCEEDED: i16 = ErrorCode::ThrottlingQuotaExceeded.code();
const POLICY_VIOLATION: i16 = ErrorCode::PolicyViolation.code();
const KAFKA_STORAGE_ERROR: i16 = ErrorCode::KafkaStorageError.code();
const UNKNOWN_TOPIC_OR_PARTITION: i16 = ErrorCode::UnknownTopicOrPartition.code();

/// Starts `weir serve` on `data` with at most `nofile` open files, on `port` (a restart
/// keeps the address) or a free one, and waits until it accepts connections.
fn start(data: &Path, nofile: u64, port: Option<u16>, overrides: &[&str]) -> Server {
    let port = port.unwrap_or_else(common::free_port);
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.args(["serve", "--listen", &addr, "--data-dir"])
        .arg(data);
    for o in overrides {
        cmd.args(["--override", o]);
    }
    let log_path = data.with_extension("serve.log");
    std::fs::create_dir_all(data.parent().unwrap()).unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .unwrap();
    // SAFETY: between fork and exec the closure only calls setrlimit, which is
    // async-signal-safe, on a struct of its own.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        let exited = child.try_wait().unwrap();
        if exited.is_some() || started.elapsed() > Duration::from_secs(60) {
            panic!(
                "weir serve did not start ({exited:?}):\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Server {
        child,
        addr,
        data_dir: data.to_path_buf(),
    }
}

/// Stops the broker with SIGTERM, as an operator would, and checks that it exits cleanly.
fn stop(server: &mut Server) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(server.child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(
                status.success(),
                "weir serve exited with {status}: {}",
                log(server)
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "weir serve did not stop: {}",
            log(server)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops the broker and starts it again on the same data and address.
fn restart(server: &mut Server, nofile: u64, overrides: &[&str]) -> Server {
    stop(server);
    start(&server.data_dir, nofile, Some(server.port()), overrides)
}

fn log(server: &Server) -> String {
    std::fs::read_to_string(server.data_dir.with_extension("serve.log")).unwrap_or_default()
}

/// The broker's open descriptors.
/// The open segment files a broker started under `ulimit -n limit` may keep in its cache:
/// what `weir serve` gives the log manager out of its descriptor budget.
fn segment_file_cache(limit: usize) -> usize {
    let budget = weir_broker::descriptors::Budget::new(limit, i32::MAX as usize, 1);
    let mut logs = weir_log::LogManagerConfig::new("/unused");
    weir_broker::descriptors::give_logs_their_share(&mut logs, budget.logs);
    logs.max_open_segment_files
}

fn fds(server: &Server) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", server.child.id()))
        .unwrap()
        .count()
}

/// Waits (a few seconds at most) for the broker's descriptors to come back to `baseline`,
/// or below: connections close and deleted files are let go asynchronously.
async fn settle_fds(server: &Server, baseline: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = fds(server);
        if n <= baseline || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Names in the data directory starting with `prefix`, once no deleted directory is
/// waiting to be removed (they are removed in the background).
async fn on_disk(data: &Path, prefix: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let names: Vec<String> = std::fs::read_dir(data)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let deleting = names.iter().any(|n| n.ends_with("-delete"));
        if !deleting || Instant::now() > deadline {
            assert!(!deleting, "deleted directories stayed behind: {names:?}");
            let mut mine: Vec<String> = names
                .into_iter()
                .filter(|n| n.starts_with(prefix))
                .collect();
            mine.sort();
            return mine;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One request and its response, on a connection of its own or `s`.
async fn call(s: &mut TcpStream, api: ApiKey, version: i16, req: RequestKind) -> ResponseKind {
    s.write_all(&frame(api, version, 1, &req)).await.unwrap();
    let mut resp = read_frame(s)
        .await
        .unwrap_or_else(|| panic!("no answer to {api:?}"));
    ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
    ResponseKind::decode(api, &mut resp, version).unwrap()
}

async fn connect(server: &Server) -> TcpStream {
    TcpStream::connect(&server.addr).await.unwrap()
}

fn name(n: &str) -> TopicName {
    TopicName(StrBytes::from_string(n.to_string()))
}

async fn create_topics(
    server: &Server,
    topics: &[(&str, i32)],
) -> Vec<create_topics_response::CreatableTopicResult> {
    let mut req = CreateTopicsRequest::default();
    req.timeout_ms = 60_000;
    for (n, p) in topics {
        let mut t = create_topics_request::CreatableTopic::default();
        t.name = name(n);
        t.num_partitions = *p;
        t.replication_factor = 1;
        req.topics.push(t);
    }
    let mut s = connect(server).await;
    match call(
        &mut s,
        ApiKey::CreateTopics,
        7,
        RequestKind::CreateTopics(req),
    )
    .await
    {
        ResponseKind::CreateTopics(r) => r.topics,
        other => panic!("{other:?}"),
    }
}

/// Metadata v4 for every topic.
async fn metadata_all(s: &mut TcpStream) -> MetadataResponse {
    let mut req = MetadataRequest::default();
    req.topics = None;
    match call(s, ApiKey::Metadata, 4, RequestKind::Metadata(req)).await {
        ResponseKind::Metadata(r) => r,
        other => panic!("{other:?}"),
    }
}

/// Metadata v4 naming `names`, with auto-creation allowed.
async fn metadata(s: &mut TcpStream, names: &[String]) -> MetadataResponse {
    let mut req = MetadataRequest::default();
    req.allow_auto_topic_creation = true;
    req.topics = Some(
        names
            .iter()
            .map(|n| {
                let mut t = metadata_request::MetadataRequestTopic::default();
                t.name = Some(name(n));
                t
            })
            .collect(),
    );
    match call(s, ApiKey::Metadata, 4, RequestKind::Metadata(req)).await {
        ResponseKind::Metadata(r) => r,
        other => panic!("{other:?}"),
    }
}

/// Deletes the topics, retrying those the controller mutation quota holds back (as
/// Kafka's admin client does with THROTTLING_QUOTA_EXCEEDED) until all are gone.
async fn delete_topics(server: &Server, names: &[String]) {
    let mut s = connect(server).await;
    let mut left: Vec<String> = names.to_vec();
    while !left.is_empty() {
        let mut req = DeleteTopicsRequest::default();
        req.timeout_ms = 60_000;
        req.topic_names = left.iter().map(|n| name(n)).collect();
        let r = match call(
            &mut s,
            ApiKey::DeleteTopics,
            5,
            RequestKind::DeleteTopics(req),
        )
        .await
        {
            ResponseKind::DeleteTopics(r) => r,
            other => panic!("{other:?}"),
        };
        let mut again = Vec::new();
        for t in r.responses {
            let topic = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
            match t.error_code {
                0 => {}
                THROTTLING_QUOTA_EXCEEDED => again.push(topic),
                code => panic!("deleting {topic}: {code} {:?}", t.error_message),
            }
        }
        left = again;
        if !left.is_empty() {
            tokio::time::sleep(Duration::from_millis(r.throttle_time_ms.max(10) as u64)).await;
        }
    }
}

/// An ApiVersions round trip on a new connection: connect and answer.
async fn new_connection_answers(addr: &str) -> Duration {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&frame(
        ApiKey::ApiVersions,
        0,
        1,
        &RequestKind::ApiVersions(ApiVersionsRequest::default()),
    ))
    .await
    .unwrap();
    let mut resp = read_frame(&mut s).await.expect("an ApiVersions answer");
    resp.advance(4);
    let r = ApiVersionsResponse::decode(&mut resp, 0).unwrap();
    assert_eq!(r.error_code, 0);
    started.elapsed()
}

/// The well-behaved clients, while a scenario runs: a producer awaiting one record at a
/// time on a connection of its own, and a client opening a new connection for each
/// ApiVersions request.
struct Bystanders {
    started: Instant,
    stop: Arc<AtomicBool>,
    producer: tokio::task::JoinHandle<Vec<Duration>>,
    newcomer: tokio::task::JoinHandle<Vec<Duration>>,
}

/// What the bystanders saw.
struct Seen {
    produce: Vec<Duration>,
    connect: Vec<Duration>,
}

impl Seen {
    fn pct(d: &[Duration], p: f64) -> Duration {
        let mut d = d.to_vec();
        d.sort();
        d[((d.len() - 1) as f64 * p) as usize]
    }

    /// Checks that no request took `STALL` or longer, and says what was seen.
    fn check(&self, scenario: &str) -> String {
        assert!(
            self.produce.len() >= 5,
            "{scenario}: the producer barely ran"
        );
        assert!(
            !self.connect.is_empty(),
            "{scenario}: no new connection was tried"
        );
        let line = format!(
            "{scenario}: producer {} sends, p50 {:?} p99 {:?} max {:?}; new connections {}, \
             p99 {:?} max {:?}",
            self.produce.len(),
            Seen::pct(&self.produce, 0.5),
            Seen::pct(&self.produce, 0.99),
            Seen::pct(&self.produce, 1.0),
            self.connect.len(),
            Seen::pct(&self.connect, 0.99),
            Seen::pct(&self.connect, 1.0),
        );
        println!("{line}");
        let _ = std::io::stdout().flush();
        let worst = Seen::pct(&self.produce, 1.0).max(Seen::pct(&self.connect, 1.0));
        assert!(
            worst < STALL,
            "a well-behaved request waited {worst:?}: {line}"
        );
        line
    }
}

/// Starts the bystanders against `topic` (which exists), sending values of `value_size`
/// bytes; the producer's first send (metadata, connection) is made before timing starts.
async fn bystanders(addr: &str, topic: &str, value_size: usize) -> Bystanders {
    let stop = Arc::new(AtomicBool::new(false));
    let producer =
        Producer::from_properties([("bootstrap.servers", addr), ("acks", "all")]).unwrap();
    let value = Bytes::from(vec![7u8; value_size]);
    producer
        .send_and_wait(ProducerRecord::new(topic.to_string()).value(value.clone()))
        .await
        .expect("the bystander producer's first record");
    let producer = {
        let (stop, topic) = (stop.clone(), topic.to_string());
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                producer
                    .send_and_wait(ProducerRecord::new(topic.clone()).value(value.clone()))
                    .await
                    .expect("a bystander's record was refused");
                latencies.push(started.elapsed());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            producer.close(Duration::from_secs(10)).await.unwrap();
            latencies
        })
    };
    let newcomer = {
        let (stop, addr) = (stop.clone(), addr.to_string());
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                latencies.push(new_connection_answers(&addr).await);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            latencies
        })
    };
    Bystanders {
        started: Instant::now(),
        stop,
        producer,
        newcomer,
    }
}

impl Bystanders {
    /// Stops them, after a second at least, so that a quick scenario still has some
    /// requests of theirs to judge it by.
    async fn finish(self) -> Seen {
        tokio::time::sleep_until((self.started + Duration::from_secs(1)).into()).await;
        self.stop.store(true, Ordering::Relaxed);
        Seen {
            produce: self.producer.await.unwrap(),
            connect: self.newcomer.await.unwrap(),
        }
    }
}

/// A broker with a topic for the bystanders, its descriptors counted once they run.
struct Scene {
    server: Server,
    data: PathBuf,
    _dir: tempfile::TempDir,
}

fn scene(nofile: u64, overrides: &[&str]) -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = start(&data, nofile, None, overrides);
    common::weir(&[
        "topics",
        "create",
        "--bootstrap",
        &server.addr,
        "--topic",
        "bystander",
    ]);
    Scene {
        server,
        data,
        _dir: dir,
    }
}

/// The test process itself opens a descriptor per connection it makes.
fn raise_own_fd_limit(need: usize) {
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

/// Under `ulimit -n 1024`, CreateTopics of one topic with 1,000 partitions is made whole
/// (its segment files open through the log manager's bounded cache, so the descriptors
/// stay within the limit) or, where partitions held descriptors of their own, refused
/// before anything is made; and a topic whose making fails half-way (a partition's
/// directory cannot be made) leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_partitions_under_a_low_file_limit_are_made_whole_or_not_at_all() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A file where partition 60 of "half" would go: its directory cannot be made.
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("half-60"), b"in the way").unwrap();
    let mut server = start(&data, 1024, None, &[]);
    common::weir(&[
        "topics",
        "create",
        "--bootstrap",
        &server.addr,
        "--topic",
        "bystander",
    ]);
    let watch = bystanders(&server.addr, "bystander", 100).await;
    let baseline = fds(&server);

    let started = Instant::now();
    let wide = create_topics(&server, &[("wide", 1000)]).await;
    let took = started.elapsed();
    let wide = &wide[0];
    let message = wide
        .error_message
        .as_deref()
        .unwrap_or_default()
        .to_string();
    if wide.error_code == 0 {
        // Partitions that cost no descriptors of their own (lazily opened logs) fit.
        assert_eq!(wide.num_partitions, 1000);
    } else {
        assert_eq!(wide.error_code, POLICY_VIOLATION, "{message}");
        assert!(
            message.contains("ulimit -n"),
            "the message says what to raise: {message}"
        );
        assert!(on_disk(&data, "wide").await.is_empty());
    }

    let half = create_topics(&server, &[("half", 100)]).await;
    let half_message = half[0]
        .error_message
        .as_deref()
        .unwrap_or_default()
        .to_string();
    assert_eq!(half[0].error_code, KAFKA_STORAGE_ERROR, "{half_message}");
    assert!(
        half_message.contains("half-60") && half_message.contains("nothing of it is left"),
        "{half_message}"
    );
    assert_eq!(
        on_disk(&data, "half").await,
        ["half-60"],
        "only the file in the way"
    );
    let mut s = connect(&server).await;
    let invisible: &[&str] = if wide.error_code == 0 {
        &["half"]
    } else {
        &["wide", "half"]
    };
    for topic in invisible {
        let md = metadata_all(&mut s).await;
        assert!(
            md.topics
                .iter()
                .all(|t| t.name.as_ref().map(|n| n.as_str()) != Some(*topic)),
            "{topic} is visible"
        );
    }
    drop(s);

    let seen = watch.finish().await;
    let after = settle_fds(&server, baseline).await;
    println!(
        "1,000 partitions under ulimit -n 1024: {} in {took:?} ({message}); a failure at \
         partition 60 of 100: {half_message}; broker descriptors {baseline} before, {after} \
         after",
        if wide.error_code == 0 {
            "created"
        } else {
            "refused"
        }
    );
    seen.check("one topic of 1,000 partitions");
    // A refused topic gives every descriptor back. A created one leaves at most the log
    // manager's cache of open segment files fuller, within the logs' share of the limit.
    let cache = if wide.error_code == 0 {
        segment_file_cache(1024)
    } else {
        0
    };
    assert!(
        after <= baseline + cache,
        "descriptors {baseline} before, {after} after (segment-file cache {cache})"
    );

    let mut again = restart(&mut server, 1024, &[]);
    let mut s = connect(&again).await;
    let md = metadata_all(&mut s).await;
    let names: Vec<String> = md
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
        .collect();
    assert!(names.contains(&"bystander".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n == "half"), "{names:?}");
    assert_eq!(wide.error_code == 0, names.iter().any(|n| n == "wide"));
    stop(&mut again);
}

/// CreateTopics and CreatePartitions asking for a million partitions are refused with
/// POLICY_VIOLATION before anything is made, as Kafka refuses more than 10,000 partitions
/// in one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_partitions_are_refused_up_front() {
    let _serial = SERIAL.lock().await;
    let mut sc = scene(20_000, &[]);
    let watch = bystanders(&sc.server.addr, "bystander", 100).await;
    let baseline = fds(&sc.server);
    let r = create_topics(&sc.server, &[("million", 1_000_000)]).await;
    let message = r[0]
        .error_message
        .as_deref()
        .unwrap_or_default()
        .to_string();
    assert_eq!(r[0].error_code, POLICY_VIOLATION, "{message}");
    assert!(message.contains("Excessively large number of partitions per request"));
    // Two topics that fit alone but not together: both are refused, as in Kafka.
    let r = create_topics(&sc.server, &[("a", 6000), ("b", 6000)]).await;
    assert!(r.iter().all(|t| t.error_code == POLICY_VIOLATION), "{r:?}");

    let mut req = CreatePartitionsRequest::default();
    req.timeout_ms = 10_000;
    let mut t = create_partitions_request::CreatePartitionsTopic::default();
    t.name = name("bystander");
    t.count = 1_000_000;
    req.topics.push(t);
    let mut s = connect(&sc.server).await;
    let grown = match call(
        &mut s,
        ApiKey::CreatePartitions,
        3,
        RequestKind::CreatePartitions(req),
    )
    .await
    {
        ResponseKind::CreatePartitions(r) => r.results.into_iter().next().unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        grown.error_code, POLICY_VIOLATION,
        "{:?}",
        grown.error_message
    );
    drop(s);

    let seen = watch.finish().await;
    seen.check("a million partitions");
    assert!(on_disk(&sc.data, "million").await.is_empty());
    assert_eq!(on_disk(&sc.data, "bystander").await, ["bystander-0"]);
    let after = settle_fds(&sc.server, baseline).await;
    assert!(
        after <= baseline,
        "descriptors {baseline} before, {after} after"
    );
    println!("a million partitions: {message}");
    let mut again = restart(&mut sc.server, 20_000, &[]);
    stop(&mut again);
}

/// Metadata naming 2,000 new topics under `ulimit -n 1024` auto-creates only what the
/// controller mutation quota allows (Weir's default, then 10 partitions a second), each
/// created topic whole and the others answered UNKNOWN_TOPIC_OR_PARTITION; the broker's
/// descriptors stay within its limit, and deleting the created ones gives them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_naming_many_new_topics_creates_only_what_the_bounds_allow() {
    let _serial = SERIAL.lock().await;
    let names: Vec<String> = (0..2000).map(|i| format!("auto-{i}")).collect();

    // Bounded by the descriptors: ulimit -n 1024, Weir's default quota.
    let mut sc = scene(1024, &[]);
    let watch = bystanders(&sc.server.addr, "bystander", 100).await;
    let baseline = fds(&sc.server);
    let mut s = connect(&sc.server).await;
    let asked = Instant::now();
    let md = metadata(&mut s, &names).await;
    let created: Vec<String> = md
        .topics
        .iter()
        .filter(|t| t.error_code == 0)
        .map(|t| t.name.as_ref().unwrap().to_string())
        .collect();
    assert!(
        md.topics
            .iter()
            .all(|t| t.error_code == 0 || t.error_code == UNKNOWN_TOPIC_OR_PARTITION),
        "{:?}",
        md.topics
            .iter()
            .map(|t| t.error_code)
            .collect::<std::collections::BTreeSet<_>>()
    );
    // Partitions hold no descriptors of their own (their segment files are opened through
    // the log manager's bounded cache), so the controller mutation quota bounds them: its
    // burst of 1,100, and what it refilled (100 a second) while the request ran.
    let refilled_during = (asked.elapsed().as_secs_f64() * 100.0).ceil() as usize;
    assert!(
        !created.is_empty() && created.len() <= 1_100 + refilled_during,
        "{} created ({refilled_during} refilled meanwhile)",
        created.len()
    );
    // Asked again: nothing more fits but what the quota gave back meanwhile, at Weir's
    // default of 100 partitions a second.
    let asked_again = Instant::now();
    let again = metadata(&mut s, &names).await;
    let refilled = (asked_again.duration_since(asked).as_secs_f64() * 100.0).ceil() as usize;
    let now_there = again.topics.iter().filter(|t| t.error_code == 0).count();
    assert!(
        (created.len()..=created.len() + refilled + 1).contains(&now_there),
        "{} created, then {now_there} ({refilled} refilled)",
        created.len()
    );
    let created: Vec<String> = again
        .topics
        .iter()
        .filter(|t| t.error_code == 0)
        .map(|t| t.name.as_ref().unwrap().to_string())
        .collect();
    drop(s);
    let dirs = on_disk(&sc.data, "auto-").await;
    let mut expected: Vec<String> = created.iter().map(|n| format!("{n}-0")).collect();
    expected.sort();
    assert_eq!(dirs, expected, "every created topic whole, nothing else");
    let peak = fds(&sc.server);
    assert!(peak < 1024 - 32, "{peak} descriptors open of 1024");
    delete_topics(&sc.server, &created).await;
    let seen = watch.finish().await;
    let after = settle_fds(&sc.server, baseline).await;
    println!(
        "Metadata naming 2,000 new topics under ulimit -n 1024: {} created, the rest \
         UNKNOWN_TOPIC_OR_PARTITION; descriptors {baseline} before, {peak} with them, {after} \
         after deleting them",
        created.len()
    );
    seen.check("Metadata naming 2,000 new topics (descriptors)");
    assert!(
        after <= baseline,
        "descriptors {baseline} before, {after} after"
    );
    assert!(on_disk(&sc.data, "auto-").await.is_empty());
    let mut again = restart(&mut sc.server, 1024, &[]);
    stop(&mut again);

    // Bounded by the controller mutation quota: 10 partitions a second, 110 at once.
    let quota = ["controller.mutation.rate=10"];
    let mut sc = scene(4096, &quota);
    let watch = bystanders(&sc.server.addr, "bystander", 100).await;
    let mut s = connect(&sc.server).await;
    let md = metadata(&mut s, &names).await;
    let first = md.topics.iter().filter(|t| t.error_code == 0).count();
    assert!(
        (100..=112).contains(&first),
        "{first} created in the first burst"
    );
    assert!(md.throttle_time_ms > 0, "the client is told to back off");
    let others: Vec<String> = (0..2000).map(|i| format!("more-{i}")).collect();
    let md = metadata(&mut s, &others).await;
    let second = md.topics.iter().filter(|t| t.error_code == 0).count();
    assert!(second <= 20, "{second} created right after the burst");
    drop(s);
    let seen = watch.finish().await;
    println!(
        "Metadata naming 2,000 new topics at controller.mutation.rate=10: {first} created, \
         then {second} by the next 2,000 names; throttle {} ms",
        md.throttle_time_ms
    );
    seen.check("Metadata naming 2,000 new topics (quota)");
    assert_eq!(on_disk(&sc.data, "auto-").await.len(), first);
    let mut again = restart(&mut sc.server, 4096, &quota);
    let mut s = connect(&again).await;
    let md = metadata_all(&mut s).await;
    assert_eq!(
        md.topics.len(),
        1 + first + second,
        "every created topic survives"
    );
    drop(s);
    stop(&mut again);
}

/// 3,000 topics auto-created (by Metadata requests of 500 names) while a producer runs:
/// none of its requests, and no new connection, waits a second. Creating a topic no
/// longer rewrites a file that grows with the topics, nor holds the lock every request
/// reads through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_auto_created_topics_do_not_hold_up_a_producer() {
    let _serial = SERIAL.lock().await;
    raise_own_fd_limit(4096);
    let overrides = ["controller.mutation.rate=1000000"];
    let mut sc = scene(20_000, &overrides);
    let watch = bystanders(&sc.server.addr, "bystander", 100).await;
    let baseline = fds(&sc.server);
    let mut s = connect(&sc.server).await;
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for batch in 0..6 {
        let names: Vec<String> = (0..500).map(|i| format!("many-{batch}-{i}")).collect();
        let t = Instant::now();
        let md = metadata(&mut s, &names).await;
        slowest = slowest.max(t.elapsed());
        assert!(md.topics.iter().all(|t| t.error_code == 0), "batch {batch}");
    }
    let took = started.elapsed();
    drop(s);
    let seen = watch.finish().await;
    let with = fds(&sc.server);
    println!(
        "3,000 auto-created topics: {took:?} in all, the slowest Metadata request of 500 \
         names {slowest:?}; broker descriptors {baseline} before, {with} after"
    );
    seen.check("3,000 auto-created topics");
    assert_eq!(on_disk(&sc.data, "many-").await.len(), 3000);
    // Each topic's partition holds its files open: no more, no fewer.
    assert!(with <= baseline + 3000 * 3 + 8, "{with} descriptors");
    let started = Instant::now();
    let mut again = restart(&mut sc.server, 20_000, &overrides);
    let restarted = started.elapsed();
    let mut s = connect(&again).await;
    let md = metadata_all(&mut s).await;
    assert_eq!(md.topics.len(), 3001, "every topic after the restart");
    drop(s);
    println!("3,000 auto-created topics: restarted in {restarted:?}");
    stop(&mut again);
}

/// 9,000 connections that each send only a 64 KiB size prefix (a third of them some bytes
/// of the frame too) hold neither the request memory nor the broker: a producer sending
/// 64 KiB records, and new connections, are served at their usual latency meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nine_thousand_partial_frames_leave_other_clients_served() {
    let _serial = SERIAL.lock().await;
    const PARTIAL: usize = 9_000;
    raise_own_fd_limit(PARTIAL + 1000);
    let overrides = ["queued.max.request.bytes=67108864"];
    let mut sc = scene(20_000, &overrides);
    let watch = bystanders(&sc.server.addr, "bystander", 64 << 10).await;
    let baseline = fds(&sc.server);
    let (rss_before, _) = sc.server.memory_kib();
    let mut partial = Vec::with_capacity(PARTIAL);
    let started = Instant::now();
    for i in 0..PARTIAL {
        let mut s = TcpStream::connect(&sc.server.addr).await.unwrap();
        let mut bytes = (64i32 << 10).to_be_bytes().to_vec();
        if i % 3 == 0 {
            bytes.extend_from_slice(&[0u8; 100]);
        }
        s.write_all(&bytes).await.unwrap();
        partial.push(s);
    }
    let opened = started.elapsed();
    // Long enough for the broker to read every one and for the bystanders to go on.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rss_with, _) = sc.server.memory_kib();
    let with = fds(&sc.server);
    let seen = watch.finish().await;
    drop(partial);
    let after = settle_fds(&sc.server, baseline).await;
    let line = seen.check("9,000 connections holding partial frames");
    println!(
        "9,000 partial frames: opened in {opened:?}; broker descriptors {baseline} before, \
         {with} with them, {after} after; broker memory {} MiB before, {} MiB with them",
        rss_before / 1024,
        rss_with / 1024
    );
    // Every partial frame's connection is held open (give or take the few files the logs
    // open and close on their own meanwhile).
    assert!(
        with + 8 >= baseline + PARTIAL,
        "the broker held {with} descriptors, {baseline} before: {line}"
    );
    assert!(
        after <= baseline,
        "descriptors {baseline} before, {after} after"
    );
    let mut again = restart(&mut sc.server, 20_000, &overrides);
    stop(&mut again);
}

/// 2,000 clients connecting at once all connect within a second: they wait in the
/// listen backlog (`socket.listen.backlog.size`) instead of having their SYNs dropped and
/// retried a second later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_connections_waits_in_the_backlog() {
    let _serial = SERIAL.lock().await;
    const BURST: usize = 2_000;
    raise_own_fd_limit(BURST + 1000);
    let mut sc = scene(20_000, &[]);
    let watch = bystanders(&sc.server.addr, "bystander", 100).await;
    let baseline = fds(&sc.server);
    let go = Arc::new(tokio::sync::Barrier::new(BURST));
    let mut tasks = Vec::with_capacity(BURST);
    for _ in 0..BURST {
        let (addr, go) = (sc.server.addr.clone(), go.clone());
        tasks.push(tokio::spawn(async move {
            go.wait().await;
            let t = Instant::now();
            let s = TcpStream::connect(&addr).await.unwrap();
            (t.elapsed(), s)
        }));
    }
    let mut connects = Vec::with_capacity(BURST);
    let mut streams = Vec::with_capacity(BURST);
    for t in tasks {
        let (d, s) = t.await.unwrap();
        connects.push(d);
        streams.push(s);
    }
    // Every one is served, not only connected.
    for s in streams.iter_mut().step_by(100) {
        match call(
            s,
            ApiKey::ApiVersions,
            0,
            RequestKind::ApiVersions(Default::default()),
        )
        .await
        {
            ResponseKind::ApiVersions(r) => assert_eq!(r.error_code, 0),
            other => panic!("{other:?}"),
        }
    }
    drop(streams);
    let seen = watch.finish().await;
    let worst = Seen::pct(&connects, 1.0);
    println!(
        "a burst of {BURST} connections: connect p50 {:?} p99 {:?} max {worst:?}",
        Seen::pct(&connects, 0.5),
        Seen::pct(&connects, 0.99)
    );
    seen.check("a burst of 2,000 connections");
    assert!(
        worst < STALL,
        "a connection waited {worst:?}: a SYN was dropped and retried"
    );
    let after = settle_fds(&sc.server, baseline).await;
    assert!(
        after <= baseline,
        "descriptors {baseline} before, {after} after"
    );
    let mut again = restart(&mut sc.server, 20_000, &[]);
    stop(&mut again);
}
