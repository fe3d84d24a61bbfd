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
    // Quotas Weir does not enforce, and rates that are not rates, are refused.
    for bad in [
        "request_percentage=50",
        "producer_byte_rate=0",
        "producer_byte_rate=1.5",
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

def throttle_max(client):
    return max([v for g in client.metrics().values() for k, v in g.items()
                if k == "throttle-time-max" and v == v] + [0])

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
    eprintln!("{stdout}");
    let line = |who: &str| -> Vec<String> {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{who} ")))
            .unwrap_or_else(|| panic!("no result for {who}: {stdout}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
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
