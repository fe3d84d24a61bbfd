//! Client quotas as Kafka users set them (`weir quotas`, i.e. AlterClientQuotas by client
//! id), met by a real client (kafka-python): a producer and a consumer over their byte
//! rates are throttled — told throttle_time_ms and held back to their quota — while
//! clients without a quota on the same broker are not, and nothing is lost or reordered.
//!
//! The broker measures over 3 one-second samples (`quota.window.num=3`), so a client's
//! first burst is averaged over 2 seconds and the test takes seconds, not tens of them.
//! The time bounds checked are lower bounds the quota imposes (a throttled client cannot
//! be faster than its quota lets it), never speed targets.

mod common;

use std::process::Command;

use common::{python, weir, Server};

fn quotas(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("quotas")
        .args(args)
        .output()
        .unwrap()
}

/// A kafka-python helper: the largest throttle time a client was told by the broker.
const THROTTLE_MAX: &str = r#"
def throttle_max(client):
    return max([v for g in client.metrics().values() for k, v in g.items()
                if k == "throttle-time-max" and v == v] + [0])
"#;

/// Runs a Python script that must succeed and returns what it printed.
fn run_python(script: &str) -> String {
    let out = Command::new(python())
        .args(["-c", script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    stdout
}

/// The words of the line the script printed for `who`.
fn result_line(stdout: &str, who: &str) -> Vec<String> {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{who} ")))
        .unwrap_or_else(|| panic!("no result for {who}: {stdout}"))
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn clients_over_their_byte_rate_are_throttled_and_others_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["quota.window.num=3".to_string()],
    );
    let b = server.addr.as_str();
    weir(&["topics", "create", "--bootstrap", b, "--topic", "q"]);

    // 100 kB/s for the client id "slow" producing, 200 kB/s for "slow-reader" fetching.
    for (who, quota) in [
        ("slow", "producer_byte_rate=100000"),
        ("slow-reader", "consumer_byte_rate=200000"),
    ] {
        let out = quotas(&[
            "alter",
            "--bootstrap",
            b,
            "--client-id",
            who,
            "--add-config",
            quota,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Rates that are not rates are refused.
    for bad in [
        "producer_byte_rate=0",
        "producer_byte_rate=1.5",
        "request_percentage=0",
    ] {
        let out = quotas(&[
            "alter",
            "--bootstrap",
            b,
            "--client-id",
            "x",
            "--add-config",
            bad,
        ]);
        assert_eq!(out.status.code(), Some(1), "{bad} was accepted");
    }
    let out = quotas(&["describe", "--bootstrap", b, "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        listed,
        serde_json::json!([
            {"entity": {"client-id": "slow"}, "quotas": {"producer_byte_rate": 100000.0}},
            {"entity": {"client-id": "slow-reader"}, "quotas": {"consumer_byte_rate": 200000.0}},
        ])
    );

    // Each producer sends 400 records of 1 kB; the quota allows "slow" 200 kB at once
    // (100 kB/s over the 2 s window) and 100 kB/s after, so at least 2 s in all.
    let script = format!(
        r#"
import time
from kafka import KafkaProducer, KafkaConsumer

{THROTTLE_MAX}
for cid in ["fast", "slow"]:
    p = KafkaProducer(bootstrap_servers="{b}", client_id=cid, acks="all", linger_ms=5)
    start = time.monotonic()
    for i in range(400):
        p.send("q", key=cid.encode(), value=b"%s-%04d-" % (cid.encode(), i) + b"x" * 1000)
    p.flush(timeout=120)
    print(cid, "produced", round(time.monotonic() - start, 2), throttle_max(p))
    p.close()

# Each consumer reads all 800 records; "slow-reader" may fetch 200 kB/s (400 kB at once).
for cid in ["fast-reader", "slow-reader"]:
    c = KafkaConsumer("q", bootstrap_servers="{b}", client_id=cid, group_id=None,
                      auto_offset_reset="earliest", consumer_timeout_ms=15000)
    start = time.monotonic()
    seen = {{"fast": [], "slow": []}}
    for r in c:
        seen[r.key.decode()].append(int(r.value.split(b"-")[1]))
        if sum(len(v) for v in seen.values()) == 800:
            break
    ok = all(v == list(range(400)) for v in seen.values())
    print(cid, "consumed", round(time.monotonic() - start, 2), throttle_max(c), ok)
    c.close()
"#
    );
    let stdout = run_python(&script);
    let line = |who: &str| result_line(&stdout, who);
    let secs = |l: &[String]| l[2].parse::<f64>().unwrap();
    let throttle = |l: &[String]| l[3].parse::<f64>().unwrap();

    let (fast, slow) = (line("fast"), line("slow"));
    assert_eq!(throttle(&fast), 0.0, "an unlimited producer was throttled");
    assert!(
        throttle(&slow) > 0.0,
        "the broker never told slow to back off"
    );
    assert!(
        secs(&slow) >= 1.5,
        "slow produced 400 kB in {} s",
        secs(&slow)
    );

    let (fast, slow) = (line("fast-reader"), line("slow-reader"));
    for l in [&fast, &slow] {
        assert_eq!(l[4], "True", "records lost or reordered: {l:?}");
    }
    assert_eq!(throttle(&fast), 0.0, "an unlimited consumer was throttled");
    assert!(
        throttle(&slow) > 0.0,
        "the broker never told slow-reader to back off"
    );
    assert!(
        secs(&slow) >= 1.5,
        "slow-reader read 800 kB in {} s",
        secs(&slow)
    );
}

/// A request quota (`request_percentage`) set for one client id: that producer's answers
/// carry a throttle time and it is held back, while a producer without one on the same
/// broker is not, and every record of both is acknowledged in order.
#[test]
fn a_client_over_its_request_percentage_is_throttled_and_others_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["quota.window.num=3".to_string()],
    );
    let b = server.addr.as_str();
    weir(&["topics", "create", "--bootstrap", b, "--topic", "r"]);
    // 0.001 % of a thread: 10 µs of handling a second, 20 µs for the first burst (averaged
    // over 2 of the 3 one-second samples), less than one produce request takes.
    let out = quotas(&[
        "alter",
        "--bootstrap",
        b,
        "--client-id",
        "busy",
        "--add-config",
        "request_percentage=0.001",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = quotas(&["describe", "--bootstrap", b, "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        listed,
        serde_json::json!([
            {"entity": {"client-id": "busy"}, "quotas": {"request_percentage": 0.001}},
        ])
    );
    let script = format!(
        r#"
from kafka import KafkaProducer

{THROTTLE_MAX}
for cid in ["idle", "busy"]:
    p = KafkaProducer(bootstrap_servers="{b}", client_id=cid, acks="all")
    offsets = [p.send("r", value=b"%s-%d" % (cid.encode(), i)).get(timeout=60).offset
               for i in range(5)]
    print(cid, throttle_max(p), offsets == sorted(offsets) and len(set(offsets)) == 5)
    p.close()
"#
    );
    let stdout = run_python(&script);
    let line = |who: &str| result_line(&stdout, who);
    let (idle, busy) = (line("idle"), line("busy"));
    for l in [&idle, &busy] {
        assert_eq!(l[2], "True", "records lost or reordered: {l:?}");
    }
    assert_eq!(idle[1].parse::<f64>().unwrap(), 0.0, "idle was throttled");
    assert!(
        busy[1].parse::<f64>().unwrap() > 0.0,
        "the broker never told busy to back off: {busy:?}"
    );
}

/// KIP-599's controller_mutation_rate set for one client id: that client's topic creations
/// are refused with THROTTLING_QUOTA_EXCEEDED once it has used its burst, while another
/// client on the same broker, under the broker's default, is not.
#[test]
fn a_client_over_its_controller_mutation_rate_is_refused_and_others_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let b = server.addr.as_str();
    // 2 partitions a second: a burst of 22 (2 × 11 one-second windows).
    let out = quotas(&[
        "alter",
        "--bootstrap",
        b,
        "--client-id",
        "slow-admin",
        "--add-config",
        "controller_mutation_rate=2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for bad in ["controller_mutation_rate=0", "controller_mutation_rate=-1"] {
        let out = quotas(&[
            "alter",
            "--bootstrap",
            b,
            "--client-id",
            "x",
            "--add-config",
            bad,
        ]);
        assert_eq!(out.status.code(), Some(1), "{bad} was accepted");
    }
    // Each client creates a topic of 30 partitions (a full bucket takes it), then one of 1.
    let script = format!(
        r#"
from kafka.admin import KafkaAdminClient, NewTopic
for cid in ["fast-admin", "slow-admin"]:
    a = KafkaAdminClient(bootstrap_servers="{b}", client_id=cid)
    out = []
    for name, n in [(cid + "-wide", 30), (cid + "-next", 1)]:
        try:
            a.create_topics([NewTopic(name, n, 1)], timeout_ms=1000)
            out.append("created")
        except Exception as e:
            out.append(type(e).__name__)
    print(cid, *out)
    a.close()
"#
    );
    let out = Command::new(python())
        .args(["-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "fast-admin created created", "{stdout}");
    // kafka-python asks CreateTopics v7, which is told THROTTLING_QUOTA_EXCEEDED at once.
    assert_eq!(
        lines[1], "slow-admin created ThrottlingQuotaExceededError",
        "{stdout}"
    );
}

/// Opens a connection from `source` and asks ApiVersions (v0): whether the broker answered
/// within `wait`, or closed or held the connection instead.
async fn answered(addr: &str, source: &str, wait: std::time::Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let mut s = socket.connect(addr.parse().unwrap()).await.unwrap();
    // ApiVersions v0: api key 18, version 0, correlation id 1, client id "q".
    let mut frame = vec![0, 0, 0, 11, 0, 18, 0, 0, 0, 0, 0, 1, 0, 1, b'q'];
    frame[3] = (frame.len() - 4) as u8;
    if s.write_all(&frame).await.is_err() {
        return false;
    }
    let mut size = [0u8; 4];
    matches!(
        tokio::time::timeout(wait, s.read_exact(&mut size)).await,
        Ok(Ok(_))
    )
}

/// `weir quotas --ip` (kafka-configs --entity-type ips): an address over its
/// connection_creation_rate has its new connections held and closed unserved, as Kafka's
/// KIP-612 quota does, while another address on the same broker is served.
#[test]
fn connections_over_their_ip_s_rate_are_closed_and_other_addresses_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["quota.window.num=3".to_string()],
    );
    let b = server.addr.as_str();
    let out = quotas(&[
        "alter",
        "--bootstrap",
        b,
        "--ip",
        "127.0.0.2",
        "--add-config",
        "connection_creation_rate=2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A fractional rate, or a byte rate for an IP, is refused as Kafka refuses it.
    for bad in ["connection_creation_rate=1.5", "producer_byte_rate=1000"] {
        let out = quotas(&[
            "alter",
            "--bootstrap",
            b,
            "--ip",
            "127.0.0.2",
            "--add-config",
            bad,
        ]);
        assert_eq!(out.status.code(), Some(1), "{bad} was accepted");
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let wait = std::time::Duration::from_millis(500);
    // Two per second over a window of at least 2 s: about 4 connections get in at once.
    let mut served = 0;
    for _ in 0..12 {
        served += rt.block_on(answered(b, "127.0.0.2", wait)) as u32;
    }
    assert!(
        (1..=6).contains(&served),
        "{served} of 12 quick connections from 127.0.0.2 were served under a quota of 2/s"
    );
    // 127.0.0.3 has no quota of its own and there is no default: every one is served.
    for i in 0..12 {
        assert!(
            rt.block_on(answered(b, "127.0.0.3", wait)),
            "connection {i} from 127.0.0.3 was not served"
        );
    }
    let out = quotas(&["describe", "--bootstrap", b, "--ip", "127.0.0.2", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        listed,
        serde_json::json!([
            {"entity": {"ip": "127.0.0.2"}, "quotas": {"connection_creation_rate": 2.0}},
        ])
    );
}
