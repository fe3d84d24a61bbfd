//! SASL as Kafka clients use it: SCRAM-SHA-256/512 over TLS (SASL_SSL) and PLAIN over
//! SASL_PLAINTEXT, with real clients (kcat/librdkafka and kafka-python). The first users
//! come from `weir users add` on the stopped broker's data directory; another is added
//! online with AlterUserScramCredentials. Wrong passwords and unknown users are refused,
//! and nothing but the SASL exchange is served before authentication.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use bytes::{Buf, Bytes};
use common::{add_user, frame, free_port, kcat, make_certs, python, weir, Server};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use weir_security::sasl::Scram;

/// One request and its response (after the correlation id), on a blocking socket.
fn call(s: &mut std::net::TcpStream, api: ApiKey, v: i16, body: RequestKind) -> Option<Bytes> {
    s.write_all(&frame(api, v, 1, &body)).ok()?;
    let mut size = [0u8; 4];
    s.read_exact(&mut size).ok()?;
    let mut buf = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut buf).ok()?;
    let mut b = Bytes::from(buf);
    b.advance(4);
    if api.response_header_version(v) >= 1 {
        b.advance(1); // empty tagged fields
    }
    Some(b)
}

#[test]
fn clients_authenticate_with_scram_over_tls_and_plain_and_strangers_do_not() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let c = |f: &str| certs.path().join(f).display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    add_user(&data, "admin", "SCRAM-SHA-256", "admin-secret");
    add_user(&data, "alice", "SCRAM-SHA-512", "alice-secret");

    let (plain, sasl_ssl, sasl_plain) = (free_port(), free_port(), free_port());
    let settings = vec![
        format!(
            "listeners=PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl_ssl},\
             SASL_PLAINTEXT://127.0.0.1:{sasl_plain}"
        ),
        "ssl.keystore.type=PEM".into(),
        format!("ssl.keystore.location={}", c("server.pem")),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512".into(),
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN".into(),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.\
         plain.PlainLoginModule required user_carol=\"carol-pw\";"
            .into(),
    ];
    let server = Server::start_on(&data, &settings, plain);
    weir(&[
        "topics",
        "create",
        "--bootstrap",
        &server.addr,
        "--topic",
        "private",
    ]);
    let ssl_addr = format!("127.0.0.1:{sasl_ssl}");
    let plain_addr = format!("127.0.0.1:{sasl_plain}");
    let ca = format!("ssl.ca.location={}", c("ca.pem"));
    let scram = |mech: &str, user: &str, password: &str| -> Vec<String> {
        [
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            &ca,
            "-X",
            &format!("sasl.mechanisms={mech}"),
            "-X",
            &format!("sasl.username={user}"),
            "-X",
            &format!("sasl.password={password}"),
        ]
        .map(String::from)
        .to_vec()
    };
    let run = |addr: &str, mode: &[&str], auth: &[String], stdin: &[u8]| {
        let mut args: Vec<&str> = vec!["-b", addr];
        args.extend(mode);
        args.extend(auth.iter().map(String::as_str));
        kcat(&args, stdin)
    };

    // SCRAM-SHA-256 over TLS: librdkafka produces.
    let out = run(
        &ssl_addr,
        &["-t", "private", "-P"],
        &scram("SCRAM-SHA-256", "admin", "admin-secret"),
        b"one\ntwo\nthree\n",
    );
    assert!(
        out.status.success(),
        "kcat SCRAM over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // SCRAM-SHA-512 over TLS: kafka-python reads them and adds one.
    let script = format!(
        r#"
from kafka import KafkaConsumer, KafkaProducer
auth = dict(security_protocol="SASL_SSL", ssl_cafile={ca:?}, sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice", sasl_plain_password="alice-secret")
p = KafkaProducer(bootstrap_servers={b:?}, **auth)
p.send("private", b"four").get(timeout=30)
p.close()
c = KafkaConsumer("private", bootstrap_servers={b:?}, auto_offset_reset="earliest",
                  consumer_timeout_ms=5000, **auth)
print(",".join(r.value.decode() for r in c))
"#,
        ca = c("ca.pem"),
        b = ssl_addr
    );
    let out = Command::new(python())
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kafka-python SCRAM: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "one,two,three,four"
    );

    // SCRAM-SHA-256 over TLS from confluent-kafka (librdkafka's Python binding): it adds
    // a record and reads all five in a consumer group.
    let script = format!(
        r#"
from confluent_kafka import Producer, Consumer
auth = {{"bootstrap.servers": {b:?}, "security.protocol": "SASL_SSL", "ssl.ca.location": {ca:?},
        "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "admin",
        "sasl.password": "admin-secret"}}
p = Producer(auth)
p.produce("private", b"five")
assert p.flush(30) == 0
c = Consumer(dict(auth, **{{"group.id": "confluent-scram", "auto.offset.reset": "earliest"}}))
c.subscribe(["private"])
got = []
for _ in range(60):
    m = c.poll(1.0)
    if m is not None and m.error() is None:
        got.append(m.value().decode())
    if len(got) == 5:
        break
c.close()
print(",".join(got))
"#,
        ca = c("ca.pem"),
        b = ssl_addr
    );
    let out = Command::new(python())
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "confluent-kafka SCRAM: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "one,two,three,four,five"
    );

    // A wrong password, an unknown user, a mechanism the listener does not offer: refused.
    for (mech, user, pw) in [
        ("SCRAM-SHA-256", "admin", "wrong"),
        ("SCRAM-SHA-256", "mallory", "x"),
        ("SCRAM-SHA-256", "alice", "alice-secret"), // alice has only SCRAM-SHA-512
        ("PLAIN", "admin", "admin-secret"),
    ] {
        let out = run(&ssl_addr, &["-L", "-m", "5"], &scram(mech, user, pw), b"");
        assert!(!out.status.success(), "{mech} {user}/{pw} got metadata");
    }

    // PLAIN: JAAS users, and (a Weir extension) users with a SCRAM credential.
    let plain_auth = |user: &str, pw: &str| {
        [
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            "sasl.mechanisms=PLAIN",
            "-X",
            &format!("sasl.username={user}"),
            "-X",
            &format!("sasl.password={pw}"),
        ]
        .map(String::from)
        .to_vec()
    };
    for (user, pw, ok) in [
        ("carol", "carol-pw", true),
        ("admin", "admin-secret", true),
        ("carol", "nope", false),
    ] {
        let out = run(
            &plain_addr,
            &["-t", "private", "-C", "-e", "-o", "beginning"],
            &plain_auth(user, pw),
            b"",
        );
        assert_eq!(
            out.status.success(),
            ok,
            "PLAIN {user}/{pw}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if ok {
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "one\ntwo\nthree\nfour\nfive\n"
            );
        }
    }

    // Nothing but the SASL exchange before authenticating: a Metadata request closes it.
    let mut s = std::net::TcpStream::connect(&plain_addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    assert!(
        call(
            &mut s,
            ApiKey::Metadata,
            9,
            RequestKind::Metadata(MetadataRequest::default())
        )
        .is_none(),
        "Metadata was served before authentication"
    );

    // A user added online with AlterUserScramCredentials can log in at once.
    let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
    let salt = b"dave's salt".to_vec();
    let mut u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
    u.name = StrBytes::from_static_str("dave");
    u.mechanism = Scram::Sha256.id();
    u.iterations = 8192;
    u.salted_password = Bytes::from(Scram::Sha256.salted_password(b"dave-pw", &salt, 8192));
    u.salt = Bytes::from(salt);
    let mut req = AlterUserScramCredentialsRequest::default();
    req.upsertions.push(u);
    let mut resp = call(
        &mut s,
        ApiKey::AlterUserScramCredentials,
        0,
        RequestKind::AlterUserScramCredentials(req),
    )
    .unwrap();
    let resp = AlterUserScramCredentialsResponse::decode(&mut resp, 0).unwrap();
    assert_eq!(
        resp.results[0].error_code, 0,
        "{:?}",
        resp.results[0].error_message
    );
    let out = run(
        &ssl_addr,
        &["-L", "-m", "10"],
        &scram("SCRAM-SHA-256", "dave", "dave-pw"),
        b"",
    );
    assert!(
        out.status.success(),
        "dave: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut req = DescribeUserScramCredentialsRequest::default();
    req.users = None;
    let mut resp = call(
        &mut s,
        ApiKey::DescribeUserScramCredentials,
        0,
        RequestKind::DescribeUserScramCredentials(req),
    )
    .unwrap();
    let resp = DescribeUserScramCredentialsResponse::decode(&mut resp, 0).unwrap();
    let users: Vec<(String, Vec<(i8, i32)>)> = resp
        .results
        .iter()
        .map(|r| {
            (
                r.user.to_string(),
                r.credential_infos
                    .iter()
                    .map(|c| (c.mechanism, c.iterations))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        users,
        vec![
            ("admin".to_string(), vec![(1, 4096)]),
            ("alice".to_string(), vec![(2, 4096)]),
            ("dave".to_string(), vec![(1, 8192)]),
        ]
    );

    // Weir's own client over SASL_SSL with SCRAM-SHA-512, configured as a Java client
    // is: it lists topics, produces, and consumes in a group.
    let weir_auth = |user: &str, password: &str| -> Vec<String> {
        [
            "security.protocol=SASL_SSL".to_string(),
            format!("ssl.truststore.location={}", c("ca.pem")),
            "sasl.mechanism=SCRAM-SHA-512".into(),
            format!(
                "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \
                 required username=\"{user}\" password=\"{password}\";"
            ),
        ]
        .into_iter()
        .flat_map(|p| ["--property".to_string(), p])
        .collect()
    };
    let with = |cmd: &[&str], auth: &[String]| -> Vec<String> {
        let mut all: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        all.extend(["--bootstrap".to_string(), ssl_addr.clone()]);
        all.extend(auth.iter().cloned());
        all
    };
    let alice = weir_auth("alice", "alice-secret");
    let run_weir = |args: &[String], stdin: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run_weir(&with(&["topics", "list"], &alice), b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("private"));
    let out = run_weir(&with(&["produce", "--topic", "private"], &alice), b"six\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_weir(
        &with(
            &[
                "consume",
                "--topic",
                "private",
                "--group",
                "weir-scram",
                "--from-beginning",
                "--max-messages",
                "6",
                "--timeout-ms",
                "20000",
            ],
            &alice,
        ),
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let values: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["value"].to_string())
        .collect();
    assert_eq!(
        values,
        ["one", "two", "three", "four", "five", "six"].map(|v| format!("{v:?}"))
    );
    // A wrong password fails with the broker's reason, not a hang.
    let out = run_weir(&with(&["topics", "list"], &weir_auth("alice", "nope")), b"");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("SASL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The offline tool refuses a directory a broker is running on.
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["users", "add", "eve", "--password-stdin", "--data-dir"])
        .arg(&data)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "pw").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("a broker is running"));
}

/// KIP-368: with `connections.max.reauth.ms`, an authentication lasts that long. A client
/// that re-authenticates (librdkafka 2.2 and later) keeps its connection; one that does
/// not is cut off at its next request; and a user deleted meanwhile cannot re-authenticate.
#[test]
fn sessions_expire_and_clients_reauthenticate() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    add_user(&data, "admin", "SCRAM-SHA-256", "admin-secret");
    let (plain, sasl) = (free_port(), free_port());
    let settings = vec![
        format!("listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}"),
        "sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN".into(),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.\
         plain.PlainLoginModule required user_carol=\"carol-pw\";"
            .into(),
        "connections.max.reauth.ms=2000".into(),
    ];
    let server = Server::start_on(&data, &settings, plain);
    weir(&[
        "topics",
        "create",
        "--bootstrap",
        &server.addr,
        "--topic",
        "r",
    ]);
    let sasl_addr = format!("127.0.0.1:{sasl}");

    // confluent-kafka produces for 7 s, across three session lifetimes: every record is
    // delivered, and the broker saw it re-authenticate.
    let script = format!(
        r#"
import time
from confluent_kafka import Producer
p = Producer({{"bootstrap.servers": "{sasl_addr}", "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "admin",
              "sasl.password": "admin-secret"}})
errors = []
def done(err, msg):
    if err is not None:
        errors.append(str(err))
for i in range(28):
    p.produce("r", b"%d" % i, on_delivery=done)
    p.poll(0)
    time.sleep(0.25)
assert p.flush(30) == 0
print(len(errors), errors[:3])
"#
    );
    let out = Command::new(python())
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0 []");
    let log = std::fs::read_to_string(data.with_extension("serve.log")).unwrap();
    assert!(
        log.matches("SASL re-authentication").count() >= 2,
        "librdkafka never re-authenticated:\n{log}"
    );

    // A client that does not re-authenticate: told the lifetime, then cut off.
    let mut s = std::net::TcpStream::connect(&sasl_addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut hs = SaslHandshakeRequest::default();
    hs.mechanism = StrBytes::from_static_str("PLAIN");
    call(
        &mut s,
        ApiKey::SaslHandshake,
        1,
        RequestKind::SaslHandshake(hs),
    )
    .unwrap();
    let mut auth = SaslAuthenticateRequest::default();
    auth.auth_bytes = Bytes::from_static(b"\0carol\0carol-pw");
    let mut resp = call(
        &mut s,
        ApiKey::SaslAuthenticate,
        2,
        RequestKind::SaslAuthenticate(auth),
    )
    .unwrap();
    let resp = SaslAuthenticateResponse::decode(&mut resp, 2).unwrap();
    assert_eq!((resp.error_code, resp.session_lifetime_ms), (0, 2000));
    let metadata = || RequestKind::Metadata(MetadataRequest::default());
    assert!(call(&mut s, ApiKey::Metadata, 9, metadata()).is_some());
    std::thread::sleep(std::time::Duration::from_millis(2300));
    assert!(
        call(&mut s, ApiKey::Metadata, 9, metadata()).is_none(),
        "served after the session expired"
    );

    // A user deleted while connected cannot re-authenticate: the connection closes.
    let login = |s: &mut std::net::TcpStream, token: &'static [u8]| {
        let mut hs = SaslHandshakeRequest::default();
        hs.mechanism = StrBytes::from_static_str("PLAIN");
        call(s, ApiKey::SaslHandshake, 1, RequestKind::SaslHandshake(hs)).unwrap();
        let mut auth = SaslAuthenticateRequest::default();
        auth.auth_bytes = Bytes::from_static(token);
        call(
            s,
            ApiKey::SaslAuthenticate,
            2,
            RequestKind::SaslAuthenticate(auth),
        )
        .map(|mut r| {
            SaslAuthenticateResponse::decode(&mut r, 2)
                .unwrap()
                .error_code
        })
    };
    let mut s = std::net::TcpStream::connect(&sasl_addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    assert_eq!(login(&mut s, b"\0admin\0admin-secret"), Some(0));
    let mut admin = std::net::TcpStream::connect(&server.addr).unwrap();
    let mut d = alter_user_scram_credentials_request::ScramCredentialDeletion::default();
    d.name = StrBytes::from_static_str("admin");
    d.mechanism = Scram::Sha256.id();
    let mut req = AlterUserScramCredentialsRequest::default();
    req.deletions.push(d);
    let mut resp = call(
        &mut admin,
        ApiKey::AlterUserScramCredentials,
        0,
        RequestKind::AlterUserScramCredentials(req),
    )
    .unwrap();
    let resp = AlterUserScramCredentialsResponse::decode(&mut resp, 0).unwrap();
    assert_eq!(resp.results[0].error_code, 0);
    assert_eq!(login(&mut s, b"\0admin\0admin-secret"), Some(58));
    assert!(
        call(&mut s, ApiKey::Metadata, 9, metadata()).is_none(),
        "a deleted user's connection was kept"
    );
}
