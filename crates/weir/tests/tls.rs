//! TLS listeners as Kafka clients use them: `weir serve` with a PLAINTEXT listener and two
//! SSL ones — one with server authentication only, one requiring client certificates
//! (mTLS) — configured with Kafka's keys and PEM files made here with openssl. kcat
//! (librdkafka) and kafka-python produce and consume over TLS; a client without a
//! certificate is refused by the mTLS listener; plaintext bytes to a TLS port close only
//! that connection. A keystore set while the broker runs (`kafka-configs --alter` of
//! `listener.name.ssl.ssl.keystore.location`) serves the next connections, after Kafka's
//! checks.

mod common;

use std::io::Write;
use std::process::Command;

use common::{free_port, kcat, keystore, make_certs, python, weir, weir_result, Server};

struct Tls {
    server: Server,
    ssl: String,
    mtls: String,
    certs: tempfile::TempDir,
    data: tempfile::TempDir,
    /// What the broker was started with, to start it again.
    settings: Vec<String>,
    plain: u16,
}

fn start() -> Tls {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let data = tempfile::tempdir().unwrap();
    let plain = free_port();
    let (ssl, mtls) = (free_port(), free_port());
    let c = |f: &str| certs.path().join(f).display().to_string();
    let settings = vec![
        format!(
            "listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl},MTLS://127.0.0.1:{mtls}"
        ),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL".into(),
        "ssl.keystore.type=PEM".into(),
        // Not needed for an unencrypted key; here to check DescribeConfigs hides it.
        "ssl.key.password=hunter2".into(),
        format!("ssl.keystore.location={}", c("server.pem")),
        "listener.name.mtls.ssl.client.auth=required".into(),
        "listener.name.mtls.ssl.truststore.type=PEM".into(),
        format!("listener.name.mtls.ssl.truststore.location={}", c("ca.pem")),
    ];
    let server = Server::start_on(&data.path().join("data"), &settings, plain);
    Tls {
        server,
        ssl: format!("127.0.0.1:{ssl}"),
        mtls: format!("127.0.0.1:{mtls}"),
        certs,
        data,
        settings,
        plain,
    }
}

#[test]
fn kafka_clients_produce_and_consume_over_tls_and_mtls_refuses_strangers() {
    let t = start();
    let c = |f: &str| t.certs.path().join(f).display().to_string();
    weir(&[
        "topics",
        "create",
        "--bootstrap",
        &t.server.addr,
        "--topic",
        "secret",
    ]);

    // librdkafka over TLS, checking the broker's certificate against the CA.
    let ca = format!("ssl.ca.location={}", c("ca.pem"));
    let tls_args = ["-X", "security.protocol=SSL", "-X", ca.as_str()];
    let mut produce = vec!["-b", t.ssl.as_str(), "-t", "secret", "-P"];
    produce.extend(tls_args);
    let out = kcat(&produce, b"one\ntwo\nthree\n");
    assert!(
        out.status.success(),
        "kcat -P over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // kafka-python over TLS reads them back, and writes one more.
    let script = format!(
        r#"
from kafka import KafkaConsumer, KafkaProducer
tls = dict(security_protocol="SSL", ssl_cafile={ca:?})
p = KafkaProducer(bootstrap_servers={b:?}, **tls)
p.send("secret", b"four").get(timeout=30)
p.close()
c = KafkaConsumer("secret", bootstrap_servers={b:?}, auto_offset_reset="earliest",
                  consumer_timeout_ms=5000, **tls)
print(",".join(r.value.decode() for r in c))
"#,
        ca = c("ca.pem"),
        b = t.ssl
    );
    let out = Command::new(python())
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kafka-python over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "one,two,three,four"
    );

    // mTLS: with the client's certificate, librdkafka reads everything.
    let (cert, key) = (
        format!("ssl.certificate.location={}", c("client.crt")),
        format!("ssl.key.location={}", c("client.key")),
    );
    let mut consume = vec![
        "-b",
        t.mtls.as_str(),
        "-t",
        "secret",
        "-C",
        "-e",
        "-o",
        "beginning",
    ];
    consume.extend(tls_args);
    consume.extend(["-X", cert.as_str(), "-X", key.as_str()]);
    let out = kcat(&consume, b"");
    assert!(
        out.status.success(),
        "kcat -C over mTLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "one\ntwo\nthree\nfour\n"
    );

    // Without one, the mTLS listener lets nothing through.
    let mut stranger = vec!["-b", t.mtls.as_str(), "-L", "-m", "5"];
    stranger.extend(tls_args);
    let out = kcat(&stranger, b"");
    assert!(
        !out.status.success(),
        "a client without a certificate got metadata from the mTLS listener: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Plaintext Kafka bytes to a TLS port: that connection closes, nothing else.
    let mut s = std::net::TcpStream::connect(&t.ssl).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(15)))
        .unwrap();
    s.write_all(&[0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0])
        .unwrap();
    let mut buf = [0u8; 64];
    let n = std::io::Read::read(&mut s, &mut buf).unwrap_or(0);
    assert!(
        n == 0 || buf[0] == 0x15,
        "a TLS port answered plaintext with {n} bytes"
    );
    let out = kcat(&consume, b"");
    assert!(
        out.status.success(),
        "the mTLS listener after the stray plaintext"
    );

    // DescribeConfigs shows the TLS settings, but never a secret.
    let configs = describe_broker(&t.server.addr);
    let find = |k: &str| configs.iter().find(|c| c.name.as_str() == k).unwrap();
    assert_eq!(find("ssl.keystore.type").value.as_deref(), Some("PEM"));
    let password = find("ssl.key.password");
    assert!(
        password.is_sensitive && password.value.is_none(),
        "{password:?}"
    );
}

/// The broker's settings, by DescribeConfigs v1 over the plaintext listener.
fn describe_broker(
    addr: &str,
) -> Vec<kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult> {
    use bytes::Buf;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Decodable, StrBytes};
    use std::io::Read;
    let mut r = describe_configs_request::DescribeConfigsResource::default();
    r.resource_type = 4; // BROKER
    r.resource_name = StrBytes::from_static_str("1");
    r.configuration_keys = None; // all of them
    let mut req = DescribeConfigsRequest::default();
    req.resources.push(r);
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&common::frame(
        ApiKey::DescribeConfigs,
        1,
        1,
        &RequestKind::DescribeConfigs(req),
    ))
    .unwrap();
    let mut size = [0u8; 4];
    s.read_exact(&mut size).unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut body).unwrap();
    let mut body = bytes::Bytes::from(body);
    body.advance(4); // the correlation id
    let mut resp = DescribeConfigsResponse::decode(&mut body, 1).unwrap();
    resp.results.remove(0).configs
}

/// The subject of a certificate as openssl prints it in RFC 2253 form.
fn openssl_dn(crt: &std::path::Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in"])
        .arg(crt)
        .output()
        .unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    s.trim().trim_start_matches("subject=").to_string()
}

#[test]
fn client_certificates_name_principals_that_acls_allow_and_deny() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let dir = certs.path();
    common::sign(
        dir,
        "alice",
        "/C=US/O=Weir, Inc./OU=eng/CN=alice",
        "client.ext",
    );
    common::sign(dir, "bob", "/O=Weir/CN=bob", "client.ext");
    common::sign(dir, "carol", "/O=Weir/OU=eng/CN=carol", "client.ext");
    let c = |f: &str| dir.join(f).display().to_string();

    // The DN is the one Kafka (Java's X500Principal) writes: an independent
    // implementation, openssl's RFC 2253 form, agrees with Weir's, escapes included.
    for who in ["alice", "bob", "client"] {
        let der = Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in", &c(&format!("{who}.crt"))])
            .output()
            .unwrap()
            .stdout;
        assert_eq!(
            weir_security::principal::subject_dn(&der).unwrap(),
            openssl_dn(&dir.join(format!("{who}.crt"))),
            "{who}"
        );
    }
    assert_eq!(
        openssl_dn(&dir.join("alice.crt")),
        r"CN=alice,OU=eng,O=Weir\, Inc.,C=US"
    );

    // An mTLS listener whose rule names people in OU=eng by their CN; other
    // certificates keep their whole DN (DEFAULT).
    let data = tempfile::tempdir().unwrap();
    let (plain, mtls) = (free_port(), free_port());
    let settings = vec![
        format!("listeners=PLAINTEXT://127.0.0.1:{plain},MTLS://127.0.0.1:{mtls}"),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,MTLS:SSL".into(),
        "ssl.keystore.type=PEM".into(),
        format!("ssl.keystore.location={}", c("server.pem")),
        "ssl.client.auth=required".into(),
        format!("ssl.truststore.location={}", c("ca.pem")),
        r"listener.name.mtls.ssl.principal.mapping.rules=RULE:^CN=([a-z]+),OU=eng,.*$/$1/,DEFAULT"
            .into(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        // The plaintext listener, bound to this machine, administers.
        "super.users=User:ANONYMOUS".into(),
    ];
    let server = Server::start_on(&data.path().join("data"), &settings, plain);
    let b = server.addr.as_str();
    weir(&["topics", "create", "--bootstrap", b, "--topic", "ledger"]);
    for (who, op) in [
        ("User:alice", "write"),
        ("User:alice", "read"),
        ("User:CN=bob,O=Weir", "read"),
    ] {
        weir(&[
            "acls",
            "add",
            "--bootstrap",
            b,
            "--topic",
            "ledger",
            "--allow-principal",
            who,
            "--operation",
            op,
        ]);
    }
    let mtls = format!("127.0.0.1:{mtls}");
    let as_client = |who: &str, mode: &[&str], stdin: &[u8]| {
        let (ca, cert, key) = (
            format!("ssl.ca.location={}", c("ca.pem")),
            format!("ssl.certificate.location={}", c(&format!("{who}.crt"))),
            format!("ssl.key.location={}", c(&format!("{who}.key"))),
        );
        let mut args = vec!["-b", mtls.as_str(), "-X", "security.protocol=SSL"];
        args.extend(["-X", &ca, "-X", &cert, "-X", &key]);
        args.extend(mode);
        kcat(&args, stdin)
    };
    let produce = ["-t", "ledger", "-P"];
    let consume = ["-t", "ledger", "-C", "-e", "-o", "beginning"];

    let out = as_client("alice", &produce, b"a1\na2\n");
    assert!(
        out.status.success(),
        "alice (User:alice) could not write: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_client("bob", &produce, b"b1\n");
    assert!(!out.status.success(), "bob wrote without WRITE");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Topic authorization failed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_client("bob", &consume, b"");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "a1\na2\n",
        "bob (User:CN=bob,O=Weir) reads: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Weir's own client with alice's certificate (a PEM keystore, as Java clients take
    // it) reads as User:alice.
    let keystore = dir.join("alice-keystore.pem");
    let pem = [
        std::fs::read(dir.join("alice.key")).unwrap(),
        std::fs::read(dir.join("alice.crt")).unwrap(),
    ]
    .concat();
    std::fs::write(&keystore, pem).unwrap();
    let out = weir(&[
        "consume",
        "--bootstrap",
        &mtls,
        "--topic",
        "ledger",
        "--from-beginning",
        "--max-messages",
        "2",
        "--property",
        "security.protocol=SSL",
        "--property",
        &format!("ssl.truststore.location={}", c("ca.pem")),
        "--property",
        &format!("ssl.keystore.location={}", keystore.display()),
    ]);
    assert_eq!(out.lines().count(), 2, "{out}");

    // carol's rule-mapped principal (User:carol) has no ACL: she sees no topic.
    let out = as_client("carol", &["-L", "-J"], b"");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(meta["topics"].as_array().unwrap().len(), 0, "{meta}");
}

/// The serial number of a certificate file, or of the one a TLS listener presents.
fn serial_of_file(crt: &std::path::Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(crt)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn serial_presented(addr: &str) -> String {
    let hello = Command::new("openssl")
        .args(["s_client", "-connect", addr])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    x509.stdin.take().unwrap().write_all(&hello.stdout).unwrap();
    let out = x509.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn a_keystore_set_while_the_broker_runs_serves_new_connections_after_kafka_s_checks() {
    let t = start();
    let dir = t.certs.path();
    let crt = |who: &str| dir.join(format!("{who}.crt"));
    assert_eq!(serial_presented(&t.ssl), serial_of_file(&crt("server")));
    let renewed = keystore(dir, "renewed", "/CN=server", "server.ext");
    let stranger = keystore(dir, "stranger", "/CN=stranger", "server.ext");
    std::fs::write(dir.join("bare.ext"), "extendedKeyUsage=serverAuth\n").unwrap();
    let bare = keystore(dir, "bare", "/CN=server", "bare.ext");
    let set = |value: &str| {
        weir_result(&[
            "configs",
            "alter",
            "--bootstrap",
            &t.server.addr,
            "--broker",
            "1",
            "--add-config",
            &format!("listener.name.ssl.ssl.keystore.location={value}"),
        ])
    };
    let refused = |value: &str, why: &str| {
        let out = set(value);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success() && err.contains(why), "{value}: {err}");
        // Nothing changed: the listener still presents the certificate it had.
        assert_eq!(
            serial_presented(&t.ssl),
            serial_of_file(&crt("server")),
            "{value}"
        );
    };
    // Kafka 4.4's checks, in its words: the keystore must load, keep its subject and keep
    // its subject alternative names.
    refused(
        &dir.join("missing.pem").display().to_string(),
        "Failed to load PEM SSL keystore",
    );
    refused(&stranger, "Keystore DistinguishedName does not match");
    refused(&bare, "Keystore SubjectAltNames do not match");
    // A renewed certificate with the same subject: new connections get it, and clients
    // that trust the CA go on producing over it.
    let out = set(&renewed);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(serial_presented(&t.ssl), serial_of_file(&crt("renewed")));
    // kcat over the TLS listener, trusting the CA.
    let kcat_tls = |args: &[&str], stdin: &[u8]| {
        let ca = format!("ssl.ca.location={}", dir.join("ca.pem").display());
        let mut all = vec!["-b", &t.ssl, "-X", "security.protocol=ssl", "-X", &ca];
        all.extend_from_slice(args);
        kcat(&all, stdin)
    };
    let produced = kcat_tls(&["-P", "-t", "after-renewal"], b"one\n");
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    // The same path set again once its file was rewritten (a certificate renewed in
    // place) loads it again, as Kafka does.
    let live = dir.join("live.pem");
    std::fs::copy(dir.join("server.pem"), &live).unwrap();
    assert!(set(&live.display().to_string()).status.success());
    assert_eq!(serial_presented(&t.ssl), serial_of_file(&crt("server")));
    std::fs::copy(&renewed, &live).unwrap();
    assert!(set(&live.display().to_string()).status.success());
    assert_eq!(serial_presented(&t.ssl), serial_of_file(&crt("renewed")));
    let ok = kcat_tls(&["-C", "-t", "after-renewal", "-o", "beginning", "-e"], b"");
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "one\n");
    // It holds through a restart, as a dynamic config does: server.properties names the
    // old keystore, the dynamic config the renewed one.
    let renewed_serial = serial_of_file(&crt("renewed"));
    let Tls {
        server,
        data,
        settings,
        plain,
        ssl,
        certs: _certs,
        ..
    } = t;
    drop(server);
    let _server = Server::start_on(&data.path().join("data"), &settings, plain);
    assert_eq!(serial_presented(&ssl), renewed_serial);
}
