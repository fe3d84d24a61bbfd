//! `weir serve` between its start and its first client: a SIGTERM while the logs load and
//! recover (after a kill -9 with many partitions, that takes a while) ends in a clean stop,
//! flushed and marked clean, never in a death by the signal that would cost another
//! recovery at the next start.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Server;

/// What `weir serve` logs once its signal handlers are in place.
const HANDLERS_READY: &str = "SIGTERM and Ctrl-C stop the broker cleanly";

/// What it logs once the logs are loaded and recovered.
const LOGS_LOADED: &str = "loaded logs in";

/// Partitions enough that recovering them after a kill -9 outlasts the test's reaction.
const PARTITIONS: &str = "300";

#[test]
fn a_sigterm_while_the_logs_recover_stops_the_broker_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut first = Server::start(&data, &[]);
    common::weir(&[
        "topics",
        "create",
        "--bootstrap",
        &first.addr,
        "--topic",
        "many",
        "--partitions",
        PARTITIONS,
    ]);
    // A crash: the next start recovers every partition.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let clean_marker = data.join(".kafka_cleanshutdown");
    assert!(!clean_marker.exists(), "a killed broker left a clean mark");

    let port = common::free_port();
    let addr = format!("127.0.0.1:{port}");
    let log_path = dir.path().join("second.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--listen", &addr, "--data-dir"])
        .arg(&data)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !read(&log_path).contains(HANDLERS_READY) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "weir serve exited: {}",
            read(&log_path)
        );
        assert!(started.elapsed() < Duration::from_secs(30), "no start");
        std::thread::sleep(Duration::from_millis(2));
    }
    // The listener is bound before the logs load (clients wait in its backlog), so what
    // tells the start-up apart is the log's own word that loading ended.
    let loaded_before = read(&log_path).contains(LOGS_LOADED);
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "weir serve did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = read(&log_path);
    assert!(
        status.success(),
        "a SIGTERM during start-up ended weir serve with {status}:\n{text}"
    );
    assert!(
        !loaded_before,
        "the logs were loaded when the signal came: the test did not reach the start-up it \
         is about (raise PARTITIONS)"
    );
    assert!(
        clean_marker.exists(),
        "no clean-shutdown mark after the stop:\n{text}"
    );

    // The next start trusts what the stop wrote and serves the topic whole.
    let next = Server::start(&data, &[]);
    let described = common::weir(&[
        "topics",
        "describe",
        "--bootstrap",
        &next.addr,
        "--topic",
        "many",
    ]);
    assert!(
        described.contains(&format!("Partitions: {PARTITIONS}\t")),
        "{described}"
    );
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
