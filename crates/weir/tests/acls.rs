//! ACLs as Kafka users run them: `authorizer.class.name` set to Kafka's StandardAuthorizer,
//! `super.users`, users logging in with SCRAM, and ACLs made by three implementations:
//! `weir acls` (offline on the stopped broker's data directory, then online), librdkafka
//! (confluent-kafka's AdminClient) and kafka-python's KafkaAdminClient. Real clients then
//! find out what the ACLs allow: a client without them gets TOPIC_AUTHORIZATION_FAILED and
//! sees no topic, DENY wins over ALLOW, and the rules survive a restart.

mod common;

use std::process::{Command, Output};

use common::{add_user, free_port, kcat, python, weir, Server};

const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// `weir acls ...`, whatever its outcome.
fn acls(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("acls")
        .args(args)
        .output()
        .unwrap()
}

fn ok(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run_python(what: &str, script: &str) -> String {
    let out = Command::new(python())
        .args(["-c", script])
        .output()
        .unwrap();
    ok(what, &out)
}

/// kcat as `user` over SCRAM-SHA-256.
fn kcat_as(addr: &str, user: &str, mode: &[&str], stdin: &[u8]) -> Output {
    let username = format!("sasl.username={user}");
    let password = format!("sasl.password={user}-secret");
    let mut args = vec![
        "-b",
        addr,
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanisms=SCRAM-SHA-256",
        "-X",
        &username,
        "-X",
        &password,
    ];
    args.extend(mode);
    kcat(&args, stdin)
}

fn python_auth(user: &str) -> String {
    format!(
        r#"dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
             sasl_plain_username="{user}", sasl_plain_password="{user}-secret")"#
    )
}

#[test]
fn acls_allow_and_deny_as_kafka_does_for_real_clients() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for u in ["admin", "alice", "bob"] {
        add_user(&data, u, "SCRAM-SHA-256", &format!("{u}-secret"));
    }
    // The first rule comes from the stopped broker's data directory: plaintext clients on
    // this machine (User:ANONYMOUS from 127.0.0.1) administer the cluster.
    ok(
        "weir acls add --data-dir",
        &acls(&[
            "add",
            "--data-dir",
            data.to_str().unwrap(),
            "--cluster",
            "--allow-principal",
            "User:ANONYMOUS",
            "--allow-host",
            "127.0.0.1",
            "--operation",
            "all",
        ]),
    );
    let (plain, sasl) = (free_port(), free_port());
    let settings = vec![
        format!("listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}"),
        "sasl.enabled.mechanisms=SCRAM-SHA-256".into(),
        format!("authorizer.class.name={STANDARD_AUTHORIZER}"),
        "super.users=User:admin".into(),
        "auto.create.topics.enable=false".into(),
    ];
    let server = Server::start_on(&data, &settings, plain);
    let sasl_addr = format!("127.0.0.1:{sasl}");
    for t in ["alice-orders", "alice-secret", "shared", "hidden"] {
        weir(&[
            "topics",
            "create",
            "--bootstrap",
            &server.addr,
            "--topic",
            t,
        ]);
    }

    // Online, through the plaintext listener: alice reads and writes topics starting with
    // "alice-" and reads groups starting with "alice-", but may not write alice-secret.
    let bootstrap = ["--bootstrap", server.addr.as_str()];
    let online = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(bootstrap);
        acls(&all)
    };
    ok(
        "weir acls add (topic prefix)",
        &online(&[
            "add",
            "--topic",
            "alice-",
            "--resource-pattern-type",
            "prefixed",
            "--allow-principal",
            "User:alice",
            "--operation",
            "read",
            "--operation",
            "write",
        ]),
    );
    ok(
        "weir acls add (group prefix)",
        &online(&[
            "add",
            "--group",
            "alice-",
            "--resource-pattern-type",
            "prefixed",
            "--allow-principal",
            "User:alice",
            "--operation",
            "read",
        ]),
    );
    ok(
        "weir acls add (deny)",
        &online(&[
            "add",
            "--topic",
            "alice-secret",
            "--deny-principal",
            "User:alice",
            "--operation",
            "write",
        ]),
    );
    // A mistake is refused with what to fix.
    let bad = online(&["add", "--topic", "t", "--allow-principal", "alice"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("TYPE:NAME"));

    // librdkafka's AdminClient, as the super user over SCRAM: bob may read "shared".
    run_python(
        "confluent-kafka create_acls",
        &format!(
            r#"
from confluent_kafka.admin import (AdminClient, AclBinding, ResourceType,
    ResourcePatternType, AclOperation, AclPermissionType)
a = AdminClient({{"bootstrap.servers": "{sasl_addr}", "security.protocol": "SASL_PLAINTEXT",
                 "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "admin",
                 "sasl.password": "admin-secret"}})
b = AclBinding(ResourceType.TOPIC, "shared", ResourcePatternType.LITERAL, "User:bob", "*",
               AclOperation.READ, AclPermissionType.ALLOW)
for f in a.create_acls([b]).values():
    f.result(timeout=30)
"#
        ),
    );

    // kafka-python's KafkaAdminClient lists them: six ACLs, as created.
    let listed = run_python(
        "kafka-python describe_acls",
        &format!(
            r#"
from kafka.admin import (KafkaAdminClient, ACLFilter, ResourcePatternFilter, ResourceType,
    ACLResourcePatternType, ACLOperation, ACLPermissionType)
a = KafkaAdminClient(bootstrap_servers="{sasl_addr}", **{auth})
f = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
              permission_type=ACLPermissionType.ANY,
              resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                                     ACLResourcePatternType.ANY))
acls, err = a.describe_acls(f)
for acl in sorted(acls, key=str):
    print(acl.principal, acl.operation.name, acl.permission_type.name,
          acl.resource_pattern.resource_type.name, acl.resource_pattern.pattern_type.name,
          acl.resource_pattern.resource_name)
"#,
            auth = python_auth("admin")
        ),
    );
    let mut lines: Vec<&str> = listed.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "User:ANONYMOUS ALL ALLOW CLUSTER LITERAL kafka-cluster",
            "User:alice READ ALLOW GROUP PREFIXED alice-",
            "User:alice READ ALLOW TOPIC PREFIXED alice-",
            "User:alice WRITE ALLOW TOPIC PREFIXED alice-",
            "User:alice WRITE DENY TOPIC LITERAL alice-secret",
            "User:bob READ ALLOW TOPIC LITERAL shared",
        ],
        "{listed}"
    );

    // alice produces to her topic and reads it back in her group; her DENY wins on
    // alice-secret; she sees her topics and nothing else.
    let alice = run_python(
        "kafka-python as alice",
        &format!(
            r#"
from kafka import KafkaProducer, KafkaConsumer
from kafka.errors import TopicAuthorizationFailedError
auth = {auth}
p = KafkaProducer(bootstrap_servers="{sasl_addr}", max_block_ms=10000, **auth)
p.send("alice-orders", b"o1").get(timeout=30)
p.send("alice-orders", b"o2").get(timeout=30)
try:
    p.send("alice-secret", b"s").get(timeout=30)
    print("secret written")
except TopicAuthorizationFailedError:
    print("secret denied")
p.close()
c = KafkaConsumer("alice-orders", bootstrap_servers="{sasl_addr}", group_id="alice-g",
                  auto_offset_reset="earliest", consumer_timeout_ms=8000, **auth)
print("read", ",".join(r.value.decode() for r in c))
c.commit()
print("topics", ",".join(sorted(c.topics())))
c.close()
"#,
            auth = python_auth("alice")
        ),
    );
    assert_eq!(
        alice.trim(),
        "secret denied\nread o1,o2\ntopics alice-orders,alice-secret",
        "{alice}"
    );

    // bob: TOPIC_AUTHORIZATION_FAILED on alice's topic, and only "shared" in Metadata.
    let bob = run_python(
        "kafka-python as bob",
        &format!(
            r#"
from kafka import KafkaProducer, KafkaConsumer
from kafka.errors import TopicAuthorizationFailedError
auth = {auth}
p = KafkaProducer(bootstrap_servers="{sasl_addr}", max_block_ms=10000, **auth)
try:
    p.send("alice-orders", b"x").get(timeout=30)
    print("written")
except TopicAuthorizationFailedError as e:
    print("denied")
p.close()
c = KafkaConsumer(bootstrap_servers="{sasl_addr}", **auth)
print("topics", ",".join(sorted(c.topics())))
c.close()
"#,
            auth = python_auth("bob")
        ),
    );
    assert_eq!(bob.trim(), "denied\ntopics shared", "{bob}");

    // librdkafka as bob: the topic list holds only "shared"; producing to alice's topic
    // and consuming it in a group fail with the authorization errors.
    let out = kcat_as(&sasl_addr, "bob", &["-L", "-J"], b"");
    let listing = ok("kcat -L as bob", &out);
    let meta: serde_json::Value = serde_json::from_str(&listing).unwrap();
    let names: Vec<&str> = meta["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["topic"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shared"], "{listing}");
    let out = kcat_as(&sasl_addr, "bob", &["-t", "alice-orders", "-P"], b"x\n");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Topic authorization failed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kcat_as(
        &sasl_addr,
        "bob",
        &["-C", "-t", "hidden", "-e", "-o", "beginning"],
        b"",
    );
    assert!(!out.status.success(), "bob read a topic he may not");

    // Remove alice's WRITE: she can still read, no longer write.
    let removed = online(&[
        "remove",
        "--topic",
        "alice-",
        "--resource-pattern-type",
        "prefixed",
        "--allow-principal",
        "User:alice",
        "--operation",
        "write",
    ]);
    ok("weir acls remove", &removed);
    assert!(String::from_utf8_lossy(&removed.stderr).contains("removed"));
    let out = kcat_as(&sasl_addr, "alice", &["-t", "alice-orders", "-P"], b"o3\n");
    assert!(!out.status.success(), "alice wrote after losing WRITE");
    let out = kcat_as(
        &sasl_addr,
        "alice",
        &["-C", "-t", "alice-orders", "-e", "-o", "beginning"],
        b"",
    );
    assert_eq!(ok("kcat -C as alice", &out), "o1\no2\n");

    // Only those with DESCRIBE / ALTER on the cluster see or change ACLs.
    let denied = run_python(
        "kafka-python describe_acls as alice",
        &format!(
            r#"
from kafka.admin import (KafkaAdminClient, ACLFilter, ResourcePatternFilter, ResourceType,
    ACLResourcePatternType, ACLOperation, ACLPermissionType)
from kafka.errors import ClusterAuthorizationFailedError
a = KafkaAdminClient(bootstrap_servers="{sasl_addr}", **{auth})
f = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
              permission_type=ACLPermissionType.ANY,
              resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                                     ACLResourcePatternType.ANY))
try:
    a.describe_acls(f)
    print("listed")
except ClusterAuthorizationFailedError:
    print("denied")
"#,
            auth = python_auth("alice")
        ),
    );
    assert_eq!(denied.trim(), "denied");
    // Nor the data directories (DescribeLogDirs needs DESCRIBE on the cluster too).
    // kafka-python asks a version without a top-level error: the refusal is an answer
    // with no directory, as Kafka gives it.
    let dirs = run_python(
        "kafka-python describe_log_dirs as alice",
        &format!(
            r#"
from kafka.admin import KafkaAdminClient
from kafka.errors import ClusterAuthorizationFailedError
a = KafkaAdminClient(bootstrap_servers="{sasl_addr}", **{auth})
try:
    print("directories:", len(a.describe_log_dirs()[0]["log_dirs"]))
except ClusterAuthorizationFailedError:
    print("denied")
"#,
            auth = python_auth("alice")
        ),
    );
    assert!(matches!(dirs.trim(), "denied" | "directories: 0"), "{dirs}");

    // The rules survive a restart; the offline tool refuses a running broker's directory.
    let again = acls(&["list", "--data-dir", data.to_str().unwrap()]);
    assert!(
        !again.status.success(),
        "weir acls ran on a live data directory"
    );
    drop(server);
    let listed = ok(
        "weir acls list --data-dir",
        &acls(&["list", "--data-dir", data.to_str().unwrap(), "--json"]),
    );
    let rules: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(rules.as_array().unwrap().len(), 5, "{listed}");
    let _server = Server::start_on(&data, &settings, plain);
    let out = kcat_as(&sasl_addr, "bob", &["-L", "-J"], b"");
    let meta: serde_json::Value = serde_json::from_str(&ok("kcat -L after restart", &out)).unwrap();
    assert_eq!(meta["topics"].as_array().unwrap().len(), 1);
}
