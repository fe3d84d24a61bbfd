//! The admin client: topics and partitions, configs, consumer groups and their offsets,
//! deleting records, ACLs and client quotas — the operations of Kafka's `Admin`, over the Kafka protocol, so
//! it works against any Kafka-compatible broker.
//!
//! Each request goes where Kafka sends it: topic creation, deletion and new partitions to
//! the controller; group operations to the group's coordinator; record deletion and offset
//! lookups to each partition's leader; listing groups to every broker. Retriable errors
//! (a moved controller or coordinator, a broken connection) are retried with
//! `retry.backoff.ms` between tries until `default.api.timeout.ms` has passed; anything
//! else is returned at once, per item where Kafka answers per item.
//!
//! This file owns the client, its settings, and the two steps every operation shares:
//! `Admin::send` (where a request goes, retries, routing errors) and `match_answers` (each
//! answered item back to what was asked). The operations live one resource a file
//! (`topics`, `configs`, `groups`, `transactions`, `cluster`, `acls`, `quotas`); none
//! sends a request any other way.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::ResponseError as E;

use crate::cluster::{Cluster, ClusterConfig, CoordinatorKind};
use crate::conn::BrokerConnection;
use crate::error::{ClientError, Result};
use crate::props::Props;

mod acls;
mod cluster;
mod configs;
mod groups;
mod quotas;
mod topics;
mod transactions;

pub use cluster::{BrokerDescription, ClusterDescription};
pub use configs::AlterConfigOp;
pub use groups::{decode_assignment, GroupDescription, GroupListing, MemberDescription};
pub use quotas::{QuotaAlteration, QuotaEntity, QuotaMatch};
pub use topics::{
    ListedOffset, NewTopic, OffsetSpec, PartitionDescription, Reassignment, TopicDescription,
};
pub use transactions::{ProducerDescription, TransactionDescription, TransactionListing};
/// The ACL and config vocabulary of the admin API is Kafka's, defined once in weir-kafka.
pub use weir_kafka::acl::{
    AclBinding, AclBindingFilter, Operation, PatternFilter, PatternType, Permission, ResourceType,
};
pub use weir_kafka::config::{
    ConfigEntry, ConfigResource, ConfigSource, ConfigSynonym, ConfigType,
};

/// The admin client's settings.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub cluster: ClusterConfig,
    /// `default.api.timeout.ms`: how long one admin call may take, retries included.
    pub api_timeout: Duration,
}

impl AdminConfig {
    /// Kafka's admin keys: `bootstrap.servers`, `client.id`, `request.timeout.ms`,
    /// `default.api.timeout.ms`, `retry.backoff.ms`, `socket.connection.setup.timeout.ms`.
    pub fn from_properties<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self> {
        let mut p = Props::new(pairs);
        let cluster = p.cluster("weir-admin")?;
        let api_timeout = Duration::from_millis(p.int("default.api.timeout.ms", 60_000u64, 1)?);
        p.finish(&["retries"])?;
        Ok(AdminConfig {
            cluster,
            api_timeout,
        })
    }
}

/// A topic-partition.
pub type TopicPartitionKey = (String, i32);

/// The admin client.
pub struct Admin {
    cluster: Arc<Cluster>,
    config: AdminConfig,
}

/// Where a request goes, as Kafka's admin client sends it.
#[derive(Debug, Clone, Copy)]
enum Route<'a> {
    /// Any broker (Kafka's least loaded node).
    Any,
    /// The controller, where topic changes go (any broker if the metadata names none).
    Controller,
    /// The group's coordinator.
    Coordinator(&'a str),
    /// The transactional id's coordinator.
    TxnCoordinator(&'a str),
    /// A broker the metadata just read names: a partition's leader, a broker whose groups
    /// are listed.
    Node(i32),
    /// A broker by id, looked up in fresh metadata: its own configs are answered by it.
    Broker(i32),
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// An item's error code (and message) as a result.
fn err(code: i16, message: Option<&StrBytes>) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(ClientError::kafka(code, message.map(|m| m.to_string())))
    }
}

/// Names the item a Kafka error without a message is about.
fn with_context(e: ClientError, what: &str) -> ClientError {
    match e {
        ClientError::Kafka {
            error,
            message: None,
        } => ClientError::Kafka {
            error,
            message: Some(what.to_string()),
        },
        e => e,
    }
}

/// Errors that mean "ask the controller or coordinator again": Kafka returns them per
/// item, but they concern the whole request.
fn is_routing_error(code: i16) -> bool {
    code == E::NotController.code()
        || code == E::NotCoordinator.code()
        || code == E::CoordinatorNotAvailable.code()
        || code == E::CoordinatorLoadInProgress.code()
}

/// For answers whose error codes never say the request went to the wrong broker.
fn no_routing_codes<T>(_: &T) -> Vec<i16> {
    Vec::new()
}

/// "topic 'orders'", for errors about a topic.
fn topic_item(name: &String) -> String {
    format!("topic '{name}'")
}

/// "orders-0", for errors about a partition.
fn partition_item((topic, partition): &TopicPartitionKey) -> String {
    format!("{topic}-{partition}")
}

/// Per-partition items as per-topic lists, in topic order, as requests carry them.
fn by_topic<'a, T, P>(
    items: impl IntoIterator<Item = (&'a TopicPartitionKey, T)>,
    mut make: impl FnMut(i32, T) -> P,
) -> BTreeMap<&'a str, Vec<P>> {
    let mut by: BTreeMap<&str, Vec<P>> = BTreeMap::new();
    for ((topic, partition), item) in items {
        by.entry(topic.as_str())
            .or_default()
            .push(make(*partition, item));
    }
    by
}

/// Matches a per-item answer (topics, partitions, groups, config resources) back to what
/// was asked: one result per asked item, in the order asked (an item asked twice gets its
/// answer twice). An item the broker left out gets a protocol error in its place; an
/// answer for an item that was not asked fails the whole call, as a broker that sends one
/// has mixed something up. `item` names an item for those errors.
fn match_answers<K: Ord, T: Clone>(
    api: &str,
    asked: impl IntoIterator<Item = K>,
    answered: impl IntoIterator<Item = (K, Result<T>)>,
    item: impl Fn(&K) -> String,
) -> Result<Vec<(K, Result<T>)>> {
    let mut answers: BTreeMap<K, Result<T>> = answered.into_iter().collect();
    let matched: Vec<(K, Result<T>)> = asked
        .into_iter()
        .map(|k| {
            let r = answers.get(&k).cloned().unwrap_or_else(|| {
                Err(ClientError::Protocol(format!(
                    "{api} did not answer for {}",
                    item(&k)
                )))
            });
            (k, r)
        })
        .collect();
    for (k, _) in &matched {
        answers.remove(k);
    }
    if let Some(k) = answers.keys().next() {
        return Err(ClientError::Protocol(format!(
            "{api} answered for {}, which was not asked",
            item(k)
        )));
    }
    Ok(matched)
}

/// `match_answers` for a request about one item.
fn match_answer<K: Ord, T: Clone>(
    api: &str,
    asked: K,
    answered: impl IntoIterator<Item = (K, Result<T>)>,
    item: impl Fn(&K) -> String,
) -> Result<T> {
    let mut matched = match_answers(api, [asked], answered, item)?;
    assert_eq!(matched.len(), 1, "one result for each item asked");
    matched.remove(0).1
}

impl Admin {
    /// An admin client from Kafka-style properties (`bootstrap.servers` at least).
    pub fn from_properties<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self> {
        Self::new(AdminConfig::from_properties(pairs)?)
    }

    pub fn new(config: AdminConfig) -> Result<Self> {
        Ok(Admin {
            cluster: Cluster::new(config.cluster.clone())?,
            config,
        })
    }

    /// Runs `call` until it succeeds, fails with an error retrying cannot help, or
    /// `default.api.timeout.ms` passes.
    async fn retrying<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + self.config.api_timeout;
        loop {
            let e = match call().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let backoff = self.config.cluster.retry_backoff;
            if !e.is_retriable() || Instant::now() + backoff >= deadline {
                return Err(match e {
                    ClientError::Connection { .. } | ClientError::Timeout { .. }
                        if e.is_retriable() =>
                    {
                        ClientError::Timeout {
                            what: format!("{what}: {e}"),
                            ms: self.config.api_timeout.as_millis() as u64,
                        }
                    }
                    e => e,
                });
            }
            tracing::debug!("{what}: {e}; retrying");
            if e.needs_metadata_refresh() {
                let _ = self.cluster.refresh(Some(&[]), false).await;
            }
            tokio::time::sleep(backoff).await;
        }
    }

    /// A connection to where `route` points.
    async fn connection(&self, route: Route<'_>) -> Result<Arc<BrokerConnection>> {
        match route {
            Route::Any => self.cluster.any().await,
            Route::Controller => {
                let m = self.cluster.refresh(Some(&[]), false).await?;
                if m.brokers.contains_key(&m.controller) {
                    self.cluster.node(m.controller).await
                } else {
                    self.cluster.any().await
                }
            }
            Route::Coordinator(group) => self.cluster.coordinator(group).await,
            Route::TxnCoordinator(id) => {
                self.cluster
                    .coordinator_of(CoordinatorKind::Transaction, id)
                    .await
            }
            Route::Node(id) => self.cluster.node(id).await,
            Route::Broker(id) => {
                self.cluster.refresh(Some(&[]), false).await?;
                self.cluster.node(id).await
            }
        }
    }

    /// Sends the request `build` makes (for the version both sides speak) to `route` and
    /// returns the answer, retried as `retrying` says. `routing_codes` picks the
    /// answer's error codes that may be routing errors (NOT_CONTROLLER, NOT_COORDINATOR,
    /// ...): the first one fails the try, the group's coordinator is forgotten, and the
    /// next try asks the controller or coordinator anew. Every other code is the caller's.
    async fn send<R: Request>(
        &self,
        what: &str,
        route: Route<'_>,
        versions: (i16, i16),
        build: impl Fn(i16) -> R,
        routing_codes: impl Fn(&R::Response) -> Vec<i16>,
    ) -> Result<R::Response> {
        let api = ApiKey::try_from(R::KEY)
            .map_err(|_| ClientError::Protocol(format!("unknown API key {}", R::KEY)))?;
        self.retrying(what, || async {
            let conn = self.connection(route).await?;
            let v = conn.version_for(api, versions)?;
            let resp = conn.request(&build(v), v).await?;
            let routing = routing_codes(&resp)
                .into_iter()
                .find(|c| is_routing_error(*c));
            if let Some(code) = routing {
                match route {
                    Route::Coordinator(group) => self.cluster.forget_coordinator(group),
                    Route::TxnCoordinator(id) => self
                        .cluster
                        .forget_coordinator_of(CoordinatorKind::Transaction, id),
                    _ => {}
                }
                return Err(ClientError::kafka(code, None));
            }
            Ok(resp)
        })
        .await
    }

    /// `default.api.timeout.ms` as requests carry a timeout.
    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.config.api_timeout.as_millis()).unwrap_or(i32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_admin_settings_are_refused() {
        let e = AdminConfig::from_properties([("bootstrap.servers", "h:1"), ("acks", "all")])
            .unwrap_err();
        assert!(e.to_string().contains("acks"), "{e}");
        let c = AdminConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("default.api.timeout.ms", "1500"),
        ])
        .unwrap();
        assert_eq!(c.api_timeout, Duration::from_millis(1500));
    }

    fn topics(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn answers_are_matched_to_what_was_asked() {
        let answered = vec![
            ("b".to_string(), Ok(2)),
            ("a".to_string(), Err(ClientError::kafka(36, None))),
        ];
        let m = match_answers(
            "CreateTopics",
            topics(&["a", "b", "a"]),
            answered,
            topic_item,
        )
        .unwrap();
        let codes: Vec<(String, Option<i16>)> = m
            .iter()
            .map(|(k, r)| (k.clone(), r.as_ref().err().and_then(|e| e.code())))
            .collect();
        assert_eq!(
            codes,
            vec![
                ("a".to_string(), Some(36)),
                ("b".to_string(), None),
                ("a".to_string(), Some(36)),
            ]
        );
        assert_eq!(m[1].1.as_ref().ok(), Some(&2));
    }

    #[test]
    fn an_item_left_out_or_not_asked_is_a_protocol_error() {
        let m = match_answers(
            "DeleteTopics",
            topics(&["a", "b"]),
            [("a".to_string(), Ok(()))],
            topic_item,
        )
        .unwrap();
        let e = m[1].1.as_ref().unwrap_err();
        assert!(matches!(e, ClientError::Protocol(_)), "{e}");
        assert!(e.to_string().contains("topic 'b'"), "{e}");

        let e = match_answers(
            "DeleteTopics",
            topics(&["a"]),
            [("a".to_string(), Ok(())), ("z".to_string(), Ok(()))],
            topic_item,
        )
        .unwrap_err();
        assert!(matches!(e, ClientError::Protocol(_)), "{e}");
        assert!(e.to_string().contains("topic 'z'"), "{e}");

        let e = match_answer::<_, ()>("ListOffsets", ("t".to_string(), 0), [], partition_item)
            .unwrap_err();
        assert!(e.to_string().contains("t-0"), "{e}");
    }
}
