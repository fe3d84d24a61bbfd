//! Followers: the replicas this broker holds of partitions other brokers lead fetch from
//! their leaders (Kafka's `ReplicaFetcherManager` and `ReplicaFetcherThread`). One task per
//! leader broker and shard (`num.replica.fetchers`), each with one connection over the
//! inter-broker listener, fetching every partition it follows in one Fetch v12 with this
//! broker's id as `replica_id`. The leader's batches are appended as they came (same
//! offsets, same leader epochs); the leader's high watermark comes back in each answer.
//!
//! Where a follower's log diverged from the leader's (it held records of an older epoch
//! the new leader never had), the leader says so in the fetch answer (KIP-320
//! `diverging_epoch`) and the follower truncates to where the two agree before fetching
//! again: the leader-epoch checkpoint of both sides decides it, never the high watermark
//! alone (KIP-101, KIP-279).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use tokio::sync::Notify;
use tokio::time::Instant;
use weir_client::conn::BrokerConnection;
use weir_client::security::Security;
use weir_kafka::TopicPartition;

use crate::broker::Broker;
use crate::config::ReplicationSettings;
use crate::partition::{Partition, Truncation};

/// The Fetch version followers use: the first with `last_fetched_epoch` and
/// `diverging_epoch` (KIP-320), still naming topics rather than their ids.
const FOLLOWER_FETCH_VERSION: i16 = 12;

/// One partition a fetcher follows.
#[derive(Clone)]
struct Followed {
    replica: Arc<Partition>,
    /// The leader epoch it follows at: fetches say it, and what comes back is appended
    /// only while the replica still follows at it.
    leader_epoch: i32,
    /// Not fetched before then (its last fetch failed).
    retry_at: Option<Instant>,
}

/// What one fetcher task follows, shared with the manager that changes it.
#[derive(Default)]
struct Shared {
    followed: Mutex<BTreeMap<TopicPartition, Followed>>,
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<TopicPartition, Followed>> {
        self.followed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The fetchers of this broker, by (leader broker, shard).
pub struct ReplicaFetchers {
    me: i32,
    settings: ReplicationSettings,
    runtime: OnceLock<(tokio::runtime::Handle, Weak<Broker>)>,
    fetchers: Mutex<HashMap<(i32, usize), Arc<Shared>>>,
    /// Which fetcher follows each partition.
    placed: Mutex<HashMap<TopicPartition, (i32, usize)>>,
}

impl ReplicaFetchers {
    pub fn new(me: i32, settings: ReplicationSettings) -> ReplicaFetchers {
        ReplicaFetchers {
            me,
            settings,
            runtime: OnceLock::new(),
            fetchers: Mutex::new(HashMap::new()),
            placed: Mutex::new(HashMap::new()),
        }
    }

    pub fn settings(&self) -> &ReplicationSettings {
        &self.settings
    }

    /// Where fetcher tasks run, and the broker they serve (set once, at start-up).
    pub fn start(&self, runtime: tokio::runtime::Handle, broker: Weak<Broker>) {
        let _ = self.runtime.set((runtime, broker));
    }

    /// `replica` follows `leader` at `leader_epoch` from now (moved from the fetcher it
    /// had, if its leader changed).
    pub fn follow(&self, replica: Arc<Partition>, leader: i32, leader_epoch: i32) {
        let tp = replica.tp.clone();
        let shard = shard_of(&tp, self.settings.fetchers);
        let key = (leader, shard);
        let before = self
            .placed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tp.clone(), key);
        if let Some(old) = before.filter(|k| *k != key) {
            self.remove_from(old, &tp);
        }
        let shared = self.fetcher(key);
        shared.lock().insert(
            tp,
            Followed {
                replica,
                leader_epoch,
                retry_at: None,
            },
        );
        shared.changed.notify_one();
    }

    /// `tp` is no longer followed here (this broker leads it, or holds no replica).
    pub fn unfollow(&self, tp: &TopicPartition) {
        let placed = self
            .placed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tp);
        if let Some(key) = placed {
            self.remove_from(key, tp);
        }
    }

    fn remove_from(&self, key: (i32, usize), tp: &TopicPartition) {
        if let Some(f) = self
            .fetchers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            f.lock().remove(tp);
        }
    }

    /// The fetcher of `key`, its task started if it is new.
    fn fetcher(&self, key: (i32, usize)) -> Arc<Shared> {
        let mut fetchers = self.fetchers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = fetchers.get(&key) {
            return f.clone();
        }
        let shared = Arc::new(Shared::default());
        fetchers.insert(key, shared.clone());
        match self.runtime.get() {
            Some((rt, broker)) => {
                rt.spawn(run(
                    broker.clone(),
                    self.me,
                    key.0,
                    self.settings.clone(),
                    shared.clone(),
                ));
            }
            None => tracing::error!("replica fetchers used before start-up; nothing fetches"),
        }
        shared
    }
}

fn shard_of(tp: &TopicPartition, fetchers: usize) -> usize {
    // Kafka's `getFetcherId`: by topic hash and partition.
    let h = tp
        .topic
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    (h.wrapping_add(tp.partition as u32) as usize) % fetchers.max(1)
}

/// One fetcher: fetches from `leader` what `shared` holds, until the broker stops.
async fn run(
    broker: Weak<Broker>,
    me: i32,
    leader: i32,
    settings: ReplicationSettings,
    shared: Arc<Shared>,
) {
    let mut shutdown = match broker.upgrade() {
        Some(b) => b.shutdown.subscribe(),
        None => return,
    };
    let backoff = Duration::from_millis(settings.fetch_backoff_ms);
    let mut conn: Option<(String, Arc<BrokerConnection>)> = None;
    let mut last_error: Option<String> = None;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let now = Instant::now();
        let due: Vec<(TopicPartition, Followed)> = shared
            .lock()
            .iter()
            .filter(|(_, f)| f.retry_at.is_none_or(|at| at <= now))
            .map(|(tp, f)| (tp.clone(), f.clone()))
            .collect();
        if due.is_empty() {
            let next_retry = shared.lock().values().filter_map(|f| f.retry_at).min();
            let wait = next_retry.map_or(Duration::from_secs(3600), |at| {
                at.saturating_duration_since(now)
            });
            tokio::select! {
                _ = shared.changed.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => return,
            }
            continue;
        }
        let Some(b) = broker.upgrade() else { return };
        let addr = b.cluster.as_ref().and_then(|m| {
            let image = m.image();
            let reg = image.broker(leader)?;
            let ep = reg.endpoint(&settings.listener)?;
            Some(format!("{}:{}", ep.host, ep.port))
        });
        drop(b);
        let Some(addr) = addr else {
            // Not registered (yet, or any more): the controller moves leadership on.
            note_error(
                &mut last_error,
                leader,
                format!(
                    "broker {leader} has no registered {} listener",
                    settings.listener
                ),
            );
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => return,
            }
            continue;
        };
        let connection = match &conn {
            Some((a, c)) if *a == addr && !c.is_broken() => Ok(c.clone()),
            _ => BrokerConnection::connect(
                &addr,
                &format!("weir-replica-fetcher-{me}"),
                Duration::from_millis(settings.socket_timeout_ms),
                Duration::from_millis(settings.socket_timeout_ms),
                &Security {
                    tls: None,
                    sasl: None,
                },
            )
            .await
            .inspect(|c| conn = Some((addr.clone(), c.clone()))),
        };
        let result = match connection {
            Ok(c) => {
                let req = request(me, &settings, &due);
                tokio::select! {
                    r = c.request(&req, FOLLOWER_FETCH_VERSION) => r,
                    _ = shutdown.changed() => return,
                }
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(resp) if resp.error_code == 0 => {
                if last_error.take().is_some() {
                    tracing::info!(leader, "fetching from broker {leader} again");
                }
                let due: HashMap<TopicPartition, Followed> = due.into_iter().collect();
                let retry = tokio::task::block_in_place(|| apply(resp, &due));
                let mut followed = shared.lock();
                for tp in retry {
                    // Not if it is followed at another epoch since the fetch was made:
                    // the refusal was for the leadership before.
                    let asked_at = due.get(&tp).map(|d| d.leader_epoch);
                    if let Some(f) = followed.get_mut(&tp) {
                        if Some(f.leader_epoch) == asked_at {
                            f.retry_at = Some(Instant::now() + backoff);
                        }
                    }
                }
            }
            failed => {
                let e = match failed {
                    Ok(resp) => E::try_from_code(resp.error_code)
                        .map_or(format!("error {}", resp.error_code), |e| format!("{e:?}")),
                    Err(e) => {
                        conn = None; // the connection is given up
                        e.to_string()
                    }
                };
                note_error(
                    &mut last_error,
                    leader,
                    format!("fetch from broker {leader}: {e}"),
                );
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
    }
}

/// Logs a fetcher's failure once, until it changes or fetching works again.
fn note_error(last: &mut Option<String>, leader: i32, error: String) {
    if last.as_deref() != Some(error.as_str()) {
        tracing::warn!(leader, "{error}; retrying");
        *last = Some(error);
    }
}

/// One Fetch for every partition due, each from its log end.
fn request(
    me: i32,
    settings: &ReplicationSettings,
    due: &[(TopicPartition, Followed)],
) -> FetchRequest {
    let mut by_topic: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
    for (tp, f) in due {
        let (leo, start, last_epoch) = match f.replica.lock_log() {
            Ok(log) => (
                log.log_end_offset(),
                log.log_start_offset(),
                log.leader_epochs().latest_epoch().unwrap_or(-1),
            ),
            Err(_) => continue, // offline here: nothing to fetch into
        };
        let mut p = FetchPartition::default();
        p.partition = tp.partition;
        p.current_leader_epoch = f.leader_epoch;
        p.fetch_offset = leo;
        p.last_fetched_epoch = last_epoch;
        p.log_start_offset = start;
        p.partition_max_bytes = settings.fetch_max_bytes;
        by_topic.entry(&tp.topic).or_default().push(p);
    }
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(me);
    req.max_wait_ms = settings.fetch_wait_max_ms;
    req.min_bytes = settings.fetch_min_bytes;
    req.max_bytes = settings.fetch_response_max_bytes;
    req.isolation_level = 0;
    req.session_id = 0;
    req.session_epoch = -1; // no fetch session: every fetch is full
    req.topics = by_topic
        .into_iter()
        .map(|(t, partitions)| {
            let mut ft = FetchTopic::default();
            ft.topic = TopicName(StrBytes::from_string(t.to_string()));
            ft.partitions = partitions;
            ft
        })
        .collect();
    req
}

/// Applies a leader's answer to the replicas it was for; the partitions to fetch again
/// only after the back-off (their leader did not serve them).
fn apply(resp: FetchResponse, due: &HashMap<TopicPartition, Followed>) -> Vec<TopicPartition> {
    let mut retry = Vec::new();
    for t in resp.responses {
        for pd in t.partitions {
            let tp = TopicPartition::new(t.topic.to_string(), pd.partition_index);
            let Some(f) = due.get(&tp) else { continue };
            let epoch = f.leader_epoch;
            let outcome = match E::try_from_code(pd.error_code) {
                None if pd.diverging_epoch.epoch >= 0 => diverged(
                    &f.replica,
                    epoch,
                    pd.diverging_epoch.epoch,
                    pd.diverging_epoch.end_offset,
                ),
                None => {
                    let records = pd.records.unwrap_or_default();
                    f.replica
                        .append_as_follower(epoch, whole_entries(&records), pd.high_watermark)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
                Some(E::OffsetOutOfRange) => out_of_range(&f.replica, epoch, &pd),
                Some(e) => Err(format!("the leader answered {e:?}")),
            };
            if let Err(e) = outcome {
                tracing::debug!(partition = %tp, "following: {e}");
                retry.push(tp);
            }
        }
    }
    retry
}

/// The leader says this replica's log diverged from its own after `leader_end` of
/// `leader_epoch_of_divergence`: truncate to where both agree (Kafka's
/// `getTruncationOffsetAndEpoch`). If this replica's largest epoch at or below the
/// leader's is another one, its end is where they agree so far; the next fetch checks
/// again from there.
fn diverged(
    replica: &Partition,
    epoch: i32,
    diverging_epoch: i32,
    leader_end: i64,
) -> Result<(), String> {
    let (ours, our_end) = {
        let log = replica.lock_log().map_err(|e| e.to_string())?;
        log.leader_epochs()
            .end_offset_for(diverging_epoch, log.log_end_offset())
    };
    let to = if ours == diverging_epoch {
        leader_end.min(our_end)
    } else if ours >= 0 {
        our_end
    } else {
        leader_end
    };
    tracing::info!(
        partition = %replica.tp,
        to,
        diverging_epoch,
        "truncating: this replica's log diverged from its leader's"
    );
    replica
        .truncate_as_follower(epoch, Truncation::To(to))
        .map_err(|e| e.to_string())
}

/// The leader has no records at this replica's log end: it is past the leader's (then
/// it goes back to the leader's high watermark, which every in-sync replica has), or
/// before the leader's log start (then it starts again there, empty).
fn out_of_range(
    replica: &Partition,
    epoch: i32,
    pd: &kafka_protocol::messages::fetch_response::PartitionData,
) -> Result<(), String> {
    let leo = replica
        .lock_log()
        .map_err(|e| e.to_string())?
        .log_end_offset();
    let to = if pd.log_start_offset >= 0 && leo < pd.log_start_offset {
        Truncation::StartAt(pd.log_start_offset)
    } else if pd.high_watermark >= 0 && leo > pd.high_watermark {
        Truncation::To(pd.high_watermark)
    } else {
        return Err(format!(
            "offset {leo} is out of range on the leader (log start {}, high watermark {})",
            pd.log_start_offset, pd.high_watermark
        ));
    };
    tracing::info!(partition = %replica.tp, ?to, "the leader's log does not hold this replica's end");
    replica
        .truncate_as_follower(epoch, to)
        .map_err(|e| e.to_string())
}

/// The whole entries at the start of `records`: a fetch answer may end with part of one
/// (the leader cut it at the byte limit), which the next fetch brings whole.
fn whole_entries(records: &Bytes) -> &[u8] {
    let mut end = 0;
    while let Some((_, size)) = weir_record::entry::peek_offset_and_size(&records[end..]) {
        if end + size > records.len() {
            break;
        }
        end += size;
    }
    &records[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_spread_partitions_and_stay_in_range() {
        let n = 3;
        let shards: std::collections::BTreeSet<usize> = (0..30)
            .map(|p| shard_of(&TopicPartition::new("t".to_string(), p), n))
            .collect();
        assert_eq!(shards.len(), n);
        assert!(shards.iter().all(|s| *s < n));
        assert_eq!(shard_of(&TopicPartition::new("t".to_string(), 7), 1), 0);
    }

    #[test]
    fn a_partial_entry_at_the_end_is_left_for_the_next_fetch() {
        let mut buf = Vec::new();
        // Two "entries" of 12 + 4 bytes each (offset, length 4, four bytes), then half of one.
        for o in 0..2i64 {
            buf.extend_from_slice(&o.to_be_bytes());
            buf.extend_from_slice(&4i32.to_be_bytes());
            buf.extend_from_slice(&[0; 4]);
        }
        buf.extend_from_slice(&2i64.to_be_bytes());
        buf.extend_from_slice(&4i32.to_be_bytes());
        let b = Bytes::from(buf);
        assert_eq!(whole_entries(&b).len(), 32);
        assert_eq!(whole_entries(&Bytes::new()).len(), 0);
    }
}
