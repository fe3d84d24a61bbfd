//! What the broker-level tests share: a `weir serve` child process on a free port, and
//! request frames as a client puts them on the wire.

#![allow(dead_code)] // each test uses its part

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::{Encodable, StrBytes};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// A started `weir serve`; killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub data_dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `weir serve` on `data_dir` with `--override` settings, and waits until it
    /// accepts connections.
    pub fn start(data_dir: &Path, overrides: &[String]) -> Server {
        Server::start_on(data_dir, overrides, free_port())
    }

    /// As `start`, on a given port (a restart keeps the address clients know).
    pub fn start_on(data_dir: &Path, overrides: &[String], port: u16) -> Server {
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.args(["serve", "--listen", &addr, "--data-dir"])
            .arg(data_dir);
        for o in overrides {
            cmd.args(["--override", o]);
        }
        // The broker's log goes beside its data directory, for the failure message.
        let log_path = data_dir.with_extension("serve.log");
        if let Some(parent) = log_path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        let log = std::fs::File::create(&log_path).unwrap();
        // The broker logs to stdout; both go to the file.
        let mut child = cmd
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let start = Instant::now();
        while std::net::TcpStream::connect(&addr).is_err() {
            let exited = child.try_wait().unwrap();
            if exited.is_some() || start.elapsed() > Duration::from_secs(30) {
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
            data_dir: data_dir.to_path_buf(),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.rsplit(':').next().unwrap().parse().unwrap()
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// (resident, peak resident) KiB of the broker process.
    pub fn memory_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap()
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

/// Runs a `weir` client subcommand; its stdout, or a panic with its stderr.
pub fn weir(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weir {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `weir ARGS` run to its end, whatever it answers.
pub fn weir_result(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A request frame, size prefix included, encoded by kafka-protocol.
pub fn frame(api: ApiKey, version: i16, corr: i32, body: &RequestKind) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = corr;
    header.client_id = Some(StrBytes::from_static_str("weir-test"));
    header
        .encode(&mut buf, api.request_header_version(version))
        .unwrap();
    body.encode(&mut buf, version).unwrap();
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    buf.freeze()
}

/// Reads one response frame, or `None` if the broker closed the connection (or said
/// nothing for 20 s).
pub async fn read_frame(s: &mut TcpStream) -> Option<Bytes> {
    let n = tokio::time::timeout(Duration::from_secs(20), s.read_i32())
        .await
        .ok()?
        .ok()?;
    let mut buf = vec![0u8; usize::try_from(n).ok()?];
    tokio::time::timeout(Duration::from_secs(20), s.read_exact(&mut buf))
        .await
        .ok()?
        .ok()?;
    Some(Bytes::from(buf))
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is needed to make the test certificates");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A P-256 key `<who>.key` and certificate `<who>.crt` with subject `subj` (openssl's
/// `/C=US/O=Weir/CN=alice` form), signed by the CA `make_certs` made in `dir`.
pub fn sign(dir: &Path, who: &str, subj: &str, ext: &str) {
    let (key, csr, crt) = (
        format!("{who}.key"),
        format!("{who}.csr"),
        format!("{who}.crt"),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            subj,
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            ext,
        ],
    );
}

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, all
/// P-256; the server's keystore holds its key and chain in one PEM file.
pub fn make_certs(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=weir test CA",
    ]);
    openssl(dir, &ca);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    keystore(dir, "server", "/CN=server", "server.ext");
    sign(dir, "client", "/CN=client", "client.ext");
}

/// A server certificate `sign` makes, as a PEM keystore `<who>.pem` (its key, itself and
/// the CA); returns the keystore's path.
pub fn keystore(dir: &Path, who: &str, subj: &str, ext: &str) -> String {
    sign(dir, who, subj, ext);
    let pem = [
        std::fs::read(dir.join(format!("{who}.key"))).unwrap(),
        std::fs::read(dir.join(format!("{who}.crt"))).unwrap(),
        std::fs::read(dir.join("ca.pem")).unwrap(),
    ]
    .concat();
    let path = dir.join(format!("{who}.pem"));
    std::fs::write(&path, pem).unwrap();
    path.display().to_string()
}

/// A port for a server a test starts (see weir-cluster's `test_etcd::free_port`).
pub fn free_port() -> u16 {
    weir_cluster::test_etcd::free_port()
}

pub fn kcat(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat is needed (scripts/install-test-deps.sh)");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// The Python interpreter with kafka-python (scripts/install-test-deps.sh makes it).
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("WEIR_PYTHON") {
        return p.into();
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(
        venv.exists(),
        "kafka-python is needed: run ./scripts/install-test-deps.sh (or set WEIR_PYTHON)"
    );
    venv
}

/// Adds a SCRAM user to a stopped broker's data directory with `weir users add`.
pub fn add_user(data: &std::path::Path, name: &str, mechanism: &str, password: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "users",
            "add",
            name,
            "--mechanism",
            mechanism,
            "--password-stdin",
        ])
        .arg("--data-dir")
        .arg(data)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "weir users add: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
