//! Dynamic broker configs, as Kafka's `kafka-configs --entity-type brokers` sets them
//! (AlterConfigs and IncrementalAlterConfigs on BROKER resources): for this broker (its id)
//! and for every broker (the cluster-wide default, an empty name). They take effect without
//! a restart and survive one, kept in the data directory's `weir-broker-configs.json` — or,
//! in a cluster, in its metadata (`config/brokers/<id>` and `config/brokers/<default>`),
//! where every broker sees them.
//!
//! Weir takes what Kafka 4.4 takes (its dynamically reconfigurable keys, per listener where
//! Kafka wants a listener prefix, and keys it does not know, which are kept) and refuses
//! what Kafka refuses, with Kafka's INVALID_REQUEST and wording. The log defaults
//! (`log.retention.ms`, `log.segment.bytes`, `log.cleanup.policy`, `message.max.bytes`, ...
//! — Kafka's DynamicLogConfig) apply at once: a change re-resolves every topic's config that
//! has no override of its own. The other keys are kept and described as set, and do not
//! change what Weir does (DescribeConfigs' documentation of each key says which Weir acts
//! on). A listener's keystore and truststore (`listener.name.<l>.ssl.keystore.location`,
//! ...) apply at once too: the new one is loaded and checked as Kafka checks it (see
//! weir_security::tls), and new connections shake hands with it. Set again with the same
//! path, a keystore whose file changed is loaded again, as in Kafka.
//!
//! Precedence is Kafka's: this broker's dynamic value, then the cluster-wide dynamic
//! default, then server.properties, then Kafka's default; within the merged set, a key's
//! synonyms keep their own order (`log.retention.ms` before `log.retention.hours`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use weir_kafka::{ApiError, ErrorCode as E};
use weir_log::LogConfig;
use weir_security::tls::{self, ListenerTls, TlsError};

use crate::kafka_configs::{self, UpdateMode};

pub const FILE: &str = "weir-broker-configs.json";

/// Which dynamic set a change is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// This broker (its id as the resource name).
    Broker,
    /// Every broker (an empty resource name).
    ClusterDefault,
}

/// Both dynamic sets, as saved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sets {
    pub broker: BTreeMap<String, String>,
    pub cluster_default: BTreeMap<String, String>,
}

impl Sets {
    pub fn of(&self, scope: Scope) -> &BTreeMap<String, String> {
        match scope {
            Scope::Broker => &self.broker,
            Scope::ClusterDefault => &self.cluster_default,
        }
    }

    /// The broker's properties as they apply: server.properties, then the cluster-wide
    /// dynamic default over them, then this broker's own over both.
    fn merged(&self, static_props: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut all = static_props.clone();
        all.extend(self.cluster_default.clone());
        all.extend(self.broker.clone());
        all
    }
}

/// Whether Weir applies `key` at once when it is set dynamically: the log defaults, and a
/// listener's TLS settings.
pub fn is_dynamic(key: &str) -> bool {
    LogConfig::broker_keys().contains(&key) || tls::is_reloadable(listener_base(key).unwrap_or(key))
}

/// The TLS of each `SSL` and `SASL_SSL` listener, by name.
pub type Tls = BTreeMap<String, Arc<ListenerTls>>;

/// Where a changed set is saved: the data directory's file, or (in a cluster) the
/// cluster's metadata, through the given function.
enum Persist {
    File(PathBuf),
    Cluster(SaveSet),
}

/// Saves one scope's set in the cluster's metadata.
pub type SaveSet =
    Box<dyn Fn(Scope, &BTreeMap<String, String>) -> Result<(), ApiError> + Send + Sync>;

/// The dynamic configs, and what they make.
pub struct DynamicConfigs {
    persist: Persist,
    /// server.properties and --override, as given.
    static_props: BTreeMap<String, String>,
    state: RwLock<State>,
}

struct State {
    sets: Sets,
    /// The log defaults every topic's config starts from.
    log: Arc<LogConfig>,
    tls: Tls,
}

impl DynamicConfigs {
    /// Loads the saved sets from `dir` (none if the file does not exist) and resolves the
    /// log defaults from them and `static_props`.
    /// `tls` is each TLS listener's as server.properties sets it up.
    pub fn load(
        dir: &Path,
        static_props: &BTreeMap<String, String>,
        tls: &Tls,
    ) -> Result<Self, String> {
        let path = dir.join(FILE);
        let sets: Sets = weir_security::state_file::read(&path)?.unwrap_or_default();
        let state = State::start(static_props, sets, tls)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(DynamicConfigs {
            persist: Persist::File(path),
            static_props: static_props.clone(),
            state: RwLock::new(state),
        })
    }

    /// A cluster member's configs: `sets` as the cluster's metadata holds them, changes
    /// saved there with `save`.
    pub fn in_cluster(
        static_props: &BTreeMap<String, String>,
        sets: Sets,
        tls: &Tls,
        save: SaveSet,
    ) -> Result<Self, String> {
        let state = State::start(static_props, sets, tls)
            .map_err(|e| format!("dynamic broker configs in etcd: {e}"))?;
        Ok(DynamicConfigs {
            persist: Persist::Cluster(save),
            static_props: static_props.clone(),
            state: RwLock::new(state),
        })
    }

    /// Takes the sets another broker saved (a cluster's watch saw them). Returns the log
    /// defaults they make if those changed. Sets that do not resolve (written by a newer
    /// Weir, say) are refused and the old ones kept.
    pub fn install(&self, sets: Sets) -> Result<Option<Arc<LogConfig>>, ApiError> {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        if sets == state.sets {
            return Ok(None);
        }
        let defaults = Arc::new(resolve(&self.static_props, &sets)?);
        let tls = reload_tls(&sets.merged(&self.static_props), &state.tls, &[])?;
        let changed = *defaults != *state.log;
        *state = State {
            sets,
            log: defaults.clone(),
            tls,
        };
        Ok(changed.then_some(defaults))
    }

    pub fn sets(&self) -> Sets {
        self.read().sets.clone()
    }

    /// The log defaults every topic's config starts from.
    pub fn log_defaults(&self) -> Arc<LogConfig> {
        self.read().log.clone()
    }

    /// The TLS a new connection to `listener` shakes hands with (none for a listener
    /// without TLS).
    pub fn tls(&self, listener: &str) -> Option<Arc<rustls::ServerConfig>> {
        self.read().tls.get(listener).map(|t| t.config.clone())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks `scope`'s new set and the log defaults it makes, then `prepare`s what those
    /// defaults change (every topic's config: a topic override they make invalid refuses the
    /// change); unless `validate_only`, saves the set and makes it the one that applies.
    /// `Some` of what `prepare` made once a changed set is in force.
    /// `named` are the keys the request named: a listener's keystore named again with the
    /// same settings is loaded again if its file changed.
    pub fn replace<T>(
        &self,
        scope: Scope,
        set: BTreeMap<String, String>,
        named: &[String],
        validate_only: bool,
        prepare: impl FnOnce(&Arc<LogConfig>) -> Result<T, ApiError>,
    ) -> Result<Option<T>, ApiError> {
        check(scope, &set)?;
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let mut sets = state.sets.clone();
        match scope {
            Scope::Broker => sets.broker = set,
            Scope::ClusterDefault => sets.cluster_default = set,
        }
        let defaults = Arc::new(resolve(&self.static_props, &sets)?);
        let tls = reload_tls(&sets.merged(&self.static_props), &state.tls, named)?;
        let prepared = prepare(&defaults)?;
        let tls_changed = tls.iter().any(|(l, t)| !Arc::ptr_eq(t, &state.tls[l]));
        if validate_only || (sets == state.sets && !tls_changed) {
            return Ok(None);
        }
        if sets != state.sets {
            match &self.persist {
                Persist::File(path) => weir_security::state_file::write(path, &sets)
                    .map_err(|e| ApiError::new(E::KafkaStorageError, e))?,
                Persist::Cluster(save) => save(scope, sets.of(scope))?,
            }
        }
        for (listener, t) in &tls {
            if !Arc::ptr_eq(t, &state.tls[listener]) {
                tracing::info!(%listener, subject = %t.subject, "new TLS connections get the keystore just set");
            }
        }
        *state = State {
            sets,
            log: defaults,
            tls,
        };
        Ok(Some(prepared))
    }
}

/// Refuses a set as Kafka's broker does (DynamicBrokerConfig's validation), all with
/// INVALID_REQUEST: a key Kafka cannot change while running; a TLS key without its listener
/// prefix; a value Kafka's own definition of the key refuses; at the cluster-wide default, a
/// key Kafka takes only per broker (listener keys among them). Keys Kafka does not know are
/// taken and kept, as Kafka keeps them.
fn check(scope: Scope, set: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let refuse = |why: &str, keys: Vec<&str>| -> Result<(), ApiError> {
        if keys.is_empty() {
            return Ok(());
        }
        Err(ApiError::new(
            E::InvalidRequest,
            format!("{why}: [{}]", keys.join(", ")),
        ))
    };
    let known = |k: &str| kafka_configs::key(k);
    refuse(
        "Cannot update these configs dynamically",
        set.keys()
            .map(String::as_str)
            .filter(|k| known(k).is_some_and(|d| d.mode == UpdateMode::ReadOnly))
            .collect(),
    )?;
    refuse(
        "These security configs can be dynamically updated only per-listener using the \
         listener prefix",
        set.keys()
            .map(String::as_str)
            .filter(|k| known(k).is_some_and(|d| d.listener_only))
            .collect(),
    )?;
    for (k, v) in set {
        if let Some(d) = known(listener_base(k).unwrap_or(k)) {
            d.check(v)
                .map_err(|e| ApiError::new(E::InvalidRequest, e))?;
        }
    }
    if scope == Scope::ClusterDefault {
        refuse(
            "Cannot update these configs at default cluster level, broker id must be specified",
            set.keys()
                .map(String::as_str)
                .filter(|k| {
                    listener_base(k).is_some()
                        || known(k).is_some_and(|d| d.mode == UpdateMode::PerBroker)
                })
                .collect(),
        )?;
    }
    Ok(())
}

/// The key a listener's own setting overrides: `ssl.keystore.location` for
/// `listener.name.internal.ssl.keystore.location`.
pub fn listener_base(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("listener.name.")?;
    rest.split_once('.').map(|(_, base)| base)
}

impl State {
    /// The state `sets` make over server.properties: a listener with dynamic TLS settings
    /// is set up from them (unchecked against server.properties' keystore, as Kafka does
    /// at start).
    fn start(
        static_props: &BTreeMap<String, String>,
        sets: Sets,
        tls: &Tls,
    ) -> Result<State, String> {
        let log = Arc::new(resolve(static_props, &sets).map_err(|e| e.message)?);
        let merged = sets.merged(static_props);
        let mut now = Tls::new();
        for (listener, t) in tls {
            let t = if t.same_as(listener, &merged) {
                t.clone()
            } else {
                Arc::new(tls::listener_tls(listener, &merged).map_err(|e| e.to_string())?)
            };
            now.insert(listener.clone(), t);
        }
        Ok(State {
            sets,
            log,
            tls: now,
        })
    }
}

/// Each TLS listener's as the broker's properties now make it: the one in use where its
/// settings are the same (and, if `named` names one of its keys, its files too), else a new
/// one, which must load and be compatible with the one in use (Kafka's SslFactory check).
fn reload_tls(
    merged: &BTreeMap<String, String>,
    current: &Tls,
    named: &[String],
) -> Result<Tls, ApiError> {
    let mut now = Tls::new();
    for (listener, t) in current {
        let prefix = format!("listener.name.{}.ssl.", listener.to_ascii_lowercase());
        let unchanged = if named.iter().any(|k| k.starts_with(&prefix)) {
            t.same_as(listener, merged)
        } else {
            t.same_settings(listener, merged)
        };
        if unchanged {
            now.insert(listener.clone(), t.clone());
            continue;
        }
        let new = tls::listener_tls(listener, merged).map_err(|e| match e {
            TlsError::Keystore { source, why } => {
                tracing::warn!("refused a new keystore for listener {listener}: {why}");
                ssl_refusal(&format!(
                    "org.apache.kafka.common.errors.InvalidConfigurationException: Failed to \
                     load PEM SSL keystore {source}"
                ))
            }
            TlsError::Setting(why) => ApiError::new(E::InvalidRequest, why),
        })?;
        t.ensure_compatible(&new).map_err(|why| {
            ssl_refusal(&format!(
                "org.apache.kafka.common.config.ConfigException: {why}"
            ))
        })?;
        now.insert(listener.clone(), Arc::new(new));
    }
    Ok(now)
}

/// A listener's new TLS refused, in Kafka 4.4's words (Java's exception names and all, as
/// clients print it and the differential suite compares it).
fn ssl_refusal(cause: &str) -> ApiError {
    ApiError::new(
        E::InvalidRequest,
        format!(
            "Invalid value org.apache.kafka.common.config.ConfigException: Validation of \
             dynamic config update of SSLFactory failed: {cause} for configuration Invalid \
             dynamic configuration"
        ),
    )
}

/// The log defaults `sets` make over `static_props`. A bad value is INVALID_REQUEST, as
/// Kafka answers a broker resource's (a topic's is INVALID_CONFIG).
fn resolve(static_props: &BTreeMap<String, String>, sets: &Sets) -> Result<LogConfig, ApiError> {
    let all = sets.merged(static_props);
    LogConfig::from_broker_properties(all.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map(|(c, _)| c)
        .map_err(|e| ApiError::new(E::InvalidRequest, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(_: &Arc<LogConfig>) -> Result<(), ApiError> {
        Ok(())
    }

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_broker_s_value_wins_over_the_cluster_s_over_server_properties() {
        let dir = tempfile::tempdir().unwrap();
        let static_props = props(&[("log.retention.ms", "1000"), ("log.segment.bytes", "2048")]);
        let d = DynamicConfigs::load(dir.path(), &static_props, &Tls::new()).unwrap();
        assert_eq!(d.log_defaults().retention_ms, 1000);
        let cluster = props(&[("log.retention.ms", "2000"), ("message.max.bytes", "5000")]);
        let made = d
            .replace(Scope::ClusterDefault, cluster, &[], false, |l| {
                Ok(l.retention_ms)
            })
            .unwrap();
        assert_eq!(made, Some(2000));
        d.replace(
            Scope::Broker,
            props(&[("log.retention.ms", "3000")]),
            &[],
            false,
            ok,
        )
        .unwrap();
        let now = d.log_defaults();
        assert_eq!(
            (now.retention_ms, now.max_message_bytes, now.segment_bytes),
            (3000, 5000, 2048)
        );
        // Saved, and loaded again as they were.
        let again = DynamicConfigs::load(dir.path(), &static_props, &Tls::new()).unwrap();
        assert_eq!(again.sets(), d.sets());
        assert_eq!(again.log_defaults(), d.log_defaults());
        // Removing this broker's value lets the cluster's apply again.
        d.replace(Scope::Broker, BTreeMap::new(), &[], false, ok)
            .unwrap();
        assert_eq!(d.log_defaults().retention_ms, 2000);
        // What `prepare` refuses is not kept.
        let refused = d.replace(
            Scope::Broker,
            props(&[("log.retention.ms", "1")]),
            &[],
            false,
            |_| Err::<(), _>(ApiError::new(E::InvalidConfig, "no")),
        );
        assert!(refused.is_err());
        assert_eq!(d.log_defaults().retention_ms, 2000);
    }

    #[test]
    fn what_kafka_refuses_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let d = DynamicConfigs::load(dir.path(), &BTreeMap::new(), &Tls::new()).unwrap();
        let refused = |scope, key: &str, value: &str| {
            let e = d
                .replace(scope, props(&[(key, value)]), &[], false, ok)
                .unwrap_err();
            assert_eq!(e.code, E::InvalidRequest.code(), "{key}={value}");
            e.message
        };
        // Read-only in Kafka.
        assert!(refused(Scope::Broker, "num.partitions", "3").contains("[num.partitions]"));
        // Kafka's own validators, for log defaults and the keys Weir only keeps alike.
        assert!(refused(Scope::Broker, "log.retention.ms", "soon").contains("LONG"));
        assert!(refused(Scope::Broker, "log.cleaner.threads", "-1").contains("at least 0"));
        // TLS keys only per listener; per-broker keys not as the cluster default.
        assert!(refused(Scope::Broker, "ssl.keystore.location", "/k.jks").contains("per-listener"));
        assert!(
            refused(Scope::ClusterDefault, "sasl.kerberos.service.name", "kafka")
                .contains("broker id must be specified")
        );
        assert!(refused(
            Scope::ClusterDefault,
            "listener.name.sasl_ssl.ssl.keystore.location",
            "/k.jks"
        )
        .contains("broker id must be specified"));
        // A bad value is refused even where another scope's value would hide it.
        d.replace(
            Scope::Broker,
            props(&[("log.retention.ms", "5")]),
            &[],
            false,
            ok,
        )
        .unwrap();
        refused(Scope::ClusterDefault, "log.retention.ms", "soon");
        d.replace(Scope::Broker, BTreeMap::new(), &[], false, ok)
            .unwrap();
        // Validation only: checked, not kept.
        let none = d
            .replace(
                Scope::Broker,
                props(&[("log.retention.ms", "5")]),
                &[],
                true,
                ok,
            )
            .unwrap();
        assert!(none.is_none());
        assert_eq!(d.sets(), Sets::default());
    }

    #[test]
    fn what_kafka_takes_is_kept_and_only_log_defaults_change_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = DynamicConfigs::load(dir.path(), &BTreeMap::new(), &Tls::new()).unwrap();
        let before = d.log_defaults();
        let set = props(&[
            ("log.cleaner.threads", "2"),
            ("max.connections", "1000"),
            ("sasl.kerberos.service.name", "kafka"),
            ("listener.name.sasl_ssl.ssl.keystore.location", "/k.jks"),
            ("not.a.kafka.key", "kept"),
        ]);
        let made = d
            .replace(Scope::Broker, set.clone(), &[], false, ok)
            .unwrap();
        assert!(made.is_some());
        assert_eq!(d.log_defaults(), before);
        let again = DynamicConfigs::load(dir.path(), &BTreeMap::new(), &Tls::new()).unwrap();
        assert_eq!(again.sets().broker, set);
        // Cluster-wide keys (and unknown ones) are taken as the cluster default too.
        d.replace(
            Scope::ClusterDefault,
            props(&[("num.io.threads", "9"), ("not.a.kafka.key", "x")]),
            &[],
            false,
            ok,
        )
        .unwrap();
    }
}
