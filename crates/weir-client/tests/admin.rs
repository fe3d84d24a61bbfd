//! The admin client against a real broker: what it creates, alters and deletes is what the
//! broker then reports, and each refusal comes back as the Kafka error a user can act on.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use weir_client::admin::{
    Admin, AlterConfigOp, ConfigResource, ConfigSource, NewTopic, OffsetSpec,
};
use weir_client::{Producer, ProducerRecord};

fn admin(bootstrap: &str) -> Admin {
    Admin::from_properties([
        ("bootstrap.servers", bootstrap),
        ("default.api.timeout.ms", "5000"),
    ])
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_described_grown_altered_and_deleted() {
    let mut b = common::broker(&[("auto.create.topics.enable", "false")]).await;
    let a = admin(&b.bootstrap);

    let made = a
        .create_topics(
            &[
                NewTopic::new("orders", 3, 1).config("cleanup.policy", "compact"),
                NewTopic::new("bad", 0, 1),
                NewTopic::new("bad-config", 1, 1).config("retention.ms", "soon"),
            ],
            false,
        )
        .await
        .unwrap();
    assert!(made[0].1.is_ok(), "{:?}", made[0]);
    assert_eq!(
        made[1].1.as_ref().unwrap_err().code(),
        Some(37),
        "INVALID_PARTITIONS"
    );
    assert_eq!(
        made[2].1.as_ref().unwrap_err().code(),
        Some(40),
        "INVALID_CONFIG"
    );
    let again = a
        .create_topics(&[NewTopic::new("orders", 3, 1)], false)
        .await
        .unwrap();
    assert_eq!(
        again[0].1.as_ref().unwrap_err().code(),
        Some(36),
        "TOPIC_ALREADY_EXISTS"
    );
    let dry = a
        .create_topics(&[NewTopic::new("dry", 2, 1)], true)
        .await
        .unwrap();
    assert!(dry[0].1.is_ok());

    assert_eq!(
        a.list_topics(false).await.unwrap(),
        vec!["orders".to_string()]
    );
    let d = a
        .describe_topics(&["orders".to_string(), "nope".to_string()])
        .await
        .unwrap();
    let orders = d[0].1.as_ref().unwrap();
    assert_eq!(orders.partitions.len(), 3);
    assert!(orders
        .partitions
        .iter()
        .all(|p| p.leader >= 0 && p.replicas == vec![p.leader]));
    assert_eq!(
        d[1].1.as_ref().unwrap_err().code(),
        Some(3),
        "UNKNOWN_TOPIC_OR_PARTITION"
    );

    let grown = a
        .create_partitions(&[("orders".to_string(), 5)], false)
        .await
        .unwrap();
    assert!(grown[0].1.is_ok(), "{:?}", grown[0]);
    let shrunk = a
        .create_partitions(&[("orders".to_string(), 2)], false)
        .await
        .unwrap();
    assert_eq!(shrunk[0].1.as_ref().unwrap_err().code(), Some(37));
    let d = a.describe_topics(&["orders".to_string()]).await.unwrap();
    assert_eq!(d[0].1.as_ref().unwrap().partitions.len(), 5);

    let topic = ConfigResource::Topic("orders".into());
    let configs = a.describe_configs(&topic).await.unwrap();
    let policy = configs.iter().find(|c| c.name == "cleanup.policy").unwrap();
    assert_eq!(policy.value.as_deref(), Some("compact"));
    assert_eq!(policy.source, ConfigSource::DynamicTopic);
    let retention = configs.iter().find(|c| c.name == "retention.ms").unwrap();
    assert!(retention.is_default());

    a.alter_configs(
        &topic,
        &[AlterConfigOp::Set("retention.ms".into(), "60000".into())],
        false,
    )
    .await
    .unwrap();
    a.alter_configs(
        &topic,
        &[AlterConfigOp::Delete("cleanup.policy".into())],
        false,
    )
    .await
    .unwrap();
    let configs = a.describe_configs(&topic).await.unwrap();
    let get = |n: &str| configs.iter().find(|c| c.name == n).unwrap().clone();
    assert_eq!(get("retention.ms").value.as_deref(), Some("60000"));
    assert_eq!(get("cleanup.policy").value.as_deref(), Some("delete"));
    assert!(get("cleanup.policy").is_default());
    let bad = a
        .alter_configs(
            &topic,
            &[AlterConfigOp::Set("retention.ms".into(), "x".into())],
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Some(40), "{bad}");

    let gone = a
        .delete_topics(&["orders".to_string(), "nope".to_string()])
        .await
        .unwrap();
    assert!(gone[0].1.is_ok());
    assert_eq!(gone[1].1.as_ref().unwrap_err().code(), Some(3));
    assert!(a.list_topics(false).await.unwrap().is_empty());
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_are_listed_and_records_deleted() {
    let mut b = common::broker(&[]).await;
    let a = admin(&b.bootstrap);
    a.create_topics(&[NewTopic::new("events", 2, 1)], false)
        .await
        .unwrap()[0]
        .1
        .clone()
        .unwrap();
    let p = Producer::from_properties([("bootstrap.servers", b.bootstrap.as_str())]).unwrap();
    for i in 0..10i64 {
        p.send_and_wait(
            ProducerRecord::new("events")
                .partition(0)
                .timestamp(1_000 + i * 100)
                .value(format!("e{i}")),
        )
        .await
        .unwrap();
    }
    p.close(Duration::from_secs(5)).await.unwrap();
    let tp = ("events".to_string(), 0);
    let looked = a
        .list_offsets(&[
            (tp.clone(), OffsetSpec::Earliest),
            (("events".to_string(), 1), OffsetSpec::Latest),
        ])
        .await
        .unwrap();
    assert_eq!(looked[&tp].offset, 0);
    assert_eq!(looked[&("events".to_string(), 1)].offset, 0);
    let by_time = a
        .list_offsets(&[(tp.clone(), OffsetSpec::Timestamp(1_450))])
        .await
        .unwrap();
    assert_eq!(by_time[&tp].offset, 5);
    assert_eq!(by_time[&tp].timestamp, 1_500);
    let latest = a
        .list_offsets(&[(tp.clone(), OffsetSpec::Latest)])
        .await
        .unwrap();
    assert_eq!(latest[&tp].offset, 10);

    let deleted = a
        .delete_records(&BTreeMap::from([(tp.clone(), 4)]))
        .await
        .unwrap();
    assert_eq!(*deleted[&tp].as_ref().unwrap(), 4);
    let earliest = a
        .list_offsets(&[(tp.clone(), OffsetSpec::Earliest)])
        .await
        .unwrap();
    assert_eq!(earliest[&tp].offset, 4);
    let too_far = a
        .delete_records(&BTreeMap::from([(tp.clone(), 99)]))
        .await
        .unwrap();
    assert_eq!(
        too_far[&tp].as_ref().unwrap_err().code(),
        Some(1),
        "OFFSET_OUT_OF_RANGE"
    );
    let missing = a
        .list_offsets(&[(("events".to_string(), 7), OffsetSpec::Latest)])
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Some(3), "{missing}");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_offsets_are_reset_listed_and_deleted() {
    let mut b = common::broker(&[]).await;
    let a = admin(&b.bootstrap);
    a.create_topics(&[NewTopic::new("clicks", 2, 1)], false)
        .await
        .unwrap()[0]
        .1
        .clone()
        .unwrap();
    // An admin commit creates the group (like kafka-consumer-groups --reset-offsets).
    let offsets = BTreeMap::from([
        (("clicks".to_string(), 0), 7),
        (("clicks".to_string(), 1), 3),
    ]);
    a.alter_group_offsets("analytics", &offsets).await.unwrap();
    assert_eq!(
        a.list_group_offsets("analytics", None).await.unwrap(),
        offsets
    );
    let one = a
        .list_group_offsets("analytics", Some(&[("clicks".to_string(), 1)]))
        .await
        .unwrap();
    assert_eq!(one, BTreeMap::from([(("clicks".to_string(), 1), 3)]));

    let groups = a.list_groups().await.unwrap();
    let g = groups
        .iter()
        .find(|g| g.group_id == "analytics")
        .expect("listed");
    assert_eq!(g.state, "Empty");
    let d = a.describe_group("analytics").await.unwrap();
    assert_eq!(d.state, "Empty");
    assert!(d.members.is_empty());
    let unknown = a.describe_group("never-used").await.unwrap();
    assert_eq!(unknown.state, "Dead");

    a.delete_group_offsets("analytics", &[("clicks".to_string(), 0)])
        .await
        .unwrap();
    assert_eq!(
        a.list_group_offsets("analytics", None).await.unwrap(),
        BTreeMap::from([(("clicks".to_string(), 1), 3)])
    );
    let deleted = a
        .delete_groups(&["analytics".to_string(), "never-used".to_string()])
        .await
        .unwrap();
    assert!(deleted[0].1.is_ok(), "{:?}", deleted[0]);
    assert_eq!(
        deleted[1].1.as_ref().unwrap_err().code(),
        Some(69),
        "GROUP_ID_NOT_FOUND"
    );
    assert!(a
        .list_groups()
        .await
        .unwrap()
        .iter()
        .all(|g| g.group_id != "analytics"));
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_fails_within_the_api_timeout() {
    let a = Admin::from_properties([
        ("bootstrap.servers", "127.0.0.1:1"),
        ("default.api.timeout.ms", "700"),
    ])
    .unwrap();
    let start = std::time::Instant::now();
    let e = a.list_topics(false).await.unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
}
