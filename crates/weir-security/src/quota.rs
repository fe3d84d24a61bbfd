//! Client quotas with Kafka's model: byte rates for produce and fetch and a share of request
//! handling time (`request_percentage`), set per user, per client id, or per (user, client
//! id), each with a `<default>` form, and enforced by throttling, so one client cannot starve
//! the rest.
//!
//! - **Which quota applies**: the most specific one set, in Kafka's order — (user,
//!   client id), (user, default client), (user), (default user, client id), (default
//!   user, default client), (default user), (client id), (default client). Each kind
//!   (`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`) is resolved on its
//!   own.
//! - **Who shares it**: a quota set for a user alone is shared by all that user's client
//!   ids; one for a client id alone by every user of that id; any other is per (user,
//!   client id). That is Kafka's choice of metric tags.
//! - **Measuring**: bytes over 11 one-second samples (`quota.window.num`,
//!   `quota.window.size.seconds`), the rate taken over at least 10 seconds, as Kafka's
//!   `Rate` does.
//! - **Throttling**: above its quota, a client is told `throttle_time_ms`, the time that
//!   brings its rate back to the quota ((rate − quota) / quota × window), and its
//!   connection is not read for that long (KIP-219). A throttled fetch is answered empty.
//!   A request-time throttle is at most one window, as Kafka bounds it.
//!
//! The quotas are kept in `weir-quotas.json` in the first data directory, written
//! atomically on each change (Kafka keeps them in its metadata log). This is hand-written
//! because it is Kafka's own accounting, which no crate implements.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};

use crate::state_file::{Doc, FileStore, Store};

use serde::{Deserialize, Serialize};
use weir_kafka::quota::{
    CONNECTION_CREATION_RATE, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
};

pub const QUOTAS_FILE: &str = "weir-quotas.json";

/// Checks a quota value as AlterClientQuotas takes it for `entity`, with Kafka's words: an
/// IP's quota is `connection_creation_rate`, a whole number of connections per second, more
/// than 0; a user's or client id's are byte rates (whole bytes per second, at least 1) and
/// `controller_mutation_rate` (partitions created or deleted per second, more than 0).
pub fn check_entry(entity: &Entity, key: &str, value: f64) -> Result<(), String> {
    if entity.ip.is_some() {
        if key != CONNECTION_CREATION_RATE {
            return Err(format!(
                "Invalid configuration key {key} (an IP's quota is {CONNECTION_CREATION_RATE})"
            ));
        }
        if value.is_nan() || value <= 0.0 || !value.is_finite() {
            return Err(format!("Quota {key} must be greater than 0"));
        }
        if value.fract() != 0.0 {
            return Err(format!("{key} cannot be a fractional value."));
        }
        return Ok(());
    }
    if key == CONNECTION_CREATION_RATE {
        return Err(format!(
            "Invalid configuration key {key} (it is a quota of an IP, not of a user or client id)"
        ));
    }
    check_value(key, value)
}

/// Checks a user's or client id's quota value: a whole, positive number of bytes per second,
/// a positive rate of partition mutations, or a positive share of request handling time.
pub fn check_value(key: &str, value: f64) -> Result<(), String> {
    if key == REQUEST_PERCENTAGE {
        if !(value > 0.0 && value.is_finite()) {
            return Err(format!("Quota {key} must be greater than 0"));
        }
        return Ok(());
    }
    if key == CONTROLLER_MUTATION_RATE {
        if !(value > 0.0 && value.is_finite()) {
            return Err(format!(
                "{key}={value}: partitions created or deleted per second, more than 0"
            ));
        }
        return Ok(());
    }
    if key != PRODUCER_BYTE_RATE && key != CONSUMER_BYTE_RATE {
        return Err(format!(
            "unknown quota '{key}' ({PRODUCER_BYTE_RATE}, {CONSUMER_BYTE_RATE}, \
             {REQUEST_PERCENTAGE} and {CONTROLLER_MUTATION_RATE} are enforced)"
        ));
    }
    if !(value >= 1.0 && value.fract() == 0.0 && value <= i64::MAX as f64) {
        return Err(format!(
            "{key}={value}: a byte rate is a whole number of bytes per second, at least 1"
        ));
    }
    Ok(())
}

/// What a rate measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Produce,
    Fetch,
    /// Time spent handling requests, in percent of one thread's time.
    Request,
    /// Connections opened from one address.
    Connection,
}

impl Kind {
    pub fn key(self) -> &'static str {
        match self {
            Kind::Produce => PRODUCER_BYTE_RATE,
            Kind::Fetch => CONSUMER_BYTE_RATE,
            Kind::Request => REQUEST_PERCENTAGE,
            Kind::Connection => CONNECTION_CREATION_RATE,
        }
    }
}

/// One side of a quota entity: a name, or `<default>` (every name without its own).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Name {
    Named(String),
    Default,
}

/// What a quota is set for: a user, a client id, or both; or else an IP address.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Entity {
    pub user: Option<Name>,
    pub client_id: Option<Name>,
    /// An IP address (in its canonical text form), never with a user or client id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Name>,
}

impl Entity {
    fn of(user: Option<&Name>, client_id: Option<&Name>) -> Entity {
        Entity {
            user: user.cloned(),
            client_id: client_id.cloned(),
            ip: None,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct QuotasFile {
    quotas: Vec<(Entity, BTreeMap<String, f64>)>,
}

fn check_all(quotas: Vec<(Entity, BTreeMap<String, f64>)>) -> Result<QuotaMap, String> {
    for (entity, values) in &quotas {
        for (key, v) in values {
            check_entry(entity, key, *v).map_err(|e| format!("{entity:?}: {e}"))?;
        }
    }
    Ok(quotas.into_iter().collect())
}

fn decode_quotas(bytes: &[u8]) -> Result<QuotaMap, String> {
    check_all(crate::state_file::decode::<QuotasFile>(bytes)?.quotas)
}

/// How rates are measured: `quota.window.num` samples of `quota.window.size.seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    pub samples: i64,
    pub window_ms: i64,
}

impl Default for Windows {
    /// Kafka's: 11 samples of 1 second (10 whole windows and the current one).
    fn default() -> Self {
        Windows {
            samples: 11,
            window_ms: 1000,
        }
    }
}

/// Kafka's windowed `Rate`: a sum per sample window, over the last `samples` windows.
#[derive(Debug, Default)]
struct Rate {
    /// (window start ms, sum), oldest first.
    samples: std::collections::VecDeque<(i64, f64)>,
}

impl Rate {
    fn record(&mut self, w: Windows, value: f64, now: i64) {
        while self
            .samples
            .front()
            .is_some_and(|(start, _)| now - start >= w.samples * w.window_ms)
        {
            self.samples.pop_front();
        }
        match self.samples.back_mut() {
            Some((start, sum)) if now - *start < w.window_ms => *sum += value,
            _ => self.samples.push_back((now, value)),
        }
    }

    /// The span the rate is taken over: since the oldest sample, and at least the
    /// `samples - 1` full windows Kafka assumes, so a new client's first burst is
    /// averaged over 10 seconds, not over the milliseconds it took.
    fn window(&self, w: Windows, now: i64) -> i64 {
        let oldest = self.samples.front().map_or(now, |(s, _)| *s);
        let mut elapsed = now - oldest;
        let full = elapsed / w.window_ms;
        if full < w.samples - 1 {
            elapsed += (w.samples - 1 - full) * w.window_ms;
        }
        elapsed
    }

    /// Bytes per second.
    fn value(&self, w: Windows, now: i64) -> f64 {
        let total: f64 = self.samples.iter().map(|(_, s)| s).sum();
        total / (self.window(w, now) as f64 / 1000.0)
    }
}

type RateKey = (Kind, String, String);

/// The rate measured for `key`, made if it is new. Clients come and go (and a hostile one
/// may invent client ids or addresses): rates with no sample left in the window are dropped
/// once the map has doubled, as Kafka expires idle quota sensors.
fn rate_of(rates: &mut HashMap<RateKey, Rate>, w: Windows, key: RateKey, now: i64) -> &mut Rate {
    let len = rates.len();
    if len >= 1024 && len.is_power_of_two() && !rates.contains_key(&key) {
        rates.retain(|_, r| {
            r.samples
                .back()
                .is_some_and(|(start, _)| now - start < w.samples * w.window_ms)
        });
    }
    rates.entry(key).or_default()
}

fn sets_request_quota(configs: &QuotaMap) -> bool {
    configs.values().any(|q| q.contains_key(REQUEST_PERCENTAGE))
}

/// The quotas, and each client's measured rates.
type QuotaMap = BTreeMap<Entity, BTreeMap<String, f64>>;

#[derive(Debug)]
pub struct Quotas {
    store: Box<dyn Store>,
    windows: Windows,
    configs: RwLock<Doc<QuotaMap>>,
    /// Whether any entity of `configs` sets `request_percentage`, asked of every request:
    /// kept beside them, as they change, rather than found under their lock each time.
    request_quota: AtomicBool,
    /// By (kind, user tag, client-id tag).
    rates: Mutex<HashMap<RateKey, Rate>>,
}

impl Quotas {
    pub fn load(dir: &Path, windows: Windows) -> Result<Quotas, String> {
        let path = dir.join(QUOTAS_FILE);
        let quotas = crate::state_file::read::<QuotasFile>(&path)?
            .map(|f| f.quotas)
            .unwrap_or_default();
        let configs = check_all(quotas).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Quotas {
            store: Box::new(FileStore(path)),
            windows,
            request_quota: AtomicBool::new(sets_request_quota(&configs)),
            configs: RwLock::new(Doc {
                value: configs,
                revision: 0,
            }),
            rates: Mutex::new(HashMap::new()),
        })
    }

    /// The quotas of a document kept in `store`, as it stands (`None`: none yet).
    pub fn from_document(
        store: Box<dyn Store>,
        current: Option<(&[u8], i64)>,
        windows: Windows,
    ) -> Result<Quotas, String> {
        let (value, revision) = match current {
            Some((bytes, rev)) => (decode_quotas(bytes)?, rev),
            None => (QuotaMap::new(), 0),
        };
        Ok(Quotas {
            store,
            windows,
            request_quota: AtomicBool::new(sets_request_quota(&value)),
            configs: RwLock::new(Doc { value, revision }),
            rates: Mutex::new(HashMap::new()),
        })
    }

    /// Takes the document another broker saved (`None`: removed), seen at `revision`.
    pub fn install(&self, bytes: Option<&[u8]>, revision: i64) -> Result<bool, String> {
        let value = bytes.map(decode_quotas).transpose()?.unwrap_or_default();
        let changed = crate::state_file::install(&self.configs, value, revision);
        if changed {
            self.rates.lock().unwrap_or_else(|e| e.into_inner()).clear();
            self.note_request_quota();
        }
        Ok(changed)
    }

    /// The `key` quota (for example `controller_mutation_rate`) that applies to `user`
    /// (the principal's name) with `client_id`, and the (user, client-id) tags of the rate
    /// it is measured by, in Kafka's order of precedence; `None` if no entity sets it.
    pub fn limit(&self, key: &str, user: &str, client_id: &str) -> Option<(f64, String, String)> {
        let configs = self.configs.read().unwrap_or_else(|e| e.into_inner());
        let configs = &configs.value;
        if configs.is_empty() {
            return None;
        }
        let u = Name::Named(user.to_string());
        let c = Name::Named(client_id.to_string());
        let d = Name::Default;
        let both = || (user.to_string(), client_id.to_string());
        let user_only = || (user.to_string(), String::new());
        let client_only = || (String::new(), client_id.to_string());
        let order: [(Option<&Name>, Option<&Name>, u8); 8] = [
            (Some(&u), Some(&c), 0),
            (Some(&u), Some(&d), 0),
            (Some(&u), None, 1),
            (Some(&d), Some(&c), 0),
            (Some(&d), Some(&d), 0),
            (Some(&d), None, 1),
            (None, Some(&c), 2),
            (None, Some(&d), 2),
        ];
        order.iter().find_map(|(user_side, client_side, tags)| {
            let limit = configs
                .get(&Entity::of(*user_side, *client_side))?
                .get(key)?;
            let (ut, ct) = match tags {
                0 => both(),
                1 => user_only(),
                _ => client_only(),
            };
            Some((*limit, ut, ct))
        })
    }

    /// Records `bytes` for this client and returns how long to throttle it, in ms (0
    /// while it is within its quota, or has none).
    pub fn record(&self, kind: Kind, user: &str, client_id: &str, bytes: usize, now: i64) -> u32 {
        self.record_value(kind, user, client_id, bytes as f64, now)
            .unwrap_or(0)
    }

    /// Records the time one request of this client took to handle and returns how long to
    /// throttle it, in ms. As Kafka's request quota: the time counts in percent of one
    /// thread's second, so `request_percentage=50` allows half a thread; the throttle is at
    /// most one window (`quota.window.size.seconds`).
    pub fn record_request(&self, user: &str, client_id: &str, nanos: u64, now: i64) -> u32 {
        let percent = nanos as f64 * 100.0 / 1e9;
        match self.record_value(Kind::Request, user, client_id, percent, now) {
            Some(ms) => ms.min(self.windows.window_ms.clamp(0, u32::MAX as i64) as u32),
            None => 0,
        }
    }

    /// Whether any entity sets a request-time quota (when none does, a request's handling
    /// time need not be measured).
    pub fn any_request_quota(&self) -> bool {
        self.request_quota.load(Ordering::Relaxed)
    }

    fn note_request_quota(&self) {
        let configs = self.configs.read().unwrap_or_else(|e| e.into_inner());
        self.request_quota
            .store(sets_request_quota(&configs.value), Ordering::Relaxed);
    }

    /// Records `value` on the rate of `kind` for this client: the throttle in ms, or `None`
    /// if no quota of that kind applies to it.
    fn record_value(
        &self,
        kind: Kind,
        user: &str,
        client_id: &str,
        value: f64,
        now: i64,
    ) -> Option<u32> {
        let (limit, ut, ct) = self.limit(kind.key(), user, client_id)?;
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        let w = self.windows;
        let rate = rate_of(&mut rates, w, (kind, ut, ct), now);
        rate.record(w, value, now);
        let observed = rate.value(w, now);
        if observed <= limit {
            return Some(0);
        }
        let throttle = (observed - limit) / limit * rate.window(w, now) as f64;
        Some(throttle.round().clamp(0.0, i32::MAX as f64) as u32)
    }

    /// Takes back bytes recorded for a fetch that is answered empty because it was
    /// throttled, as Kafka does.
    pub fn unrecord(&self, kind: Kind, user: &str, client_id: &str, bytes: usize, now: i64) {
        let Some((_, ut, ct)) = self.limit(kind.key(), user, client_id) else {
            return;
        };
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rate) = rates.get_mut(&(kind, ut, ct)) {
            rate.record(self.windows, -(bytes as f64), now);
        }
    }

    /// Records a connection opened from `ip` and returns how long to hold it before it is
    /// closed unserved, in ms (0: serve it), as Kafka's IP connection-rate quota does
    /// (KIP-612): the quota is that IP's own, else the default IP's. A throttled connection
    /// is not counted, so a client that backs off gets in again.
    pub fn record_connection(&self, ip: std::net::IpAddr, now: i64) -> u32 {
        let ip = ip.to_canonical().to_string();
        let limit = {
            let configs = self.configs.read().unwrap_or_else(|e| e.into_inner());
            let of = |n: Name| {
                configs
                    .value
                    .get(&Entity {
                        ip: Some(n),
                        ..Entity::default()
                    })
                    .and_then(|q| q.get(CONNECTION_CREATION_RATE))
                    .copied()
            };
            of(Name::Named(ip.clone())).or_else(|| of(Name::Default))
        };
        let Some(limit) = limit else { return 0 };
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        let w = self.windows;
        let rate = rate_of(&mut rates, w, (Kind::Connection, ip, String::new()), now);
        rate.record(w, 1.0, now);
        let observed = rate.value(w, now);
        if observed <= limit {
            return 0;
        }
        rate.record(w, -1.0, now);
        let throttle = (observed - limit) / limit * rate.window(w, now) as f64;
        throttle.round().clamp(1.0, i32::MAX as f64) as u32
    }

    /// The most a fetch may return to this client: what its quota allows over the
    /// whole window, so a single response never needs more than one window's throttle.
    pub fn max_fetch_bytes(&self, user: &str, client_id: &str) -> Option<usize> {
        let (limit, _, _) = self.limit(Kind::Fetch.key(), user, client_id)?;
        let span = (self.windows.samples - 1) * self.windows.window_ms;
        Some((limit * span as f64 / 1000.0).max(1.0) as usize)
    }

    /// Every entity with its quotas.
    pub fn all(&self) -> Vec<(Entity, BTreeMap<String, f64>)> {
        let configs = self.configs.read().unwrap_or_else(|e| e.into_inner());
        configs
            .value
            .iter()
            .map(|(e, v)| (e.clone(), v.clone()))
            .collect()
    }

    /// Sets (`Some`) or removes (`None`) quota values, and saves the file: all of it or,
    /// if the save fails, none of it.
    pub fn change(&self, changes: &[(Entity, String, Option<f64>)]) -> Result<(), String> {
        let changed = crate::state_file::update(
            &self.configs,
            &*self.store,
            |configs| {
                crate::state_file::encode(&QuotasFile {
                    quotas: configs
                        .iter()
                        .map(|(e, v)| (e.clone(), v.clone()))
                        .collect(),
                })
            },
            decode_quotas,
            QuotaMap::new,
            |current| {
                let mut next = current.clone();
                for (entity, key, value) in changes {
                    match value {
                        Some(v) => {
                            next.entry(entity.clone())
                                .or_default()
                                .insert(key.clone(), *v);
                        }
                        None => {
                            if let Some(m) = next.get_mut(entity) {
                                m.remove(key);
                                if m.is_empty() {
                                    next.remove(entity);
                                }
                            }
                        }
                    }
                }
                let changed = next != *current;
                Ok((changed.then_some(next), changed))
            },
        )?;
        // In a cluster the update may also have taken another broker's newer document.
        self.note_request_quota();
        if changed {
            // Rates measured under the old quotas may now be keyed differently; start over.
            self.rates.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(s: &str) -> Option<Name> {
        Some(Name::Named(s.into()))
    }

    fn quotas(set: &[(Option<Name>, Option<Name>, &str, f64)]) -> (tempfile::TempDir, Quotas) {
        let dir = tempfile::tempdir().unwrap();
        let q = Quotas::load(dir.path(), Windows::default()).unwrap();
        let changes: Vec<_> = set
            .iter()
            .map(|(u, c, k, v)| {
                (
                    Entity {
                        user: u.clone(),
                        client_id: c.clone(),
                        ip: None,
                    },
                    k.to_string(),
                    Some(*v),
                )
            })
            .collect();
        q.change(&changes).unwrap();
        (dir, q)
    }

    #[test]
    fn the_most_specific_quota_wins_in_kafka_s_order() {
        let (_d, q) = quotas(&[
            (None, Some(Name::Default), PRODUCER_BYTE_RATE, 8.0),
            (None, named("app"), PRODUCER_BYTE_RATE, 7.0),
            (Some(Name::Default), None, PRODUCER_BYTE_RATE, 6.0),
            (
                Some(Name::Default),
                Some(Name::Default),
                PRODUCER_BYTE_RATE,
                5.0,
            ),
            (Some(Name::Default), named("app"), PRODUCER_BYTE_RATE, 4.0),
            (named("alice"), None, PRODUCER_BYTE_RATE, 3.0),
            (named("alice"), Some(Name::Default), PRODUCER_BYTE_RATE, 2.0),
            (named("alice"), named("app"), PRODUCER_BYTE_RATE, 1.0),
        ]);
        let limit = |u: &str, c: &str| q.limit(PRODUCER_BYTE_RATE, u, c).map(|r| r.0);
        assert_eq!(limit("alice", "app"), Some(1.0));
        assert_eq!(limit("alice", "other"), Some(2.0));
        assert_eq!(limit("bob", "app"), Some(4.0));
        assert_eq!(limit("bob", "other"), Some(5.0));
        assert_eq!(
            q.limit(CONSUMER_BYTE_RATE, "alice", "app"),
            None,
            "kinds apart"
        );
        let (_d, q) = quotas(&[
            (None, Some(Name::Default), CONSUMER_BYTE_RATE, 8.0),
            (None, named("app"), CONSUMER_BYTE_RATE, 7.0),
            (named("alice"), None, CONSUMER_BYTE_RATE, 3.0),
        ]);
        let r = |u: &str, c: &str| q.limit(CONSUMER_BYTE_RATE, u, c).unwrap();
        assert_eq!(
            r("alice", "x"),
            (3.0, "alice".into(), String::new()),
            "per user"
        );
        assert_eq!(
            r("bob", "app"),
            (7.0, String::new(), "app".into()),
            "per client id"
        );
        assert_eq!(r("bob", "x"), (8.0, String::new(), "x".into()));
    }

    #[test]
    fn a_controller_mutation_rate_is_a_positive_rate_kept_apart_from_byte_rates() {
        assert!(
            check_value(CONTROLLER_MUTATION_RATE, 0.5).is_ok(),
            "fractions are rates"
        );
        for bad in [0.0, -1.0, f64::INFINITY, f64::NAN] {
            assert!(check_value(CONTROLLER_MUTATION_RATE, bad).is_err(), "{bad}");
        }
        let (_d, q) = quotas(&[
            (None, named("admin"), CONTROLLER_MUTATION_RATE, 2.0),
            (None, named("admin"), PRODUCER_BYTE_RATE, 100.0),
        ]);
        assert_eq!(
            q.limit(CONTROLLER_MUTATION_RATE, "alice", "admin"),
            Some((2.0, String::new(), "admin".into()))
        );
        assert_eq!(q.limit(CONTROLLER_MUTATION_RATE, "alice", "app"), None);
    }

    #[test]
    fn a_client_over_its_quota_is_throttled_for_the_time_that_brings_it_back() {
        let (_d, q) = quotas(&[(None, named("app"), PRODUCER_BYTE_RATE, 1000.0)]);
        // 5,000 bytes at t=0: over a 10 s window that is 500 B/s, within the quota.
        assert_eq!(q.record(Kind::Produce, "u", "app", 5_000, 0), 0);
        // 15,000 in all: 1,500 B/s over 10 s; (1500 - 1000) / 1000 × 10 s = 5 s.
        assert_eq!(q.record(Kind::Produce, "u", "app", 10_000, 0), 5_000);
        // Others are not affected.
        assert_eq!(q.record(Kind::Produce, "u", "other", 1 << 30, 0), 0);
        // After 20 s the old samples have left the window.
        assert_eq!(q.record(Kind::Produce, "u", "app", 100, 20_000), 0);
    }

    #[test]
    fn request_time_counts_in_percent_of_a_thread_and_throttles_for_at_most_a_window() {
        let (_d1, q) = quotas(&[(None, named("app"), REQUEST_PERCENTAGE, 10.0)]);
        assert!(q.any_request_quota());
        assert!(check_value(REQUEST_PERCENTAGE, 0.001).is_ok());
        for bad in [0.0, -1.0, f64::INFINITY, f64::NAN] {
            assert!(check_value(REQUEST_PERCENTAGE, bad).is_err(), "{bad}");
        }
        // Half a second of handling: 50 percent-seconds over the 10 s window is 5 %.
        assert_eq!(q.record_request("u", "app", 500_000_000, 0), 0);
        // One more second: 15 %; (15 - 10) / 10 × 10 s = 5 s, bounded by the 1 s window.
        assert_eq!(q.record_request("u", "app", 1_000_000_000, 0), 1_000);
        // Byte rates and other clients are measured apart.
        assert_eq!(q.record(Kind::Produce, "u", "app", 1 << 30, 0), 0);
        assert_eq!(q.record_request("u", "other", 10_000_000_000, 0), 0);
        let (_d, none) = quotas(&[(None, named("app"), PRODUCER_BYTE_RATE, 1000.0)]);
        assert!(!none.any_request_quota());
        // Loaded again, the quota is still seen; removed, it is not.
        assert!(Quotas::load(_d1.path(), Windows::default())
            .unwrap()
            .any_request_quota());
        let app = Entity {
            user: None,
            client_id: named("app"),
            ip: None,
        };
        q.change(&[(app, REQUEST_PERCENTAGE.to_string(), None)])
            .unwrap();
        assert!(!q.any_request_quota());
    }

    #[test]
    fn idle_clients_rates_are_dropped_so_invented_client_ids_cost_nothing_lasting() {
        let (_d, q) = quotas(&[(None, Some(Name::Default), PRODUCER_BYTE_RATE, 1e9)]);
        for i in 0..5000 {
            q.record(Kind::Produce, "u", &format!("c{i}"), 10, 0);
        }
        let before = q.rates.lock().unwrap().len();
        assert!(before >= 1024, "{before}");
        // A minute later, new clients arrive; when the map has doubled, the idle ones go.
        for i in 0..4000 {
            q.record(Kind::Produce, "u", &format!("late{i}"), 10, 60_000);
        }
        let after = q.rates.lock().unwrap().len();
        assert!(after <= 4000, "{after} rates kept, {before} of them idle");
    }

    #[test]
    fn the_rate_covers_the_samples_kafka_keeps() {
        let w = Windows::default();
        let mut r = Rate::default();
        r.record(w, 1000.0, 0);
        assert_eq!(r.window(w, 0), 10_000);
        assert_eq!(r.value(w, 0), 100.0);
        r.record(w, 1000.0, 10_500);
        assert_eq!(r.window(w, 10_500), 10_500);
        r.record(w, 0.0, 11_000);
        assert_eq!(r.samples.len(), 1, "the sample from t=0 expired");
    }

    #[test]
    fn quotas_are_saved_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let q = Quotas::load(dir.path(), Windows::default()).unwrap();
        let e = Entity {
            user: named("alice"),
            client_id: None,
            ip: None,
        };
        q.change(&[(e.clone(), PRODUCER_BYTE_RATE.into(), Some(1024.0))])
            .unwrap();
        let reload = || Quotas::load(dir.path(), Windows::default()).unwrap();
        assert_eq!(reload().all().len(), 1);
        q.change(&[(e, PRODUCER_BYTE_RATE.into(), None)]).unwrap();
        assert!(reload().all().is_empty());
    }
}
