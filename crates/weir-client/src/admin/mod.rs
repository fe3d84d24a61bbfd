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
//! This file owns the client, its settings, and what every operation shares: retries,
//! and finding the controller or a group's coordinator. The operations live one resource
//! a file (`topics`, `configs`, `groups`, `cluster`, `acls`, `quotas`).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;

use crate::cluster::{Cluster, ClusterConfig};
use crate::config::Props;
use crate::conn::BrokerConnection;
use crate::error::{ClientError, Result};

mod acls;
mod cluster;
mod configs;
mod groups;
mod quotas;
mod topics;

pub use cluster::{BrokerDescription, ClusterDescription};
pub use configs::AlterConfigOp;
pub use groups::{decode_assignment, GroupDescription, GroupListing, MemberDescription};
pub use quotas::{QuotaAlteration, QuotaEntity, QuotaMatch};
pub use topics::{ListedOffset, NewTopic, OffsetSpec, PartitionDescription, TopicDescription};
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

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn err(code: i16, message: Option<&StrBytes>) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(ClientError::kafka(code, message.map(|m| m.to_string())))
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

    /// The controller, where topic changes go (any broker if the metadata names none).
    async fn controller(&self) -> Result<Arc<BrokerConnection>> {
        let m = self.cluster.refresh(Some(&[]), false).await?;
        if m.brokers.contains_key(&m.controller) {
            self.cluster.node(m.controller).await
        } else {
            self.cluster.any().await
        }
    }

    /// The group's coordinator; a routing error makes the next call look it up again.
    async fn coordinator(&self, group: &str) -> Result<Arc<BrokerConnection>> {
        self.cluster.coordinator(group).await
    }

    fn routing_failure(&self, group: Option<&str>, code: i16) -> ClientError {
        if let Some(g) = group {
            self.cluster.forget_coordinator(g);
        }
        ClientError::kafka(code, None)
    }

    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.config.api_timeout.as_millis()).unwrap_or(i32::MAX)
    }
}

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
}
