//! Group configs, as Kafka's `kafka-configs --entity-type groups` sets them (KIP-848: a
//! GROUP config resource of DescribeConfigs and IncrementalAlterConfigs): per-group values of
//! the broker's `group.consumer.*`, `group.share.*` and `group.streams.*` settings, taken,
//! refused and described as Kafka 4.4 does. They are kept in the data directory's
//! `weir-group-configs.json` — or, in a cluster, in its metadata (`config/groups`), where
//! every broker sees them — and survive a restart.
//!
//! Weir acts on `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms` (the
//! coordinator of a consumer-protocol group reads them at each heartbeat); the other keys
//! are kept and described, and wait for the share and streams groups they are for.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::RwLock;

use serde::{Deserialize, Serialize};
use weir_kafka::config::{ConfigEntry, ConfigSource, ConfigSynonym, ConfigType};
use weir_kafka::{ApiError, ErrorCode as E};
use weir_security::state_file::{self, Doc, FileStore, Store};

use crate::kafka_configs::{self, GroupKey};

pub const FILE: &str = "weir-group-configs.json";

/// Every group's own values, by group id.
pub type Overrides = BTreeMap<String, BTreeMap<String, String>>;

/// The group keys the coordinator applies.
pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";

#[derive(Serialize, Deserialize, Default)]
struct GroupConfigsFile {
    groups: Overrides,
}

/// The group configs of the cluster (or of this one broker), and where they are saved.
pub struct GroupConfigs {
    store: Box<dyn Store>,
    doc: RwLock<Doc<Overrides>>,
}

impl std::fmt::Debug for GroupConfigs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupConfigs")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

fn decode(bytes: &[u8]) -> Result<Overrides, String> {
    state_file::decode::<GroupConfigsFile>(bytes).map(|f| f.groups)
}

fn encode(groups: &Overrides) -> Result<Vec<u8>, String> {
    state_file::encode(&GroupConfigsFile {
        groups: groups.clone(),
    })
}

impl GroupConfigs {
    /// A broker's own group configs, from its data directory (none if there is no file).
    pub fn load(dir: &Path) -> Result<Self, String> {
        let path = dir.join(FILE);
        let groups = state_file::read::<GroupConfigsFile>(&path)?
            .map(|f| f.groups)
            .unwrap_or_default();
        Ok(GroupConfigs {
            store: Box::new(FileStore(path)),
            doc: RwLock::new(Doc {
                value: groups,
                revision: 0,
            }),
        })
    }

    /// A cluster member's: the document the cluster holds (bytes and revision), saved
    /// back through `store`.
    pub fn from_document(
        store: Box<dyn Store>,
        current: Option<(&[u8], i64)>,
    ) -> Result<Self, String> {
        let (value, revision) = match current {
            Some((bytes, revision)) => (decode(bytes)?, revision),
            None => (Overrides::new(), 0),
        };
        Ok(GroupConfigs {
            store,
            doc: RwLock::new(Doc { value, revision }),
        })
    }

    /// Takes the document another broker saved; whether it changed.
    pub fn install(&self, bytes: Option<&[u8]>, revision: i64) -> Result<bool, String> {
        let value = bytes.map(decode).transpose()?.unwrap_or_default();
        Ok(state_file::install(&self.doc, value, revision))
    }

    /// Every group's own values.
    pub fn all(&self) -> Overrides {
        self.doc
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .value
            .clone()
    }

    /// The values `group` sets itself.
    pub fn of(&self, group: &str) -> BTreeMap<String, String> {
        self.doc
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .value
            .get(group)
            .cloned()
            .unwrap_or_default()
    }

    /// Replaces `group`'s whole set with `set`, once it passes Kafka's checks against the
    /// broker's settings (`broker`: a broker key's value as this broker has it). Unless
    /// `validate_only`, saves it; whether anything changed.
    pub fn replace(
        &self,
        group: &str,
        set: BTreeMap<String, String>,
        broker: &dyn Fn(&str) -> String,
        validate_only: bool,
    ) -> Result<bool, ApiError> {
        check(&set, broker)?;
        if validate_only {
            return Ok(false);
        }
        state_file::update(
            &self.doc,
            &*self.store,
            encode,
            decode,
            Overrides::new,
            |current| {
                if current.get(group).map_or(set.is_empty(), |s| *s == set) {
                    return Ok((None, false));
                }
                let mut next = current.clone();
                if set.is_empty() {
                    next.remove(group);
                } else {
                    next.insert(group.to_string(), set.clone());
                }
                Ok((Some(next), true))
            },
        )
        .map_err(|e| ApiError::new(E::KafkaStorageError, format!("group configs: {e}")))
    }
}

/// A group resource's name, refused as Kafka refuses an empty one (`describing`: for
/// DescribeConfigs, whose wording differs).
pub fn check_name(group: &str, describing: bool) -> Result<(), ApiError> {
    if !group.is_empty() {
        return Ok(());
    }
    Err(ApiError::new(
        E::InvalidRequest,
        if describing {
            "Group name must not be empty"
        } else {
            "Default group resources are not allowed."
        },
    ))
}

/// The broker keys that bound a group key, as Kafka checks them (GroupConfig's
/// validateValues, in its order).
enum Bound {
    Range(&'static str, &'static str),
    Max(&'static str),
    Min(&'static str),
}

const BOUNDS: &[(&str, Bound)] = &[
    (
        CONSUMER_HEARTBEAT_INTERVAL_MS,
        Bound::Range(
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
        ),
    ),
    (
        CONSUMER_SESSION_TIMEOUT_MS,
        Bound::Range(
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
        ),
    ),
    (
        "consumer.assignment.interval.ms",
        Bound::Range(
            "group.consumer.min.assignment.interval.ms",
            "group.consumer.max.assignment.interval.ms",
        ),
    ),
    (
        "share.heartbeat.interval.ms",
        Bound::Range(
            "group.share.min.heartbeat.interval.ms",
            "group.share.max.heartbeat.interval.ms",
        ),
    ),
    (
        "share.session.timeout.ms",
        Bound::Range(
            "group.share.min.session.timeout.ms",
            "group.share.max.session.timeout.ms",
        ),
    ),
    (
        "share.record.lock.duration.ms",
        Bound::Range(
            "group.share.min.record.lock.duration.ms",
            "group.share.max.record.lock.duration.ms",
        ),
    ),
    (
        "share.delivery.count.limit",
        Bound::Range(
            "group.share.min.delivery.count.limit",
            "group.share.max.delivery.count.limit",
        ),
    ),
    (
        "share.partition.max.record.locks",
        Bound::Range(
            "group.share.min.partition.max.record.locks",
            "group.share.max.partition.max.record.locks",
        ),
    ),
    (
        "share.assignment.interval.ms",
        Bound::Range(
            "group.share.min.assignment.interval.ms",
            "group.share.max.assignment.interval.ms",
        ),
    ),
    (
        "streams.heartbeat.interval.ms",
        Bound::Range(
            "group.streams.min.heartbeat.interval.ms",
            "group.streams.max.heartbeat.interval.ms",
        ),
    ),
    (
        "streams.session.timeout.ms",
        Bound::Range(
            "group.streams.min.session.timeout.ms",
            "group.streams.max.session.timeout.ms",
        ),
    ),
    (
        "streams.num.standby.replicas",
        Bound::Max("group.streams.max.standby.replicas"),
    ),
    (
        "streams.assignment.interval.ms",
        Bound::Range(
            "group.streams.min.assignment.interval.ms",
            "group.streams.max.assignment.interval.ms",
        ),
    ),
    (
        "streams.task.offset.interval.ms",
        Bound::Min("group.streams.min.task.offset.interval.ms"),
    ),
    (
        "streams.num.warmup.replicas",
        Bound::Max("group.streams.max.warmup.replicas"),
    ),
];

/// Each session timeout must exceed its heartbeat interval, the group's value or else the
/// broker's.
const SESSION_OVER_HEARTBEAT: &[(&str, &str)] = &[
    (CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    (
        "streams.session.timeout.ms",
        "streams.heartbeat.interval.ms",
    ),
];

/// Kafka's internal broker keys that bound group keys: not in the table of described keys,
/// so their defaults are here.
const INTERNAL_BROKER_DEFAULTS: &[(&str, &str)] = &[
    ("group.streams.max.warmup.replicas", "20"),
    ("group.streams.min.task.offset.interval.ms", "15000"),
];

/// A broker key's value as this broker has it: `props` (server.properties, --override),
/// else Kafka's default.
pub fn broker_value(props: &BTreeMap<String, String>, name: &str) -> String {
    props
        .get(name)
        .cloned()
        .or_else(|| kafka_configs::key(name).and_then(|k| k.default.map(str::to_string)))
        .or_else(|| {
            INTERNAL_BROKER_DEFAULTS
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
        .or_else(|| {
            // An internal broker synonym has its group key's default.
            kafka_configs::group_keys()
                .iter()
                .find(|g| g.broker_synonym == Some(name))
                .and_then(|g| g.key.default.map(str::to_string))
        })
        .unwrap_or_default()
}

/// Refuses a group's new set as Kafka does, all with INVALID_CONFIG: a key Kafka's group
/// config does not have, a value its definition refuses, a value outside the broker's
/// bounds for it, a session timeout not above its heartbeat interval, a dead-letter topic
/// of Kafka's internal names.
fn check(set: &BTreeMap<String, String>, broker: &dyn Fn(&str) -> String) -> Result<(), ApiError> {
    let refuse = |m: String| ApiError::new(E::InvalidConfig, m);
    for name in set.keys() {
        if kafka_configs::group_key(name).is_none() {
            return Err(refuse(format!("Unknown group config name: {name}")));
        }
    }
    for (name, value) in set {
        let g = kafka_configs::group_key(name).expect("checked above");
        check_value(g, value).map_err(refuse)?;
    }
    let int = |v: &str| v.trim().parse::<i64>().unwrap_or(0);
    for (name, bound) in BOUNDS {
        let Some(v) = set.get(*name).map(|v| int(v)) else {
            continue;
        };
        match bound {
            Bound::Range(lo, hi) => {
                let (lo, hi) = (int(&broker(lo)), int(&broker(hi)));
                if v < lo || v > hi {
                    return Err(refuse(format!(
                        "{name} must be in the range {lo} to {hi} inclusive."
                    )));
                }
            }
            Bound::Max(hi) => {
                let hi = int(&broker(hi));
                if v > hi {
                    return Err(refuse(format!("{name} must be less than or equal to {hi}")));
                }
            }
            Bound::Min(lo) => {
                let lo = int(&broker(lo));
                if v < lo {
                    return Err(refuse(format!(
                        "{name} must be greater than or equal to {lo}"
                    )));
                }
            }
        }
    }
    if let Some(assignor) = set.get("streams.assignor.name") {
        let registered: Vec<String> = broker("group.streams.assignors")
            .split(',')
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
        if !registered.contains(assignor) {
            return Err(refuse(format!(
                "streams.assignor.name '{assignor}' is not a registered task assignor. \
                 Registered assignors are: [{}].",
                registered.join(", ")
            )));
        }
    }
    let value = |name: &str| {
        let g = kafka_configs::group_key(name).expect("a group key");
        set.get(name)
            .cloned()
            .unwrap_or_else(|| broker(g.broker_synonym.expect("a bounded key has a broker key")))
    };
    for (session, heartbeat) in SESSION_OVER_HEARTBEAT {
        if (set.contains_key(*session) || set.contains_key(*heartbeat))
            && int(&value(session)) <= int(&value(heartbeat))
        {
            return Err(refuse(format!(
                "{session} must be greater than {heartbeat}"
            )));
        }
    }
    if let Some(dlq) = set.get("errors.deadletterqueue.topic.name") {
        if dlq.starts_with("__") {
            return Err(refuse(
                "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"
                    .to_string(),
            ));
        }
    }
    Ok(())
}

/// A value as Kafka's ConfigDef takes it for group key `g`.
fn check_value(g: &GroupKey, value: &str) -> Result<(), String> {
    if g.key.name == "share.auto.offset.reset" {
        // Kafka's own validator: a fixed choice, or a duration back from now.
        let ok = match value.strip_prefix("by_duration:") {
            Some(d) => is_iso_duration(d),
            None => value == "latest" || value == "earliest",
        };
        if ok {
            return Ok(());
        }
        return Err(format!(
            "Invalid value {value} for configuration share.auto.offset.reset: Invalid value \
             `{value}` for configuration share.auto.offset.reset. The value must be either \
             'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
        ));
    }
    g.key.check(value)
}

/// Whether `text` is a non-negative duration as Java's `Duration.parse` reads one:
/// `PnDTnHnMn.nS`, each part optional but one, case-insensitively.
fn is_iso_duration(text: &str) -> bool {
    let upper = text.to_ascii_uppercase();
    let Some(rest) = upper.strip_prefix('P') else {
        return false;
    };
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    // Each part: digits (with a fraction for seconds) and its unit, units in order.
    fn parts(s: &str, units: &[char], fraction_on: char) -> Option<usize> {
        let mut count = 0;
        let mut rest = s;
        let mut next_unit = 0;
        while !rest.is_empty() {
            let end = rest.find(|c: char| c.is_ascii_alphabetic())?;
            let (number, tail) = rest.split_at(end);
            let unit = tail.chars().next()?;
            let at = units[next_unit..].iter().position(|u| *u == unit)? + next_unit;
            let (whole, fraction) = match number.split_once(['.', ',']) {
                Some((w, f)) if unit == fraction_on => (w, Some(f)),
                Some(_) => return None,
                None => (number, None),
            };
            if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            if fraction.is_some_and(|f| f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit())) {
                return None;
            }
            count += 1;
            next_unit = at + 1;
            rest = &tail[1..];
        }
        Some(count)
    }
    let Some(d) = parts(days, &['D'], ' ') else {
        return false;
    };
    let t = match time {
        Some(t) => match parts(t, &['H', 'M', 'S'], 'S') {
            Some(0) | None => return false,
            Some(n) => n,
        },
        None => 0,
    };
    d + t > 0
}

/// A group's configs as DescribeConfigs reports them (`broker`: a broker key's value as this
/// broker has it). As Kafka: every key, the group's own value (DYNAMIC_GROUP_CONFIG) or else
/// the broker's value of its broker key (DEFAULT_CONFIG), with both as synonyms; Kafka's
/// internal keys only where the group sets them.
pub fn describe(
    set: &BTreeMap<String, String>,
    broker: &dyn Fn(&str) -> String,
    synonyms: bool,
) -> Vec<ConfigEntry> {
    kafka_configs::group_keys()
        .iter()
        .filter(|g| !g.internal || set.contains_key(g.key.name))
        .map(|g| {
            let name = g.key.name;
            let fallback = match g.broker_synonym {
                Some(b) => ConfigSynonym {
                    name: b.to_string(),
                    value: Some(broker(b)),
                    source: ConfigSource::Default,
                },
                None => ConfigSynonym {
                    name: name.to_string(),
                    value: g.key.default.map(str::to_string),
                    source: ConfigSource::Default,
                },
            };
            let own = set.get(name).map(|v| ConfigSynonym {
                name: name.to_string(),
                value: Some(v.clone()),
                source: ConfigSource::DynamicGroup,
            });
            let first = own.clone().unwrap_or_else(|| fallback.clone());
            ConfigEntry {
                name: name.to_string(),
                value: first.value,
                source: first.source,
                read_only: false,
                sensitive: g.key.config_type == ConfigType::Password,
                config_type: g.key.config_type,
                documentation: Some(documentation(g)),
                synonyms: if synonyms {
                    own.into_iter().chain([fallback]).collect()
                } else {
                    Vec::new()
                },
            }
        })
        .collect()
}

/// DescribeConfigs' documentation of a group key, in Weir's words.
fn documentation(g: &GroupKey) -> String {
    let name = g.key.name;
    let over = g
        .broker_synonym
        .map(|b| format!(" (this group's value of {b})"))
        .unwrap_or_default();
    if name == CONSUMER_SESSION_TIMEOUT_MS || name == CONSUMER_HEARTBEAT_INTERVAL_MS {
        format!(
            "Kafka's group config {name}{over}: Weir applies it to this consumer-protocol \
             group from its next heartbeat."
        )
    } else {
        format!(
            "Kafka's group config {name}{over}: Weir takes, keeps and describes it, and does \
             not act on it yet."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults(name: &str) -> String {
        broker_value(&BTreeMap::new(), name)
    }

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn refused(pairs: &[(&str, &str)]) -> String {
        let e = check(&set(pairs), &defaults).unwrap_err();
        assert_eq!(e.code, E::InvalidConfig.code(), "{pairs:?}");
        e.message
    }

    #[test]
    fn what_kafka_takes_is_taken_and_what_it_refuses_is_refused() {
        for ok in [
            &[("consumer.session.timeout.ms", "50000")][..],
            &[("consumer.heartbeat.interval.ms", "6000")],
            &[("share.auto.offset.reset", "by_duration:PT1H")],
            &[("share.auto.offset.reset", "by_duration:P1DT2H3M4.5S")],
            &[("share.isolation.level", "read_committed")],
            &[("streams.num.standby.replicas", "1")],
            &[("streams.num.warmup.replicas", "1")],
            &[("streams.assignor.name", "sticky")],
            &[("streams.rack.aware.assignment.tags", "zone,rack")],
            &[("errors.deadletterqueue.topic.name", "dlq")],
        ] {
            check(&set(ok), &defaults).unwrap_or_else(|e| panic!("{ok:?}: {}", e.message));
        }
        assert_eq!(
            refused(&[("group.consumer.session.timeout.ms", "50000")]),
            "Unknown group config name: group.consumer.session.timeout.ms"
        );
        assert_eq!(
            refused(&[("consumer.session.timeout.ms", "5000")]),
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."
        );
        assert!(refused(&[("consumer.session.timeout.ms", "soon")]).contains("type INT"));
        assert!(refused(&[("consumer.heartbeat.interval.ms", "0")]).contains("at least 1"));
        assert_eq!(
            refused(&[("streams.num.standby.replicas", "3")]),
            "streams.num.standby.replicas must be less than or equal to 2"
        );
        assert!(refused(&[("share.auto.offset.reset", "by_duration:soon")]).contains("PnDTnHnMn"));
        for bad in [
            "by_duration:P",
            "by_duration:PT",
            "by_duration:-PT1H",
            "by_duration:PT1.5H",
        ] {
            assert!(
                refused(&[("share.auto.offset.reset", bad)]).contains("PnDTnHnMn"),
                "{bad}"
            );
        }
        assert!(refused(&[("streams.assignor.name", "nope")]).contains("[sticky]"));
        assert!(refused(&[("errors.deadletterqueue.topic.name", "__dlq")]).contains("'__'"));
        // The broker's bounds are the broker's: a wider range takes a longer session, and
        // then the heartbeat must stay below it.
        let wide = |name: &str| match name {
            "group.consumer.max.heartbeat.interval.ms" => "100000".to_string(),
            _ => defaults(name),
        };
        let e = check(&set(&[("consumer.heartbeat.interval.ms", "50000")]), &wide).unwrap_err();
        assert_eq!(
            e.message,
            "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
        );
    }

    #[test]
    fn a_group_describes_its_own_values_over_the_broker_s() {
        let entries = describe(
            &set(&[
                ("consumer.session.timeout.ms", "50000"),
                ("streams.num.warmup.replicas", "1"),
            ]),
            &defaults,
            true,
        );
        let find = |n: &str| entries.iter().find(|e| e.name == n).cloned();
        let session = find("consumer.session.timeout.ms").unwrap();
        assert_eq!(
            (
                session.value.as_deref(),
                session.source,
                session.synonyms.len()
            ),
            (Some("50000"), ConfigSource::DynamicGroup, 2)
        );
        assert_eq!(
            session.synonyms[1].name,
            "group.consumer.session.timeout.ms"
        );
        let heartbeat = find("consumer.heartbeat.interval.ms").unwrap();
        assert_eq!(
            (heartbeat.value.as_deref(), heartbeat.source),
            (Some("5000"), ConfigSource::Default)
        );
        // Internal keys only where set; the assignor's default is the broker's first.
        assert!(find("streams.num.warmup.replicas").is_some());
        assert!(find("streams.task.offset.interval.ms").is_none());
        assert_eq!(
            find("streams.assignor.name").unwrap().value.as_deref(),
            Some("sticky")
        );
    }

    #[test]
    fn a_replaced_set_is_saved_and_loaded_again() {
        let dir = tempfile::tempdir().unwrap();
        let g = GroupConfigs::load(dir.path()).unwrap();
        let one = set(&[("consumer.session.timeout.ms", "50000")]);
        assert!(!g.replace("g", one.clone(), &defaults, true).unwrap());
        assert!(g.of("g").is_empty(), "validate only changes nothing");
        assert!(g.replace("g", one.clone(), &defaults, false).unwrap());
        assert!(!g.replace("g", one.clone(), &defaults, false).unwrap());
        assert_eq!(GroupConfigs::load(dir.path()).unwrap().of("g"), one);
        assert!(g.replace("g", BTreeMap::new(), &defaults, false).unwrap());
        assert!(GroupConfigs::load(dir.path()).unwrap().all().is_empty());
    }
}
