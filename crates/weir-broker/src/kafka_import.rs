//! The first start of a single Weir broker on a Kafka 4 data directory: what Kafka kept in
//! its KRaft metadata log rather than beside the partitions — topic ids, topic configs, ACLs,
//! SCRAM users, client quotas — becomes Weir's own state files, so a compacted topic stays
//! compacted and the ACLs still hold. It runs once: only while no Weir topics file exists,
//! and it leaves Kafka's `__cluster_metadata-0` as it was (the way back to Kafka stays open).

use std::collections::BTreeMap;
use std::path::Path;

use weir_kafka::acl::AclBinding;
use weir_log::kraft::{self, KraftImage};
use weir_security::acl::Authorizer;
use weir_security::quota::{Entity, Name, Quotas};
use weir_security::sasl::{Credential, Scram, Users};

use crate::config::BrokerConfig;
use crate::topics::{StoredTopic, JOURNAL_FILE, TOPICS_FILE};

/// The topics a Kafka data directory's metadata names, after the ACLs, users and quotas it
/// holds were written to Weir's files; `None` when this is not a first start on one.
pub fn topics_from_kafka(
    config: &BrokerConfig,
) -> Result<Option<BTreeMap<String, StoredTopic>>, String> {
    let dirs = &config.log_dirs;
    if dirs
        .iter()
        .any(|d| d.join(TOPICS_FILE).exists() || d.join(JOURNAL_FILE).exists())
    {
        return Ok(None);
    }
    let Some(metadata) = dirs
        .iter()
        .map(|d| d.join(kraft::METADATA_DIR))
        .find(|d| d.is_dir())
    else {
        return Ok(None);
    };
    let image = kraft::read_image(&metadata)
        .map_err(|e| format!("reading Kafka's metadata log: {e}"))?
        .unwrap_or_default();
    tracing::info!(
        dir = %metadata.display(),
        topics = image.topics.len(),
        acls = image.acls.len(),
        scram_users = image.scram.len(),
        quota_entities = image.quotas.len(),
        "a Kafka data directory: taking its topics, ACLs, users and quotas from Kafka's \
         metadata log (which stays as it is)"
    );
    import_security(config, &dirs[0], &image)?;
    if !image.broker_configs.is_empty() {
        tracing::warn!(
            resources = ?image.broker_configs.keys().collect::<Vec<_>>(),
            "Kafka's dynamic broker configs are not taken over: set what Weir needs with \
             `weir configs` or in server.properties"
        );
    }
    let mut topics = BTreeMap::new();
    for (name, t) in image.topics {
        let mut configs = BTreeMap::new();
        for (key, value) in t.configs {
            // A key Weir refuses would stop every start; it is left out, and said so.
            match config
                .log_defaults
                .with_overrides([(key.as_str(), value.as_str())])
            {
                Ok(_) => {
                    configs.insert(key, value);
                }
                Err(e) => tracing::warn!(topic = %name, "not keeping Kafka's {key}={value}: {e}"),
            }
        }
        topics.insert(
            name,
            StoredTopic {
                id: weir_log::checkpoint::uuid_to_base64(t.id),
                partitions: t.partitions,
                configs,
            },
        );
    }
    Ok(Some(topics))
}

/// ACLs, SCRAM credentials and quotas into Weir's files in `dir`, each only where Weir has
/// none of its own yet.
fn import_security(config: &BrokerConfig, dir: &Path, image: &KraftImage) -> Result<(), String> {
    if !image.acls.is_empty() && !dir.join(weir_security::acl::ACLS_FILE).exists() {
        let mut bindings = Vec::new();
        for a in &image.acls {
            match AclBinding::from_wire(
                a.resource_type,
                a.resource_name.clone(),
                a.pattern_type,
                a.principal.clone(),
                a.host.clone(),
                a.operation,
                a.permission,
            ) {
                Ok(b) => bindings.push(b),
                Err(e) => tracing::warn!("not keeping one of Kafka's ACLs ({a:?}): {e}"),
            }
        }
        let acls = Authorizer::load(dir, Default::default(), false)?;
        acls.change(&bindings, &[])?;
    }
    if !image.scram.is_empty() && !dir.join(weir_security::sasl::USERS_FILE).exists() {
        let mut upsert = Vec::new();
        for (user, mechanisms) in &image.scram {
            for (mech, c) in mechanisms {
                let Some(scram) = Scram::from_id(*mech) else {
                    tracing::warn!(%user, "not keeping a SCRAM credential of unknown mechanism {mech}");
                    continue;
                };
                let credential = Credential {
                    salt: c.salt.clone(),
                    stored_key: c.stored_key.clone(),
                    server_key: c.server_key.clone(),
                    iterations: u32::try_from(c.iterations).unwrap_or(0),
                };
                upsert.push((user.clone(), scram, credential));
            }
        }
        Users::load(dir)?.change(upsert, Vec::new())?;
    }
    if !image.quotas.is_empty() && !dir.join(weir_security::quota::QUOTAS_FILE).exists() {
        let mut changes = Vec::new();
        for (entity, values) in &image.quotas {
            let mut e = Entity::default();
            let mut supported = true;
            for (kind, name) in entity {
                let name = name.clone().map_or(Name::Default, Name::Named);
                match kind.as_str() {
                    "user" => e.user = Some(name),
                    "client-id" => e.client_id = Some(name),
                    "ip" => e.ip = Some(name),
                    _ => supported = false,
                }
            }
            if !supported {
                tracing::warn!(
                    ?entity,
                    "not keeping a quota of an entity Weir does not serve"
                );
                continue;
            }
            for (key, value) in values {
                changes.push((e.clone(), key.clone(), Some(*value)));
            }
        }
        Quotas::load(dir, config.quota_windows)?.change(&changes)?;
    }
    Ok(())
}
