//! Configs of topics and brokers through the admin client: DescribeConfigs and
//! IncrementalAlterConfigs, with weir-kafka's `ConfigEntry` and `ConfigResource`. A broker's
//! configs go to that broker, a topic's to any broker (describe) or the controller (alter);
//! what the keys mean is the broker's business, not this file's.

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::protocol::StrBytes;
use weir_kafka::config::{
    AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ConfigSynonym, ConfigType,
};

use super::{err, is_routing_error, sb, Admin};
use crate::error::{ClientError, Result};

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

impl Admin {
    /// The configs of a topic or broker (all of them, defaults included).
    pub async fn describe_configs(&self, resource: &ConfigResource) -> Result<Vec<ConfigEntry>> {
        let (kind, name) = resource.wire();
        let resp = self
            .retrying("describing configs", || async {
                // A broker's configs are answered by that broker.
                let conn = match resource {
                    ConfigResource::Broker(id) => {
                        self.cluster.refresh(Some(&[]), false).await?;
                        self.cluster.node(*id).await?
                    }
                    ConfigResource::Topic(_) => self.cluster.any().await?,
                };
                let v = conn.version_for(ApiKey::DescribeConfigs, DESCRIBE_CONFIGS)?;
                let mut req = DescribeConfigsRequest::default();
                let mut r = DescribeConfigsResource::default();
                r.resource_type = kind;
                r.resource_name = sb(&name);
                r.configuration_keys = None;
                req.resources = vec![r];
                conn.request(&req, v).await
            })
            .await?;
        let result = resp
            .results
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("DescribeConfigs answered nothing".into()))?;
        err(result.error_code, result.error_message.as_ref())?;
        let mut entries: Vec<ConfigEntry> = result
            .configs
            .into_iter()
            .map(|c| ConfigEntry {
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
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
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
        let resp = self
            .retrying("altering configs", || async {
                let conn = match resource {
                    ConfigResource::Broker(id) => {
                        self.cluster.refresh(Some(&[]), false).await?;
                        self.cluster.node(*id).await?
                    }
                    ConfigResource::Topic(_) => self.controller().await?,
                };
                let v =
                    conn.version_for(ApiKey::IncrementalAlterConfigs, INCREMENTAL_ALTER_CONFIGS)?;
                let mut req = IncrementalAlterConfigsRequest::default();
                req.validate_only = validate_only;
                let mut r = AlterConfigsResource::default();
                r.resource_type = kind;
                r.resource_name = sb(&name);
                r.configs = ops.iter().map(AlterConfigOp::wire).collect();
                req.resources = vec![r];
                let resp = conn.request(&req, v).await?;
                if let Some(r) = resp
                    .responses
                    .iter()
                    .find(|r| is_routing_error(r.error_code))
                {
                    return Err(self.routing_failure(None, r.error_code));
                }
                Ok(resp)
            })
            .await?;
        match resp.responses.first() {
            Some(r) => err(r.error_code, r.error_message.as_ref()),
            None => Err(ClientError::Protocol(
                "IncrementalAlterConfigs answered nothing".into(),
            )),
        }
    }
}
