//! Client quotas through the admin client: DescribeClientQuotas and AlterClientQuotas,
//! as Kafka's Admin `describeClientQuotas` / `alterClientQuotas` (and `kafka-configs
//! --entity-type users|clients`) use them.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{AlterClientQuotasRequest, DescribeClientQuotasRequest};

use super::{err, no_routing_codes, sb, Admin, Route};
use crate::error::{ClientError, Result};

const DESCRIBE_CLIENT_QUOTAS: (i16, i16) = (0, 1);
const ALTER_CLIENT_QUOTAS: (i16, i16) = (0, 1);

/// What a quota is for: each part is an entity type (`user`, `client-id`) with a name,
/// or `None` for that type's default.
pub type QuotaEntity = Vec<(String, Option<String>)>;

/// Which entities to describe, per entity type (weir-kafka's).
pub use weir_kafka::quota::QuotaMatch;

/// A change to one quota of an entity: a new value, or `None` to remove it.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaAlteration {
    pub entity: QuotaEntity,
    pub changes: Vec<(String, Option<f64>)>,
}

impl Admin {
    /// The quotas of the entities matching every component; with `strict`, only entities
    /// with no other entity types.
    pub async fn describe_client_quotas(
        &self,
        components: &[(String, QuotaMatch)],
        strict: bool,
    ) -> Result<Vec<(QuotaEntity, BTreeMap<String, f64>)>> {
        let build = |_| {
            let mut req = DescribeClientQuotasRequest::default();
            req.strict = strict;
            req.components = components
                .iter()
                .map(|(t, m)| {
                    let mut c = ComponentData::default();
                    c.entity_type = sb(t);
                    let (match_type, name) = m.wire();
                    c.match_type = match_type;
                    c._match = name.map(sb);
                    c
                })
                .collect();
            req
        };
        let resp = self
            .send(
                "describing client quotas",
                Route::Any,
                DESCRIBE_CLIENT_QUOTAS,
                build,
                no_routing_codes,
            )
            .await?;
        err(resp.error_code, resp.error_message.as_ref())?;
        let entries = resp.entries.ok_or_else(|| {
            ClientError::Protocol("DescribeClientQuotas answered no entries".into())
        })?;
        Ok(entries
            .into_iter()
            .map(|e| {
                let entity = e
                    .entity
                    .into_iter()
                    .map(|d| {
                        (
                            d.entity_type.to_string(),
                            d.entity_name.map(|n| n.to_string()),
                        )
                    })
                    .collect();
                let values = e
                    .values
                    .into_iter()
                    .map(|v| (v.key.to_string(), v.value))
                    .collect();
                (entity, values)
            })
            .collect())
    }

    /// Sets or removes quotas; each alteration gets its own result.
    pub async fn alter_client_quotas(
        &self,
        alterations: &[QuotaAlteration],
        validate_only: bool,
    ) -> Result<Vec<Result<()>>> {
        let build = |_| {
            let mut req = AlterClientQuotasRequest::default();
            req.validate_only = validate_only;
            req.entries = alterations
                .iter()
                .map(|a| {
                    let mut e = EntryData::default();
                    e.entity = a
                        .entity
                        .iter()
                        .map(|(t, n)| {
                            let mut d = EntityData::default();
                            d.entity_type = sb(t);
                            d.entity_name = n.as_deref().map(sb);
                            d
                        })
                        .collect();
                    e.ops = a
                        .changes
                        .iter()
                        .map(|(k, v)| {
                            let mut op = OpData::default();
                            op.key = sb(k);
                            op.value = v.unwrap_or(0.0);
                            op.remove = v.is_none();
                            op
                        })
                        .collect();
                    e
                })
                .collect();
            req
        };
        let resp = self
            .send(
                "altering client quotas",
                Route::Any,
                ALTER_CLIENT_QUOTAS,
                build,
                no_routing_codes,
            )
            .await?;
        if resp.entries.len() != alterations.len() {
            return Err(ClientError::Protocol(format!(
                "AlterClientQuotas answered {} entries for {}",
                resp.entries.len(),
                alterations.len()
            )));
        }
        Ok(resp
            .entries
            .iter()
            .map(|e| err(e.error_code, e.error_message.as_ref()))
            .collect())
    }
}
