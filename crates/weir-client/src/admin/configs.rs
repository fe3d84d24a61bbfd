//! Configs of topics and brokers through the admin client: DescribeConfigs and
//! IncrementalAlterConfigs, with weir-kafka's `ConfigEntry` and `ConfigResource`. A broker's
//! configs go to that broker, a topic's to any broker (describe) or the controller (alter);
//! what the keys mean is the broker's business, not this file's.

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{DescribeConfigsRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::protocol::StrBytes;
use weir_kafka::config::{
    AlterConfigOpType, ConfigEntry, ConfigResource, ConfigResourceType, ConfigSource,
    ConfigSynonym, ConfigType,
};

use super::{err, match_answer, no_routing_codes, sb, Admin, Route};
use crate::error::Result;

const DESCRIBE_CONFIGS: (i16, i16) = (1, 4);
const INCREMENTAL_ALTER_CONFIGS: (i16, i16) = (0, 1);

/// A change to one config (IncrementalAlterConfigs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    Set(String, String),
    /// Back to the default.
    Delete(String),
    /// Add to a list-valued config.
    Append(String, String),
    /// Remove from a list-valued config.
    Subtract(String, String),
}

impl AlterConfigOp {
    fn wire(&self) -> AlterableConfig {
        let (name, op, value) = match self {
            AlterConfigOp::Set(k, v) => (k, AlterConfigOpType::Set, Some(v)),
            AlterConfigOp::Delete(k) => (k, AlterConfigOpType::Delete, None),
            AlterConfigOp::Append(k, v) => (k, AlterConfigOpType::Append, Some(v)),
            AlterConfigOp::Subtract(k, v) => (k, AlterConfigOpType::Subtract, Some(v)),
        };
        let mut c = AlterableConfig::default();
        c.name = StrBytes::from_string(name.clone());
        c.config_operation = op.code();
        c.value = value.map(|v| StrBytes::from_string(v.clone()));
        c
    }
}

/// "topic 'orders'" or "broker 1", for errors about a resource (as `wire` names it).
fn resource_item((kind, name): &(i8, String)) -> String {
    match ConfigResourceType::from_code(*kind) {
        Some(ConfigResourceType::Broker) if name.is_empty() => "the brokers' defaults".into(),
        Some(ConfigResourceType::Broker) => format!("broker {name}"),
        Some(ConfigResourceType::Topic) => format!("topic '{name}'"),
        Some(ConfigResourceType::Group) => format!("group '{name}'"),
        _ => format!("resource '{name}' of type {kind}"),
    }
}

impl Admin {
    /// The configs of a topic or broker (all of them, defaults included).
    pub async fn describe_configs(&self, resource: &ConfigResource) -> Result<Vec<ConfigEntry>> {
        let (kind, name) = resource.wire();
        // A broker's configs are answered by that broker.
        let route = match resource {
            ConfigResource::Broker(id) => Route::Broker(*id),
            ConfigResource::Topic(_)
            | ConfigResource::BrokerDefaults
            | ConfigResource::Group(_) => Route::Any,
        };
        let build = |_| {
            let mut req = DescribeConfigsRequest::default();
            let mut r = DescribeConfigsResource::default();
            r.resource_type = kind;
            r.resource_name = sb(&name);
            r.configuration_keys = None;
            req.resources = vec![r];
            req
        };
        let resp = self
            .send(
                "describing configs",
                route,
                DESCRIBE_CONFIGS,
                build,
                no_routing_codes,
            )
            .await?;
        let answered = resp.results.into_iter().map(|result| {
            let key = (result.resource_type, result.resource_name.to_string());
            let entries = err(result.error_code, result.error_message.as_ref()).map(|()| {
                let mut entries: Vec<ConfigEntry> =
                    result.configs.into_iter().map(config_entry).collect();
                entries.sort_by(|a, b| a.name.cmp(&b.name));
                entries
            });
            (key, entries)
        });
        match_answer(
            "DescribeConfigs",
            (kind, name.clone()),
            answered,
            resource_item,
        )
    }

    /// Changes configs of a topic or broker (IncrementalAlterConfigs: only the named keys
    /// change).
    pub async fn alter_configs(
        &self,
        resource: &ConfigResource,
        ops: &[AlterConfigOp],
        validate_only: bool,
    ) -> Result<()> {
        let (kind, name) = resource.wire();
        let route = match resource {
            ConfigResource::Broker(id) => Route::Broker(*id),
            ConfigResource::Topic(_) | ConfigResource::BrokerDefaults => Route::Controller,
            // Any broker takes a group's configs, as Kafka's Admin sends them.
            ConfigResource::Group(_) => Route::Any,
        };
        let build = |_| {
            let mut req = IncrementalAlterConfigsRequest::default();
            req.validate_only = validate_only;
            let mut r = AlterConfigsResource::default();
            r.resource_type = kind;
            r.resource_name = sb(&name);
            r.configs = ops.iter().map(AlterConfigOp::wire).collect();
            req.resources = vec![r];
            req
        };
        let resp = self
            .send(
                "altering configs",
                route,
                INCREMENTAL_ALTER_CONFIGS,
                build,
                |r| r.responses.iter().map(|r| r.error_code).collect(),
            )
            .await?;
        let answered = resp.responses.iter().map(|r| {
            let key = (r.resource_type, r.resource_name.to_string());
            (key, err(r.error_code, r.error_message.as_ref()))
        });
        match_answer(
            "IncrementalAlterConfigs",
            (kind, name.clone()),
            answered,
            resource_item,
        )
    }
}

/// One config as DescribeConfigs describes it.
fn config_entry(
    c: kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult,
) -> ConfigEntry {
    ConfigEntry {
        name: c.name.to_string(),
        value: c.value.map(|v| v.to_string()),
        source: ConfigSource::from_code(c.config_source),
        read_only: c.read_only,
        sensitive: c.is_sensitive,
        config_type: ConfigType::from_code(c.config_type),
        documentation: c.documentation.map(|d| d.to_string()),
        synonyms: c
            .synonyms
            .into_iter()
            .map(|s| ConfigSynonym {
                name: s.name.to_string(),
                value: s.value.map(|v| v.to_string()),
                source: ConfigSource::from_code(s.source),
            })
            .collect(),
    }
}
