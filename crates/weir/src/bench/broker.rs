//! The broker a run measures: the one `--bootstrap` names, or a `weir serve` of our own on
//! a temporary directory (stopped when dropped), and the topic on it. It sends no records
//! and reports no results.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use weir_client::admin::{Admin, NewTopic};
use weir_kafka::ErrorCode;

use super::common::Common;
use super::cpu::process_cpu_seconds;

/// A `weir serve` started for this run on a temporary directory; stopped (SIGTERM, then
/// waited for) when dropped.
struct OwnBroker {
    child: Child,
    _dir: tempfile::TempDir,
}

impl OwnBroker {
    fn start() -> anyhow::Result<(OwnBroker, String)> {
        let dir = tempfile::Builder::new()
            .prefix("weir-bench-")
            .tempdir()
            .context("creating a temporary data directory")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port for weir serve")?
            .port();
        let bootstrap = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("serve.log"))
            .context("creating serve.log in the temporary directory")?;
        let exe = std::env::current_exe().context("finding the weir binary")?;
        let child = Command::new(exe)
            .args(["serve", "--listen", &bootstrap, "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--override", "group.initial.rebalance.delay.ms=0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting weir serve")?;
        let mut broker = OwnBroker { child, _dir: dir };
        let start = Instant::now();
        while std::net::TcpStream::connect(&bootstrap).is_err() {
            if let Some(status) = broker.child.try_wait().context("watching weir serve")? {
                let log = std::fs::read_to_string(broker._dir.path().join("serve.log"))
                    .unwrap_or_default();
                bail!("weir serve exited ({status}):\n{log}");
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!("weir serve did not listen on {bootstrap} within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("weir bench: started weir serve on {bootstrap} (temporary data directory)");
        Ok((broker, bootstrap))
    }

    /// CPU seconds the broker has used so far (user + system).
    fn cpu_seconds(&self) -> Option<f64> {
        process_cpu_seconds(self.child.id())
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        // A child already reaped (it exited while starting) is not signalled: its pid may
        // belong to another process by now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The broker a run measures: the one `--bootstrap` names, or our own (stopped when this is
/// dropped).
pub(super) struct Broker {
    pub(super) bootstrap: String,
    own: Option<OwnBroker>,
}

impl Broker {
    /// The broker given, or our own, started now.
    pub(super) fn resolve(common: &Common) -> anyhow::Result<Broker> {
        match &common.bootstrap {
            Some(b) => Ok(Broker {
                bootstrap: b.clone(),
                own: None,
            }),
            None => {
                let (own, bootstrap) = OwnBroker::start()?;
                Ok(Broker {
                    bootstrap,
                    own: Some(own),
                })
            }
        }
    }

    /// Whether it is our own broker, which starts empty.
    pub(super) fn is_own(&self) -> bool {
        self.own.is_some()
    }

    /// CPU seconds our own broker has used so far; none for a given one, whose process we
    /// cannot see.
    pub(super) fn cpu_seconds(&self) -> Option<f64> {
        self.own.as_ref().and_then(OwnBroker::cpu_seconds)
    }

    /// Makes sure the topic exists: creates it with `partitions` partitions if not. Returns
    /// its partition count.
    pub(super) async fn ensure_topic(&self, topic: &str, partitions: i32) -> anyhow::Result<usize> {
        let bootstrap = self.bootstrap.as_str();
        let admin = Admin::from_properties([
            ("bootstrap.servers", bootstrap),
            ("default.api.timeout.ms", "10000"),
        ])
        .map_err(|e| anyhow!("{e}"))?;
        let created = admin
            .create_topics(&[NewTopic::new(topic, partitions, -1)], false)
            .await
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("creating topic '{topic}' on {bootstrap}"))?;
        for (_, r) in created {
            match r {
                Ok(()) => {}
                Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists.code()) => {}
                Err(e) => bail!("creating topic '{topic}': {e}"),
            }
        }
        let described = admin
            .describe_topics(&[topic.to_string()])
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let (_, d) = described
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("the broker did not describe topic '{topic}'"))?;
        let d = d.map_err(|e| anyhow!("describing topic '{topic}': {e}"))?;
        let n = d.partitions.len();
        if n as i32 != partitions {
            eprintln!("weir bench: topic '{topic}' already exists with {n} partitions; using them");
        }
        Ok(n)
    }
}
