//! DescribeClientQuotas and AlterClientQuotas: the byte-rate quotas of `quota::Quotas`,
//! managed as `kafka-configs --entity-type users|clients` and Kafka's Admin client manage
//! them. Listing them takes DESCRIBE_CONFIGS on the cluster, changing them ALTER_CONFIGS.

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlteredEntity, EntryData as AlteredEntry,
};
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;

use weir_kafka::acl::Operation;
use weir_kafka::ApiError;

use crate::broker::Broker;
use crate::request::RequestContext;
use weir_kafka::quota::{QuotaMatch, ENTITY_CLIENT_ID, ENTITY_IP, ENTITY_USER};
use weir_security::quota::{check_entry, Entity, Name};

const USER: &str = ENTITY_USER;
const CLIENT_ID: &str = ENTITY_CLIENT_ID;
const IP: &str = ENTITY_IP;

fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

fn name_of(n: Option<&StrBytes>) -> Name {
    n.map_or(Name::Default, |s| Name::Named(s.to_string()))
}

/// An entity as the wire names it: (type, name or null for the default).
fn parts(e: &Entity) -> Vec<(&'static str, Option<String>)> {
    let wire = |n: &Name| match n {
        Name::Named(s) => Some(s.clone()),
        Name::Default => None,
    };
    let mut out = Vec::new();
    if let Some(u) = &e.user {
        out.push((USER, wire(u)));
    }
    if let Some(c) = &e.client_id {
        out.push((CLIENT_ID, wire(c)));
    }
    if let Some(i) = &e.ip {
        out.push((IP, wire(i)));
    }
    out
}

/// The side of `e` that entity type `t` names.
fn side<'a>(e: &'a Entity, t: &str) -> &'a Option<Name> {
    match t {
        USER => &e.user,
        CLIENT_ID => &e.client_id,
        _ => &e.ip,
    }
}

pub fn describe_client_quotas(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let mut resp = DescribeClientQuotasResponse::default();
    let fail = |mut resp: DescribeClientQuotasResponse, e: ApiError| {
        resp.error_code = e.code;
        resp.error_message = Some(sb(e.message));
        resp.entries = None;
        resp
    };
    if !broker.allowed_on_cluster(ctx, Operation::DescribeConfigs) {
        let e = ApiError::new(
            E::ClusterAuthorizationFailed,
            format!("{} may not describe quotas", ctx.principal),
        );
        return fail(resp, e);
    }
    // Each component constrains one entity type: a name, the default, or any.
    let mut seen = HashSet::new();
    let mut wanted: Vec<(&str, Option<Name>)> = Vec::new();
    for c in &req.components {
        let t = c.entity_type.as_str();
        if t != USER && t != CLIENT_ID && t != IP {
            let e = ApiError::new(
                E::InvalidRequest,
                format!("entity type '{t}': quotas are for '{USER}', '{CLIENT_ID}' and '{IP}'"),
            );
            return fail(resp, e);
        }
        if !seen.insert(t.to_string()) {
            let e = ApiError::new(
                E::InvalidRequest,
                format!("entity type '{t}' is given twice"),
            );
            return fail(resp, e);
        }
        let want = match QuotaMatch::from_wire(c.match_type, c._match.as_deref()) {
            Some(QuotaMatch::Exactly(n)) => Some(Name::Named(n)),
            Some(QuotaMatch::Default) => Some(Name::Default),
            Some(QuotaMatch::Any) => None,
            None => {
                let e = ApiError::new(
                    E::InvalidRequest,
                    format!(
                        "match type {} is not an exact match with a name, the default, or any",
                        c.match_type
                    ),
                );
                return fail(resp, e);
            }
        };
        let t = [USER, CLIENT_ID, IP]
            .into_iter()
            .find(|k| *k == t)
            .unwrap_or(IP);
        wanted.push((t, want));
    }
    if wanted.iter().any(|(t, _)| *t == IP) && wanted.iter().any(|(t, _)| *t != IP) {
        let e = ApiError::new(
            E::InvalidRequest,
            "Invalid entity filter component combination. IP filter component should not be \
             used with user or clientId filter component.",
        );
        return fail(resp, e);
    }
    let matches = |e: &Entity| {
        let each = wanted.iter().all(|(t, want)| match (side(e, t), want) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(have), Some(want)) => have == want,
        });
        // Strict: the entity has no other types than those asked for.
        let only = !req.strict
            || [USER, CLIENT_ID, IP]
                .iter()
                .all(|t| side(e, t).is_none() || wanted.iter().any(|(w, _)| w == t));
        each && only
    };
    resp.entries = Some(
        broker
            .quotas
            .all()
            .into_iter()
            .filter(|(e, _)| matches(e))
            .map(|(e, values)| {
                let mut entry = EntryData::default();
                entry.entity = parts(&e)
                    .into_iter()
                    .map(|(t, n)| {
                        let mut d = EntityData::default();
                        d.entity_type = sb(t);
                        d.entity_name = n.map(sb);
                        d
                    })
                    .collect();
                entry.values = values
                    .into_iter()
                    .map(|(k, v)| {
                        let mut d = ValueData::default();
                        d.key = sb(k);
                        d.value = v;
                        d
                    })
                    .collect();
                entry
            })
            .collect(),
    );
    resp
}

pub fn alter_client_quotas(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let may = broker.allowed_on_cluster(ctx, Operation::AlterConfigs);
    let mut changes = Vec::new();
    let mut results: Vec<(Vec<AlteredEntity>, Result<(), ApiError>)> = Vec::new();
    for entry in &req.entries {
        let echo: Vec<AlteredEntity> = entry
            .entity
            .iter()
            .map(|d| {
                let mut a = AlteredEntity::default();
                a.entity_type = d.entity_type.clone();
                a.entity_name = d.entity_name.clone();
                a
            })
            .collect();
        let checked = (|| {
            if !may {
                return Err(ApiError::new(
                    E::ClusterAuthorizationFailed,
                    format!("{} may not change quotas", ctx.principal),
                ));
            }
            let mut entity = Entity::default();
            for d in &entry.entity {
                let slot = match d.entity_type.as_str() {
                    USER => &mut entity.user,
                    CLIENT_ID => &mut entity.client_id,
                    IP => &mut entity.ip,
                    t => {
                        return Err(ApiError::new(
                            E::InvalidRequest,
                            format!(
                                "entity type '{t}': quotas are for '{USER}', '{CLIENT_ID}' \
                                 and '{IP}'"
                            ),
                        ))
                    }
                };
                if slot.is_some() {
                    return Err(ApiError::new(
                        E::InvalidRequest,
                        format!("entity type '{}' is given twice", d.entity_type.as_str()),
                    ));
                }
                *slot = Some(name_of(d.entity_name.as_ref()));
            }
            if entity.user.is_none() && entity.client_id.is_none() && entity.ip.is_none() {
                return Err(ApiError::new(E::InvalidRequest, "the entity is empty"));
            }
            if entity.ip.is_some() && (entity.user.is_some() || entity.client_id.is_some()) {
                return Err(ApiError::new(
                    E::InvalidRequest,
                    "Invalid quota entity combination, IP entity should not be combined with \
                     User or ClientId",
                ));
            }
            // As Kafka keeps it: an address, in one spelling, so that `::ffff:10.0.0.1`
            // and `10.0.0.1` are one entity. Kafka also resolves host names; Weir takes
            // addresses only.
            if let Some(Name::Named(ip)) = &entity.ip {
                let addr: std::net::IpAddr = ip.parse().map_err(|_| {
                    ApiError::new(
                        E::InvalidRequest,
                        format!("{ip} is not a valid IP or resolvable host."),
                    )
                })?;
                entity.ip = Some(Name::Named(addr.to_canonical().to_string()));
            }
            let mut ops = Vec::new();
            for op in &entry.ops {
                let key = op.key.to_string();
                if op.remove {
                    ops.push((entity.clone(), key, None));
                } else {
                    check_entry(&entity, &key, op.value)
                        .map_err(|m| ApiError::new(E::InvalidRequest, m))?;
                    ops.push((entity.clone(), key, Some(op.value)));
                }
            }
            Ok(ops)
        })();
        match checked {
            Ok(ops) => {
                changes.extend(ops);
                results.push((echo, Ok(())));
            }
            Err(e) => results.push((echo, Err(e))),
        }
    }
    let saved = if req.validate_only || changes.is_empty() {
        Ok(())
    } else {
        broker.quotas.change(&changes)
    };
    match &saved {
        Ok(()) if !req.validate_only => {
            for (e, k, v) in &changes {
                tracing::info!(principal = %ctx.principal, "quota {k} of {e:?} set to {v:?}");
            }
        }
        Ok(()) => {}
        Err(e) => tracing::error!("saving quotas: {e}"),
    }
    let mut resp = AlterClientQuotasResponse::default();
    resp.entries = results
        .into_iter()
        .map(|(entity, r)| {
            let mut out = AlteredEntry::default();
            out.entity = entity;
            let r = r.and_then(|()| {
                saved.clone().map_err(|e| {
                    ApiError::new(E::UnknownServerError, format!("saving quotas: {e}"))
                })
            });
            if let Err(e) = r {
                out.error_code = e.code;
                out.error_message = Some(sb(e.message));
            }
            out
        })
        .collect();
    resp
}
