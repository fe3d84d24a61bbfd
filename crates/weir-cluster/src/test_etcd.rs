//! A real etcd for tests: Debian's `etcd` binary (installed by
//! `scripts/install-test-deps.sh`) started on free loopback ports with a scratch data
//! directory, and killed when dropped. Only with the `test-support` feature.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A started etcd.
pub struct EtcdServer {
    child: Option<Child>,
    /// `host:port` of its client endpoint.
    pub endpoint: String,
    peer: String,
    dir: PathBuf,
    log: PathBuf,
    _scratch: Option<tempfile_dir::Scratch>,
}

/// Where test ports are taken from: below Linux's ephemeral range (32768 and up by
/// default), where `bind(0)` and every outgoing connection take theirs. A port picked there
/// and released could be taken by a connection before its server binds it; one picked
/// here cannot.
const TEST_PORTS: std::ops::Range<u16> = 10_000..32_000;

/// A loopback port nothing listens on, for a server a test starts. Never the same twice in
/// one process (tests run in parallel threads), and spread by process id across
/// processes.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = (TEST_PORTS.end - TEST_PORTS.start) as u32;
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id().wrapping_mul(7919)) % span,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::SeqCst) % span;
        let port = TEST_PORTS.start + n as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {TEST_PORTS:?}");
}

impl EtcdServer {
    /// Starts etcd and waits until it answers. Panics (saying how to install it) if there
    /// is no `etcd` binary.
    pub fn start() -> EtcdServer {
        let scratch = tempfile_dir::Scratch::new();
        let dir = scratch.path().join("etcd");
        let mut s = EtcdServer {
            child: None,
            endpoint: format!("127.0.0.1:{}", free_port()),
            peer: format!("127.0.0.1:{}", free_port()),
            log: scratch.path().join("etcd.log"),
            dir,
            _scratch: Some(scratch),
        };
        s.launch();
        s
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the etcd log file");
        let client = format!("http://{}", self.endpoint);
        let peer = format!("http://{}", self.peer);
        let child = Command::new("etcd")
            .arg("--name")
            .arg("weir-test")
            .arg("--data-dir")
            .arg(&self.dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("weir-test={peer}")])
            .stdout(Stdio::from(log.try_clone().expect("the etcd log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start etcd ({e}): the cluster tests need Debian's etcd-server; \
                     ./scripts/install-test-deps.sh installs it"
                )
            });
        self.child = Some(child);
        let start = Instant::now();
        while std::net::TcpStream::connect(&self.endpoint).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "etcd did not start:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same data and ports, after `kill`.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Stops (SIGSTOP) or resumes (SIGCONT) it: a hung etcd.
    pub fn pause(&self, paused: bool) {
        if let Some(c) = &self.child {
            let sig = if paused { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill")
                .arg(sig)
                .arg(c.id().to_string())
                .status();
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.pause(false);
        self.kill();
    }
}

/// A scratch directory removed when dropped (std only, so the feature adds no crate).
mod tempfile_dir {
    use std::path::{Path, PathBuf};

    pub struct Scratch(PathBuf);

    impl Scratch {
        pub fn new() -> Scratch {
            let p = std::env::temp_dir().join(format!(
                "weir-etcd-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ));
            std::fs::create_dir_all(&p).expect("a scratch directory");
            Scratch(p)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
