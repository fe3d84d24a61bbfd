//! The client subcommands as scripts meet them: the `weir` binary against a started
//! `weir serve`, checking exit codes, stdout and stderr — the contracts of `weir produce`,
//! `weir consume`, `weir topics` and `weir groups`.

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    bootstrap: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve() -> Server {
    let dir = tempfile::tempdir().unwrap();
    // A port that was free a moment ago; the broker fails loudly if it is taken since.
    let port = weir_cluster::test_etcd::free_port();
    let bootstrap = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--listen", &bootstrap, "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--override", "group.initial.rebalance.delay.ms=0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::net::TcpStream::connect(&bootstrap).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "weir serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Server {
        child,
        bootstrap,
        _dir: dir,
    }
}

fn weir(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_str(ok(out).trim()).unwrap()
}

#[test]
fn produce_exits_zero_once_every_line_is_acknowledged() {
    let s = serve();
    let b = s.bootstrap.as_str();
    ok(&weir(
        &[
            "topics",
            "create",
            "--bootstrap",
            b,
            "--topic",
            "lines",
            "--partitions",
            "2",
        ],
        b"",
    ));
    let mut input = Vec::new();
    for i in 0..5000 {
        writeln!(input, "key-{}\tvalue {i}", i % 7).unwrap();
    }
    input.extend_from_slice(b"last\twithout newline");
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let out = weir(
            &[
                "produce",
                "--bootstrap",
                b,
                "--topic",
                "lines",
                "--key-separator",
                "\t",
                "--compression",
                codec,
                "--acks",
                "all",
            ],
            &input,
        );
        ok(&out);
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    }
    // Every line of every run is in the log: the group reset shows both log ends.
    let plan = json(&weir(
        &[
            "groups",
            "reset-offsets",
            "--bootstrap",
            b,
            "--group",
            "count",
            "--topic",
            "lines",
            "--to-latest",
            "--json",
        ],
        b"",
    ));
    let total: i64 = plan
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["new_offset"].as_i64().unwrap())
        .sum();
    assert_eq!(total, 5 * 5001);
}

#[test]
fn produce_fails_clearly() {
    let s = serve();
    let b = s.bootstrap.as_str();
    let start = Instant::now();
    let out = weir(
        &[
            "produce",
            "--bootstrap",
            "127.0.0.1:1",
            "--topic",
            "t",
            "--property",
            "max.block.ms=500",
        ],
        b"x\n",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(start.elapsed() < Duration::from_secs(10));
    let err = text(&out.stderr);
    assert!(
        err.contains("max.block.ms") && err.contains("127.0.0.1:1"),
        "{err}"
    );

    let out = weir(
        &[
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "t",
            "--key-separator",
            ":",
        ],
        b"a:1\nno separator\n",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("line 2 has no key separator"),
        "{}",
        text(&out.stderr)
    );

    let out = weir(
        &[
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "t",
            "--compression",
            "brotli",
        ],
        b"x\n",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("compression.type"),
        "{}",
        text(&out.stderr)
    );

    // A record the topic refuses: the failure count and Kafka's error name.
    ok(&weir(
        &[
            "topics",
            "create",
            "--bootstrap",
            b,
            "--topic",
            "small",
            "--config",
            "max.message.bytes=200",
        ],
        b"",
    ));
    let mut input = b"fits\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 1000));
    input.push(b'\n');
    let out = weir(
        &[
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "small",
            "--property",
            "linger.ms=0",
        ],
        &input,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("1 of 2 records failed") && err.contains("MESSAGE_TOO_LARGE"),
        "{err}"
    );
}

#[test]
fn a_transactional_produce_commits_what_it_read_or_aborts_it() {
    let s = serve();
    let b = s.bootstrap.as_str();
    ok(&weir(
        &[
            "topics",
            "create",
            "--bootstrap",
            b,
            "--topic",
            "txn",
            "--partitions",
            "2",
        ],
        b"",
    ));
    let txn = ["--property", "transactional.id=cli-txn"];
    let produce = |extra: &[&str], input: &[u8]| {
        let mut args = vec![
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "txn",
            "--key-separator",
            "|",
        ];
        args.extend_from_slice(&txn);
        args.extend_from_slice(extra);
        weir(&args, input)
    };
    // 250 lines in transactions of 100: three commits, the last one short.
    let mut good = Vec::new();
    for i in 0..250 {
        writeln!(good, "k{}|committed {i}", i % 3).unwrap();
    }
    let out = produce(&["--transaction-size", "100"], &good);
    ok(&out);
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));

    // A bad line after 2000 good ones: what was sent is aborted, and the command says so.
    let mut bad = Vec::new();
    for i in 0..2000 {
        writeln!(bad, "k{}|aborted {i}", i % 3).unwrap();
    }
    bad.extend_from_slice(b"no separator here\n");
    let out = produce(&[], &bad);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("line 2001 has no key separator"), "{err}");
    assert!(err.contains("the open transaction was aborted"), "{err}");
    assert!(err.contains("(0 records committed before it)"), "{err}");

    let read = |isolation: &str| {
        let level = format!("isolation.level={isolation}");
        let args = [
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "txn",
            "--from-beginning",
            "--timeout-ms",
            "3000",
            "--property",
            &level,
        ];
        records(&weir(&args, b""))
    };
    let committed = read("read_committed");
    let mut values: Vec<String> = committed
        .iter()
        .map(|r| r["value"].as_str().unwrap().to_string())
        .collect();
    values.sort_by_key(|v| v[10..].parse::<u32>().unwrap());
    let want: Vec<String> = (0..250).map(|i| format!("committed {i}")).collect();
    assert_eq!(
        values, want,
        "read_committed sees exactly the committed lines"
    );
    // read_uncommitted sees at least as much (the aborted records that reached the log too).
    assert!(read("read_uncommitted").len() >= 250);

    // --transaction-size is for transactions only; misuse is a usage error.
    let out = weir(
        &[
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "txn",
            "--transaction-size",
            "10",
        ],
        b"x\n",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--transaction-size needs"),
        "{}",
        text(&out.stderr)
    );
    let out = produce(&["--transaction-size", "0"], b"x\n");
    assert_eq!(out.status.code(), Some(2));

    // weir transactions sees what the last run left: its id, aborted, nothing open.
    let list = json(&weir(
        &["transactions", "list", "--bootstrap", b, "--json"],
        b"",
    ));
    assert_eq!(
        list,
        serde_json::json!([{"transactional_id": "cli-txn", "coordinator": 1,
                            "producer_id": list[0]["producer_id"], "state": "CompleteAbort"}])
    );
    let pid = list[0]["producer_id"].as_i64().unwrap();
    let listed = |filter: &[&str]| {
        let mut args = vec!["transactions", "list", "--bootstrap", b, "--json"];
        args.extend_from_slice(filter);
        json(&weir(&args, b"")).as_array().unwrap().len()
    };
    assert_eq!(listed(&["--state", "CompleteAbort"]), 1);
    assert_eq!(listed(&["--state", "Ongoing"]), 0);
    assert_eq!(listed(&["--producer-id", &(pid + 1).to_string()]), 0);
    let d = json(&weir(
        &[
            "transactions",
            "describe",
            "--bootstrap",
            b,
            "--transactional-id",
            "cli-txn",
            "--json",
        ],
        b"",
    ));
    assert_eq!(d["state"], "CompleteAbort", "{d}");
    assert_eq!(d["producer_id"], pid, "{d}");
    assert_eq!(d["coordinator"], 1, "{d}");
    assert_eq!(d["partitions"], serde_json::json!([]), "{d}");
    // Each run of weir produce with the id bumped the epoch once (two ran).
    assert_eq!(d["producer_epoch"], 1, "{d}");
    // The keys may all hash to one partition: ask both.
    let producers = |partition: &str| {
        json(&weir(
            &[
                "transactions",
                "describe-producers",
                "--bootstrap",
                b,
                "--topic",
                "txn",
                "--partition",
                partition,
                "--json",
            ],
            b"",
        ))
        .as_array()
        .unwrap()
        .clone()
    };
    let p = serde_json::Value::Array([producers("0"), producers("1")].concat());
    let ours: Vec<&serde_json::Value> = p
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["producer_id"] == pid)
        .collect();
    assert!(!ours.is_empty(), "{p}");
    for o in ours {
        assert_eq!(
            o["current_txn_start_offset"],
            serde_json::Value::Null,
            "{p}"
        );
        assert_eq!(o["producer_epoch"], 1, "{p}");
        // The abort's marker carries the coordinator epoch it was written under.
        assert!(o["coordinator_epoch"].as_i64().unwrap() >= 0, "{p}");
    }

    let out = weir(
        &[
            "transactions",
            "describe",
            "--bootstrap",
            b,
            "--transactional-id",
            "nobody",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("TRANSACTIONAL_ID_NOT_FOUND"),
        "{}",
        text(&out.stderr)
    );
    let out = weir(
        &["transactions", "list", "--bootstrap", b, "--state", "Bogus"],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("'Bogus' is not a transaction state"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn topics_lifecycle_in_tables_and_json() {
    let s = serve();
    let b = s.bootstrap.as_str();
    let out = weir(
        &[
            "topics",
            "create",
            "--bootstrap",
            b,
            "--topic",
            "orders",
            "--partitions",
            "3",
            "--config",
            "cleanup.policy=compact",
        ],
        b"",
    );
    assert!(ok(&out).contains("Created topic 'orders'"));
    let again = weir(
        &["topics", "create", "--bootstrap", b, "--topic", "orders"],
        b"",
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("TOPIC_ALREADY_EXISTS"),
        "{}",
        text(&again.stderr)
    );
    ok(&weir(
        &[
            "topics",
            "create",
            "--bootstrap",
            b,
            "--topic",
            "orders",
            "--if-not-exists",
        ],
        b"",
    ));
    let bad = weir(
        &[
            "topics",
            "create",
            "--bootstrap",
            b,
            "--topic",
            "x",
            "--config",
            "retention.ms=soon",
        ],
        b"",
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad.stderr).contains("INVALID_CONFIG"),
        "{}",
        text(&bad.stderr)
    );

    assert_eq!(
        json(&weir(&["topics", "list", "--bootstrap", b, "--json"], b"")),
        serde_json::json!(["orders"])
    );
    assert_eq!(
        ok(&weir(&["topics", "list", "--bootstrap", b], b"")),
        "orders\n"
    );
    let table = ok(&weir(
        &["topics", "describe", "--bootstrap", b, "--topic", "orders"],
        b"",
    ));
    assert!(
        table.contains("Partitions: 3") && table.contains("cleanup.policy=compact"),
        "{table}"
    );
    assert!(
        table.contains("PARTITION  LEADER  REPLICAS  ISR"),
        "{table}"
    );

    ok(&weir(
        &[
            "topics",
            "alter",
            "--bootstrap",
            b,
            "--topic",
            "orders",
            "--partitions",
            "5",
            "--config",
            "retention.ms=60000",
            "--delete-config",
            "cleanup.policy",
        ],
        b"",
    ));
    let d = json(&weir(
        &[
            "topics",
            "describe",
            "--bootstrap",
            b,
            "--topic",
            "orders",
            "--json",
        ],
        b"",
    ));
    assert_eq!(d[0]["partitions"].as_array().unwrap().len(), 5);
    assert_eq!(
        d[0]["configs"],
        serde_json::json!({"retention.ms": "60000"})
    );
    let shrink = weir(
        &[
            "topics",
            "alter",
            "--bootstrap",
            b,
            "--topic",
            "orders",
            "--partitions",
            "2",
        ],
        b"",
    );
    assert_eq!(shrink.status.code(), Some(1));
    assert!(
        text(&shrink.stderr).contains("INVALID_PARTITIONS"),
        "{}",
        text(&shrink.stderr)
    );
    let nothing = weir(
        &["topics", "alter", "--bootstrap", b, "--topic", "orders"],
        b"",
    );
    assert_eq!(nothing.status.code(), Some(2));

    ok(&weir(
        &["topics", "delete", "--bootstrap", b, "--topic", "orders"],
        b"",
    ));
    let gone = weir(
        &["topics", "delete", "--bootstrap", b, "--topic", "orders"],
        b"",
    );
    assert_eq!(gone.status.code(), Some(1));
    assert!(
        text(&gone.stderr).contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        text(&gone.stderr)
    );
    ok(&weir(
        &[
            "topics",
            "delete",
            "--bootstrap",
            b,
            "--topic",
            "orders",
            "--if-exists",
        ],
        b"",
    ));
    assert_eq!(
        json(&weir(&["topics", "list", "--bootstrap", b, "--json"], b"")),
        serde_json::json!([])
    );
}

#[test]
fn groups_offsets_are_reset_described_and_deleted() {
    let s = serve();
    let b = s.bootstrap.as_str();
    let lines: String = (0..100).map(|i| format!("{i}\n")).collect();
    ok(&weir(
        &[
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "events",
            "--partition",
            "0",
        ],
        lines.as_bytes(),
    ));

    // Without --execute nothing changes.
    let plan = json(&weir(
        &[
            "groups",
            "reset-offsets",
            "--bootstrap",
            b,
            "--group",
            "g",
            "--topic",
            "events",
            "--to-offset",
            "40",
            "--json",
        ],
        b"",
    ));
    assert_eq!(
        plan,
        serde_json::json!([{"group": "g", "topic": "events", "partition": 0, "new_offset": 40}])
    );
    let missing = weir(
        &["groups", "describe", "--bootstrap", b, "--group", "g"],
        b"",
    );
    assert_eq!(missing.status.code(), Some(1));

    ok(&weir(
        &[
            "groups",
            "reset-offsets",
            "--bootstrap",
            b,
            "--group",
            "g",
            "--topic",
            "events:0",
            "--to-offset",
            "40",
            "--execute",
        ],
        b"",
    ));
    ok(&weir(
        &[
            "groups",
            "reset-offsets",
            "--bootstrap",
            b,
            "--group",
            "g",
            "--all-topics",
            "--shift-by",
            "-15",
            "--execute",
        ],
        b"",
    ));
    let d = json(&weir(
        &[
            "groups",
            "describe",
            "--bootstrap",
            b,
            "--group",
            "g",
            "--json",
        ],
        b"",
    ));
    assert_eq!(d["state"], "Empty");
    assert_eq!(d["offsets"][0]["committed"], 25);
    assert_eq!(d["offsets"][0]["log_end"], 100);
    assert_eq!(d["offsets"][0]["lag"], 75);
    let table = ok(&weir(
        &["groups", "describe", "--bootstrap", b, "--group", "g"],
        b"",
    ));
    assert!(
        table.contains("events  0          25              100             75"),
        "{table}"
    );
    // Past the log end is pulled back to it, as Kafka's tool does.
    let past = json(&weir(
        &[
            "groups",
            "reset-offsets",
            "--bootstrap",
            b,
            "--group",
            "g",
            "--topic",
            "events",
            "--to-offset",
            "1000",
            "--json",
        ],
        b"",
    ));
    assert_eq!(past[0]["new_offset"], 100);

    let listed = json(&weir(&["groups", "list", "--bootstrap", b, "--json"], b""));
    assert_eq!(
        listed,
        serde_json::json!([{"group": "g", "state": "Empty", "protocol_type": ""}])
    );
    ok(&weir(
        &["groups", "delete", "--bootstrap", b, "--group", "g"],
        b"",
    ));
    let gone = weir(&["groups", "delete", "--bootstrap", b, "--group", "g"], b"");
    assert_eq!(gone.status.code(), Some(1));
    assert!(
        text(&gone.stderr).contains("GROUP_ID_NOT_FOUND"),
        "{}",
        text(&gone.stderr)
    );
}

/// The JSON lines `weir consume` printed.
fn records(out: &Output) -> Vec<serde_json::Value> {
    ok(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn consume_prints_json_lines_in_offset_order_and_stops_as_told() {
    let s = serve();
    let b = s.bootstrap.as_str();
    ok(&weir(
        &[
            "topics",
            "create",
            "--bootstrap",
            b,
            "--topic",
            "feed",
            "--partitions",
            "3",
        ],
        b"",
    ));
    let mut input = Vec::new();
    for i in 0..300 {
        writeln!(input, "k{}|v{i}", i % 5).unwrap();
    }
    // A value that is not UTF-8 comes back as base64.
    input.extend_from_slice(b"bin|\xff\xfe\n");
    ok(&weir(
        &[
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "feed",
            "--key-separator",
            "|",
        ],
        &input,
    ));

    let all = records(&weir(
        &[
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "feed",
            "--from-beginning",
            "--max-messages",
            "301",
        ],
        b"",
    ));
    assert_eq!(all.len(), 301);
    let mut next = [0i64; 3];
    for r in &all {
        let p = r["partition"].as_u64().unwrap() as usize;
        assert_eq!(r["topic"], "feed");
        assert_eq!(
            r["offset"].as_i64().unwrap(),
            next[p],
            "offset order in {p}"
        );
        next[p] += 1;
        assert!(r["timestamp"].as_i64().unwrap() > 1_600_000_000_000);
        assert_eq!(r["headers"], serde_json::json!([]));
        let key = r["key"].as_str().unwrap();
        if key == "bin" {
            assert_eq!(r["value"], serde_json::json!({"base64": "//4="}));
        } else {
            let i: usize = r["value"].as_str().unwrap()[1..].parse().unwrap();
            assert_eq!(key, format!("k{}", i % 5));
        }
    }
    // The same key always lands in the same partition.
    let mut home = std::collections::HashMap::new();
    for r in &all {
        let p = r["partition"].clone();
        assert_eq!(home.entry(r["key"].to_string()).or_insert(p.clone()), &p);
    }

    // One partition from an offset, stopping when no new data comes.
    let start = Instant::now();
    let tail = records(&weir(
        &[
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "feed",
            "--partition",
            "1",
            "--offset",
            "3",
            "--timeout-ms",
            "1000",
        ],
        b"",
    ));
    assert!(start.elapsed() < Duration::from_secs(15));
    assert_eq!(tail.len() as i64, next[1] - 3);
    assert!(tail.iter().all(|r| r["partition"] == 1));
    assert_eq!(tail[0]["offset"], 3);

    // Without --from-beginning it waits for new records only.
    let none = weir(
        &[
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "feed",
            "--timeout-ms",
            "500",
        ],
        b"",
    );
    assert_eq!(ok(&none), "");
}

#[test]
fn consume_in_a_group_commits_what_it_printed() {
    let s = serve();
    let b = s.bootstrap.as_str();
    let lines: String = (0..200).map(|i| format!("{i}\n")).collect();
    ok(&weir(
        &[
            "topics",
            "create",
            "--bootstrap",
            b,
            "--topic",
            "jobs",
            "--partitions",
            "2",
        ],
        b"",
    ));
    ok(&weir(
        &["produce", "--bootstrap", b, "--topic", "jobs"],
        lines.as_bytes(),
    ));
    let group = |extra: &[&str]| {
        let mut args = vec![
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "jobs",
            "--group",
            "workers",
            "--from-beginning",
        ];
        args.extend_from_slice(extra);
        records(&weir(&args, b""))
    };
    // Stops mid-fetch: what was polled but not printed is read by the next run.
    let first = group(&["--max-messages", "37"]);
    assert_eq!(first.len(), 37);
    let d = json(&weir(
        &[
            "groups",
            "describe",
            "--bootstrap",
            b,
            "--group",
            "workers",
            "--json",
        ],
        b"",
    ));
    let committed: i64 = d["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["committed"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(committed, 37);
    let rest = group(&["--timeout-ms", "1500"]);
    let mut values: Vec<i64> = first
        .iter()
        .chain(&rest)
        .map(|r| r["value"].as_str().unwrap().parse().unwrap())
        .collect();
    values.sort_unstable();
    assert_eq!(values, (0..200).collect::<Vec<_>>(), "each record once");
}

#[test]
fn consume_fails_clearly() {
    let s = serve();
    let b = s.bootstrap.as_str();
    let out = weir(
        &["consume", "--bootstrap", b, "--topic", "t", "--offset", "5"],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--offset needs --partition"),
        "{}",
        text(&out.stderr)
    );
    let out = weir(
        &[
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "missing",
            "--timeout-ms",
            "500",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        text(&out.stderr)
    );
    ok(&weir(
        &["topics", "create", "--bootstrap", b, "--topic", "one"],
        b"",
    ));
    let out = weir(
        &[
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "one",
            "--partition",
            "4",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("there is no partition 4"),
        "{}",
        text(&out.stderr)
    );
    let start = Instant::now();
    let out = weir(
        &["consume", "--bootstrap", "127.0.0.1:1", "--topic", "t"],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(start.elapsed() < Duration::from_secs(15));
    assert!(
        text(&out.stderr).contains("127.0.0.1:1"),
        "{}",
        text(&out.stderr)
    );
}

/// The last line of `weir bench ... --json`: the contract scripts read.
fn bench_json(out: &Output) -> serde_json::Value {
    let stdout = ok(out);
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    for key in [
        "records",
        "seconds",
        "records_per_sec",
        "mb_per_sec",
        "cpu_seconds",
    ] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {v}");
    }
    for q in ["p50", "p99", "p999", "max"] {
        assert!(
            v["latency_ms"][q].as_f64().is_some_and(|x| x > 0.0),
            "{q} in {v}"
        );
    }
    let l = &v["latency_ms"];
    assert!(l["p50"].as_f64() <= l["p99"].as_f64() && l["p99"].as_f64() <= l["max"].as_f64());
    v
}

#[test]
fn bench_measures_against_its_own_broker_or_a_given_one() {
    // No --bootstrap: a broker of its own, started and stopped by the bench.
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("latency.svg");
    let v = bench_json(&weir(
        &[
            "bench",
            "produce",
            "--topic",
            "b",
            "--records",
            "20000",
            "--record-size",
            "50",
            "--partitions",
            "2",
            "--producers",
            "2",
            "--json",
            "--plot",
            svg.to_str().unwrap(),
        ],
        b"",
    ));
    assert_eq!(v["records"], 20000);
    assert!(v["broker_cpu_seconds"].as_f64().is_some());
    // Produce also times its requests; a request cannot outlast the records it carried.
    let r = &v["request_latency_ms"];
    assert!(r["p50"].as_f64().is_some_and(|x| x > 0.0), "{v}");
    assert!(r["p50"].as_f64() <= r["max"].as_f64(), "{v}");
    assert!(r["max"].as_f64() <= v["latency_ms"]["max"].as_f64(), "{v}");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg") && drawn.contains("percentile"));

    let s = serve();
    let b = s.bootstrap.as_str();
    let v = bench_json(&weir(
        &[
            "bench",
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "w",
            "--records",
            "5000",
            "--acks",
            "1",
            "--compression",
            "lz4",
            "--rate",
            "10000",
            "--json",
        ],
        b"",
    ));
    assert_eq!(v["records"], 5000);
    assert!(v.get("request_latency_ms").is_some(), "{v}");
    // Paced at 10,000/s, 5,000 records take about half a second.
    assert!(v["seconds"].as_f64().unwrap() >= 0.45, "{v}");
    assert!(v.get("broker_cpu_seconds").is_none());
    let v = bench_json(&weir(
        &[
            "bench",
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "w",
            "--records",
            "5000",
            "--json",
        ],
        b"",
    ));
    assert_eq!(v["records"], 5000);
    let v = bench_json(&weir(
        &[
            "bench",
            "e2e",
            "--bootstrap",
            b,
            "--topic",
            "lat",
            "--rate",
            "500",
            "--seconds",
            "1",
            "--json",
        ],
        b"",
    ));
    assert_eq!(v["records"], 500);

    // In transactions: two producers, each its own transactional.id, committing every
    // 20 ms; what they sent is all there under read_committed.
    let v = bench_json(&weir(
        &[
            "bench",
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "tx",
            "--records",
            "20000",
            "--partitions",
            "2",
            "--producers",
            "2",
            "--rate",
            "20000",
            "--transaction-duration-ms",
            "20",
            "--transactional-id",
            "bench-tx",
            "--json",
        ],
        b"",
    ));
    assert_eq!(v["records"], 20000);
    // About a second in 20 ms transactions, from each of the two producers.
    let commits = v["transactions"].as_u64().unwrap_or_default();
    assert!(commits >= 20, "{v}");
    let c = &v["commit_latency_ms"];
    assert!(c["p50"].as_f64().is_some_and(|x| x > 0.0), "{v}");
    assert!(c["p50"].as_f64() <= c["max"].as_f64(), "{v}");
    for id in ["bench-tx-0", "bench-tx-1"] {
        let d = json(&weir(
            &[
                "transactions",
                "describe",
                "--bootstrap",
                b,
                "--transactional-id",
                id,
                "--json",
            ],
            b"",
        ));
        assert_eq!(d["state"], "CompleteCommit", "{id}: {d}");
    }
    let v = bench_json(&weir(
        &[
            "bench",
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "tx",
            "--records",
            "20000",
            "--property",
            "isolation.level=read_committed",
            "--json",
        ],
        b"",
    ));
    assert_eq!(v["records"], 20000);
    // One transactional.id for several producers would have them fence each other.
    for flags in [
        &["--property", "transactional.id=one"][..],
        &["--property", "transactional.id =one"][..],
        &["--transaction-duration-ms", "0"][..],
    ] {
        let mut args = vec!["bench", "produce", "--bootstrap", b, "--topic", "tx"];
        args.extend_from_slice(&["--records", "1"]);
        args.extend_from_slice(flags);
        let out = weir(&args, b"");
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flags:?}: {}",
            text(&out.stderr)
        );
    }

    // Asking for more than the topic holds fails after the idle timeout, clearly.
    let out = weir(
        &[
            "bench",
            "consume",
            "--bootstrap",
            b,
            "--topic",
            "w",
            "--records",
            "6000",
            "--timeout-ms",
            "500",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("only 5000 of 6000 records arrived"),
        "{}",
        text(&out.stderr)
    );
    let out = weir(
        &[
            "bench",
            "e2e",
            "--bootstrap",
            b,
            "--topic",
            "x",
            "--rate",
            "0",
            "--seconds",
            "1",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    let out = weir(
        &[
            "bench",
            "produce",
            "--bootstrap",
            b,
            "--topic",
            "x",
            "--records",
            "1",
            "--plot",
            "out.png",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(".svg"), "{}", text(&out.stderr));
}
