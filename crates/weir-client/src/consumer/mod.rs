//! The consumer, as Kafka's Java client builds it: `subscribe` to topics and let the group
//! assign partitions (the classic protocol, or KIP-848's with `group.protocol=consumer`),
//! or `assign` partitions by hand; `poll` hands out records in offset order per partition
//! while fetches for the next ones are already in flight; positions come from the group's
//! committed offsets or `auto.offset.reset`; offsets are committed by hand or every
//! `auto.commit.interval.ms`.
//!
//! Structure: the [`Consumer`] is the public API and owns the state; the work behind the
//! API lives beside it, and is lent the subscription state to do it: the group's side
//! (`coordinator`: joining, rebalancing with the listener's callbacks, commits; it talks
//! through `group` for the classic protocol and `membership` for KIP-848's), fetching
//! (`fetcher`), and where each partition starts (`positions`). Background tasks (one fetch
//! per broker, position lookups, metadata refreshes, rebalance rounds, heartbeats,
//! auto-commits) do the I/O and report through one channel that `poll` drains. No task
//! touches the consumer's state, so nothing is locked on the record path.
//!
//! - [`config`]: `ConsumerConfig` (Kafka's keys and defaults).
//! - [`record`]: `ConsumerRecord`, `TopicPartition`, `OffsetAndMetadata`.
//! - [`assignor`]: range, round-robin and cooperative-sticky assignors; the consumer
//!   protocol's subscription/assignment bytes.
//! - [`listener`]: `RebalanceListener`, told of partitions revoked, assigned and lost.

pub mod assignor;
pub mod config;
mod coordinator;
mod decode;
mod fetcher;
mod group;
pub mod listener;
mod membership;
mod offsets;
mod positions;
pub mod record;
mod sticky;
mod subscription;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tracing::debug;

use crate::cluster::{Cluster, Metadata};
use crate::error::{ClientError, Result};
use coordinator::ConsumerCoordinator;
use fetcher::{FetchDone, Fetcher};
use group::RoundOutcome;
use positions::{PositionLookups, PositionResult};
use subscription::{FetchState, Mode, ResetTo, SubscriptionState};

pub use assignor::{
    CooperativeStickyAssignor, MemberSubscription, PartitionAssignor, RangeAssignor,
    RoundRobinAssignor,
};
pub use config::{
    AssignmentStrategy, AutoOffsetReset, ConsumerConfig, GroupProtocol, IsolationLevel,
    RebalanceProtocol,
};
pub use listener::{RebalanceContext, RebalanceListener};
pub use record::{ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TimestampType};
use weir_kafka::TopicPartition;

/// How long to wait before asking again for the metadata of a topic the broker says does
/// not exist (a subscribed topic may be created at any time).
const MISSING_TOPIC_BACKOFF: Duration = Duration::from_millis(500);

/// Kafka's default `close()` timeout.
const DEFAULT_CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// What background tasks report to the consumer.
#[derive(Debug)]
pub(crate) enum Event {
    Fetch(FetchDone),
    Positions(Vec<PositionResult>),
    Metadata(Result<()>),
    Rebalance(RoundOutcome),
    Committed {
        offsets: HashMap<TopicPartition, OffsetAndMetadata>,
        result: Result<()>,
    },
    /// Something changed in the group (a rejoin is needed, an error arrived): look again.
    Wake,
}

struct MetaView {
    snapshot: Metadata,
    refreshed_at: Option<Instant>,
    wanted: bool,
    in_flight: bool,
    not_before: Instant,
}

/// A Kafka consumer. Not `Clone`: like Kafka's, one consumer is driven by one task; it is
/// `Send`, so that task may be any.
pub struct Consumer {
    cfg: Arc<ConsumerConfig>,
    cluster: Arc<Cluster>,
    subs: SubscriptionState,
    fetcher: Fetcher,
    events_tx: UnboundedSender<Event>,
    events_rx: UnboundedReceiver<Event>,
    /// The group's side of things, with a `group.id`.
    group: Option<ConsumerCoordinator>,
    meta: MetaView,
    positions: PositionLookups,
    /// Rebalance outcomes that arrived while `position()` waited: they are applied by the
    /// next `poll`, because applying one commits and revokes partitions, and only `poll`
    /// may do that (the application may not have processed what poll returned yet).
    deferred_rounds: VecDeque<RoundOutcome>,
    in_position: bool,
}

/// The outcome of `commit_async`. The commit goes ahead whether or not this is awaited.
pub struct CommitFuture {
    inner: CommitInner,
}

enum CommitInner {
    Ready(Option<Result<()>>),
    Task(JoinHandle<Result<()>>),
}

impl Future for CommitFuture {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match &mut self.inner {
            CommitInner::Ready(r) => Poll::Ready(r.take().unwrap_or(Ok(()))),
            CommitInner::Task(handle) => Pin::new(handle).poll(cx).map(|r| {
                r.unwrap_or_else(|e| {
                    Err(ClientError::Protocol(format!(
                        "the commit task failed: {e}"
                    )))
                })
            }),
        }
    }
}

/// Now plus `timeout`, or far in the future for a timeout too large to add (Java's
/// `poll(Long.MAX_VALUE)` idiom is `poll(Duration::MAX)` here).
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

fn no_group() -> ClientError {
    ClientError::Config("committed offsets live in a group: set group.id".into())
}

impl Consumer {
    /// A consumer with these settings. Connects lazily: nothing happens on the network until
    /// the first call that needs it.
    pub fn new(cfg: ConsumerConfig) -> Result<Consumer> {
        let cluster = Cluster::new(cfg.cluster.clone())?;
        let cfg = Arc::new(cfg);
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let now = Instant::now();
        let group = cfg.group_id.clone().map(|group_id| {
            ConsumerCoordinator::new(group_id, cfg.clone(), cluster.clone(), events_tx.clone())
        });
        Ok(Consumer {
            cfg,
            cluster,
            subs: SubscriptionState::default(),
            fetcher: Fetcher::default(),
            events_tx,
            events_rx,
            group,
            meta: MetaView {
                snapshot: Metadata::default(),
                refreshed_at: None,
                wanted: false,
                in_flight: false,
                not_before: now,
            },
            positions: PositionLookups::default(),
            deferred_rounds: VecDeque::new(),
            in_position: false,
        })
    }

    /// A consumer from Kafka's key=value settings, e.g.
    /// `[("bootstrap.servers", "localhost:9092"), ("group.id", "g")]`.
    pub fn from_properties<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Consumer> {
        Self::new(ConsumerConfig::from_properties(pairs)?)
    }

    pub fn config(&self) -> &ConsumerConfig {
        &self.cfg
    }

    // ---- subscription and assignment ----

    /// Subscribes to `topics` (replacing any earlier subscription): the group assigns their
    /// partitions, in the next `poll`s. Needs a `group.id`; excludes `assign`.
    pub fn subscribe<I, S>(
        &mut self,
        topics: I,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let Some(g) = self.group.as_mut() else {
            return Err(ClientError::Config(
                "subscribe() needs a group.id (or use assign() for partitions of your choice)"
                    .into(),
            ));
        };
        if self.subs.mode == Mode::Manual {
            return Err(ClientError::Config(
                "subscribe() and assign() cannot be mixed: call unsubscribe() first".into(),
            ));
        }
        let topics: BTreeSet<String> = topics.into_iter().map(Into::into).collect();
        if topics.is_empty() {
            return Err(ClientError::Config(
                "subscribe() needs at least one topic (unsubscribe() stops consuming)".into(),
            ));
        }
        if let Some(bad) = topics.iter().find(|t| t.trim().is_empty()) {
            return Err(ClientError::Config(format!("invalid topic name '{bad}'")));
        }
        let changed = self.subs.mode != Mode::Subscribed(topics.clone());
        g.subscribe(&topics, changed, listener);
        self.subs.mode = Mode::Subscribed(topics);
        if changed {
            self.meta.wanted = true;
        }
        Ok(())
    }

    /// The subscribed topics.
    pub fn subscription(&self) -> BTreeSet<String> {
        self.subs.subscribed_topics()
    }

    /// Assigns partitions by hand (replacing any earlier assignment); no group membership.
    /// With a `group.id`, committed offsets still apply and commits are allowed. An empty
    /// set unassigns everything.
    pub fn assign(&mut self, partitions: impl IntoIterator<Item = TopicPartition>) -> Result<()> {
        if matches!(self.subs.mode, Mode::Subscribed(_)) {
            return Err(ClientError::Config(
                "assign() and subscribe() cannot be mixed: call unsubscribe() first".into(),
            ));
        }
        let new: BTreeSet<TopicPartition> = partitions.into_iter().collect();
        if let Some(bad) = new
            .iter()
            .find(|tp| tp.topic.trim().is_empty() || tp.partition < 0)
        {
            return Err(ClientError::Config(format!("invalid partition '{bad}'")));
        }
        if let Some(g) = &self.group {
            let gone: Vec<TopicPartition> = self
                .subs
                .assignment()
                .into_iter()
                .filter(|tp| !new.contains(tp))
                .collect();
            g.commit_given_up(&self.subs, &gone);
        }
        if new.is_empty() {
            self.subs.clear();
            self.subs.mode = Mode::None;
            return Ok(());
        }
        self.subs.set_assignment(&new);
        self.subs.mode = Mode::Manual;
        Ok(())
    }

    /// The partitions assigned now (by `assign`, or by the group).
    pub fn assignment(&self) -> BTreeSet<TopicPartition> {
        self.subs.assignment()
    }

    /// Stops consuming: with a group, commits (auto-commit), revokes the partitions through
    /// the listener and leaves the group.
    pub async fn unsubscribe(&mut self) -> Result<()> {
        let result = self.leave("the consumer unsubscribed").await;
        self.subs.clear();
        self.subs.mode = Mode::None;
        result
    }

    // ---- polling ----

    /// Records fetched since the last call, at most `max.poll.records`, in offset order per
    /// partition; waits up to `timeout` for some (an empty result is not an error). Also
    /// where the group is joined and rebalances happen (and their callbacks run), positions
    /// are looked up, and offsets are auto-committed.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        if self.subs.mode == Mode::None {
            return Err(ClientError::Config(
                "poll() needs subscribe() or assign() first".into(),
            ));
        }
        let deadline = deadline_after(timeout);
        loop {
            if let Some(g) = &self.group {
                g.note_poll();
            }
            while let Some(outcome) = self.deferred_rounds.pop_front() {
                self.on_round(outcome).await?;
            }
            self.drain_events().await?;
            if let Some(e) = self.group.as_mut().and_then(|g| g.take_error()) {
                return Err(e);
            }
            self.maintain().await?;
            let records = self.subs.drain(self.cfg.max_poll_records)?;
            // Fetch ahead while the application works on these.
            self.send_fetches();
            if !records.is_empty() {
                return Ok(records);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            self.wait_event(self.next_wake(now, deadline)).await?;
        }
    }

    async fn wait_event(&mut self, until: Instant) -> Result<()> {
        let ev = tokio::select! {
            ev = self.events_rx.recv() => ev,
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => None,
        };
        if let Some(ev) = ev {
            self.handle_event(ev).await?;
        }
        Ok(())
    }

    async fn drain_events(&mut self) -> Result<()> {
        while let Ok(ev) = self.events_rx.try_recv() {
            self.handle_event(ev).await?;
        }
        Ok(())
    }

    async fn handle_event(&mut self, ev: Event) -> Result<()> {
        match ev {
            Event::Fetch(done) => self.on_fetch(done),
            Event::Positions(results) => self.on_positions(results),
            Event::Metadata(result) => self.on_metadata(result),
            Event::Rebalance(outcome) if self.in_position => {
                self.deferred_rounds.push_back(outcome)
            }
            Event::Rebalance(outcome) => self.on_round(outcome).await?,
            Event::Committed { offsets, result } => {
                if let Some(g) = &mut self.group {
                    g.on_auto_commit(offsets, result);
                }
            }
            Event::Wake => {}
        }
        Ok(())
    }

    /// Everything `poll` does besides handing out records.
    async fn maintain(&mut self) -> Result<()> {
        self.maybe_refresh_metadata(Instant::now());
        if let Some(g) = &mut self.group {
            if matches!(self.subs.mode, Mode::Subscribed(_)) {
                g.maintain(&mut self.subs, Instant::now()).await?;
            }
            g.maybe_auto_commit(&self.subs, Instant::now());
        }
        self.maybe_resolve_positions(Instant::now());
        Ok(())
    }

    /// The next instant something is due (only instants in the future count: anything due
    /// now has just been done, or waits for an event).
    fn next_wake(&self, now: Instant, deadline: Instant) -> Instant {
        let mut candidates: Vec<Instant> = vec![deadline];
        if let Some(g) = &self.group {
            candidates.extend(g.next_due(&self.subs.mode));
        }
        if !self.meta.in_flight {
            candidates.push(self.meta.not_before);
            if let Some(t) = self.meta.refreshed_at {
                candidates.push(t + self.cfg.metadata_max_age);
            }
        }
        for ps in self.subs.assigned.values() {
            candidates.extend(ps.retry_at);
            candidates.extend(ps.fetch_after);
        }
        candidates.extend(self.fetcher.next_retry());
        candidates
            .into_iter()
            .filter(|t| *t > now)
            .min()
            .unwrap_or(deadline)
            .min(deadline)
    }

    // ---- fetching ----

    fn send_fetches(&mut self) {
        let now = Instant::now();
        let (plans, leader_unknown) =
            self.fetcher
                .plan(&mut self.subs, &self.meta.snapshot, &self.cfg, now);
        if leader_unknown {
            self.meta.wanted = true;
            self.maybe_refresh_metadata(now);
        }
        for (node, parts) in plans {
            fetcher::spawn_fetch(
                self.cluster.clone(),
                self.cfg.clone(),
                node,
                parts,
                self.events_tx.clone(),
            );
        }
    }

    fn on_fetch(&mut self, done: FetchDone) {
        if self.fetcher.complete(&mut self.subs, done, &self.cfg) {
            self.meta.wanted = true;
        }
    }

    // ---- positions ----

    fn maybe_resolve_positions(&mut self, now: Instant) {
        if let Some(jobs) = self.positions.due(&mut self.subs, now) {
            let shared = self.group.as_ref().map(|g| g.shared().clone());
            positions::spawn_lookup(
                self.cluster.clone(),
                self.cfg.clone(),
                shared,
                jobs,
                self.events_tx.clone(),
            );
        }
    }

    fn on_positions(&mut self, results: Vec<PositionResult>) {
        let backoff = self.cfg.cluster.retry_backoff;
        if self.positions.complete(&mut self.subs, results, backoff) {
            self.meta.wanted = true;
        }
    }

    // ---- metadata ----

    fn wanted_topics(&self) -> BTreeSet<String> {
        let mut topics = self.subs.subscribed_topics();
        topics.extend(self.subs.assigned.keys().map(|tp| tp.topic.to_string()));
        if let Some(g) = &self.group {
            topics.extend(g.group_topics().cloned());
        }
        topics
    }

    fn maybe_refresh_metadata(&mut self, now: Instant) {
        if self.meta.in_flight || now < self.meta.not_before {
            return;
        }
        let topics = self.wanted_topics();
        if topics.is_empty() {
            return;
        }
        let missing = topics
            .iter()
            .any(|t| !self.meta.snapshot.topics.contains_key(t));
        let old = self
            .meta
            .refreshed_at
            .is_none_or(|t| now.duration_since(t) >= self.cfg.metadata_max_age);
        if !(self.meta.wanted || missing || old) {
            return;
        }
        self.meta.in_flight = true;
        let cluster = self.cluster.clone();
        let auto_create = self.cfg.allow_auto_create_topics;
        let events = self.events_tx.clone();
        let topics: Vec<String> = topics.into_iter().collect();
        tokio::spawn(async move {
            let result = cluster
                .refresh(Some(&topics), auto_create)
                .await
                .map(|_| ());
            let _ = events.send(Event::Metadata(result));
        });
    }

    fn on_metadata(&mut self, result: Result<()>) {
        let now = Instant::now();
        self.meta.in_flight = false;
        match result {
            Ok(()) => {
                self.meta.snapshot = self.cluster.metadata();
                self.meta.refreshed_at = Some(now);
                self.meta.wanted = false;
                // Leaders may have moved: brokers that failed may be the wrong ones.
                self.fetcher.forget();
                let missing = self
                    .wanted_topics()
                    .iter()
                    .any(|t| !self.meta.snapshot.topics.contains_key(t));
                self.meta.not_before = now
                    + if missing {
                        MISSING_TOPIC_BACKOFF
                    } else {
                        self.cfg.cluster.retry_backoff
                    };
                if let Some(g) = &mut self.group {
                    g.check_partition_counts(&self.meta.snapshot);
                }
            }
            Err(e) => {
                debug!("metadata refresh failed: {e}");
                self.meta.not_before = now + self.cfg.cluster.retry_backoff;
            }
        }
    }

    // ---- the group ----

    /// A join round ended: the coordinator takes the assignment; the metadata of topics
    /// new to this consumer is fetched.
    async fn on_round(&mut self, outcome: RoundOutcome) -> Result<()> {
        let Some(g) = &mut self.group else {
            return Ok(());
        };
        let added = g.on_round(&mut self.subs, outcome).await?;
        self.meta.wanted |= added
            .iter()
            .any(|tp| !self.meta.snapshot.topics.contains_key(&*tp.topic));
        Ok(())
    }

    /// Leaves the group (or, with manual assignment, just commits), as `close` and
    /// `unsubscribe` do.
    async fn leave(&mut self, reason: &str) -> Result<()> {
        match &mut self.group {
            Some(g) => g.leave(&mut self.subs, reason).await,
            // Offsets live in a group: auto-commit (which from_properties refuses without a
            // group.id) has nowhere to go.
            None if self.cfg.enable_auto_commit && self.subs.mode == Mode::Manual => {
                Err(no_group())
            }
            None => Ok(()),
        }
    }

    // ---- positions and seeking ----

    /// Sets the offset the next `poll` starts `tp` from.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        self.subs.seek(tp, offset)
    }

    /// Moves to the first offset of each partition (all assigned ones if `tps` is empty),
    /// looked up by the next `poll` or `position`.
    pub fn seek_to_beginning(&mut self, tps: &[TopicPartition]) -> Result<()> {
        self.reset_all(tps, ResetTo::Earliest)
    }

    /// Moves to the end of each partition (all assigned ones if `tps` is empty): only
    /// records produced from now on are read.
    pub fn seek_to_end(&mut self, tps: &[TopicPartition]) -> Result<()> {
        self.reset_all(tps, ResetTo::Latest)
    }

    fn reset_all(&mut self, tps: &[TopicPartition], to: ResetTo) -> Result<()> {
        let tps: Vec<TopicPartition> = if tps.is_empty() {
            self.subs.assignment().into_iter().collect()
        } else {
            tps.to_vec()
        };
        tps.iter()
            .try_for_each(|tp| self.subs.request_reset(tp, to))
    }

    /// The offset of the next record `poll` hands out for `tp`, looking it up (committed
    /// offset, else `auto.offset.reset`) if needed, within `default.api.timeout.ms`.
    pub async fn position(&mut self, tp: &TopicPartition) -> Result<i64> {
        self.in_position = true;
        let result = self.position_inner(tp).await;
        self.in_position = false;
        result
    }

    async fn position_inner(&mut self, tp: &TopicPartition) -> Result<i64> {
        if !self.subs.is_assigned(tp) {
            return Err(ClientError::Config(format!(
                "position(): partition {tp} is not assigned to this consumer"
            )));
        }
        let timeout = self.cfg.default_api_timeout;
        let deadline = deadline_after(timeout);
        loop {
            self.drain_events().await?;
            match self.subs.assigned.get(tp) {
                None => {
                    return Err(ClientError::Config(format!(
                        "position(): partition {tp} was revoked"
                    )))
                }
                Some(ps) if ps.state == FetchState::Fetching => return Ok(ps.position),
                Some(_) => {}
            }
            if let Some(e) = self.subs.take_error(tp) {
                return Err(e);
            }
            let now = Instant::now();
            self.maybe_refresh_metadata(now);
            self.maybe_resolve_positions(now);
            if now >= deadline {
                return Err(ClientError::Timeout {
                    what: format!("looking up the position of {tp}"),
                    ms: timeout.as_millis() as u64,
                });
            }
            self.wait_event(self.next_wake(now, deadline)).await?;
        }
    }

    /// Stops fetching these partitions (records already fetched are kept for `resume`).
    pub fn pause(&mut self, tps: &[TopicPartition]) -> Result<()> {
        self.set_paused(tps, true)
    }

    pub fn resume(&mut self, tps: &[TopicPartition]) -> Result<()> {
        self.set_paused(tps, false)
    }

    pub fn paused(&self) -> BTreeSet<TopicPartition> {
        self.subs
            .assigned
            .iter()
            .filter(|(_, ps)| ps.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    fn set_paused(&mut self, tps: &[TopicPartition], paused: bool) -> Result<()> {
        if let Some(tp) = tps.iter().find(|tp| !self.subs.is_assigned(tp)) {
            return Err(ClientError::Config(format!(
                "partition {tp} is not assigned to this consumer"
            )));
        }
        for tp in tps {
            if let Some(ps) = self.subs.assigned.get_mut(tp) {
                ps.paused = paused;
            }
        }
        Ok(())
    }

    /// How far `tp` is behind its end (high watermark, or last stable offset under
    /// read_committed), as of the last fetch; `None` until known.
    pub fn current_lag(&self, tp: &TopicPartition) -> Option<i64> {
        let ps = self.subs.assigned.get(tp)?;
        if ps.state != FetchState::Fetching {
            return None;
        }
        let end = match self.cfg.isolation_level {
            IsolationLevel::ReadCommitted => ps.last_stable_offset,
            IsolationLevel::ReadUncommitted => ps.high_watermark,
        };
        (end >= 0).then(|| (end - ps.position).max(0))
    }

    // ---- offsets of the log ----

    /// For each partition, the first offset whose timestamp is at or after the given time,
    /// with that record's timestamp; `None` if there is no such record.
    pub async fn offsets_for_times(
        &self,
        times: HashMap<TopicPartition, i64>,
    ) -> Result<HashMap<TopicPartition, Option<OffsetAndTimestamp>>> {
        if let Some((tp, ts)) = times.iter().find(|(_, ts)| **ts < 0) {
            return Err(ClientError::Config(format!(
                "offsets_for_times: the target time for {tp} is {ts}; it cannot be negative"
            )));
        }
        let query: BTreeMap<TopicPartition, i64> = times.into_iter().collect();
        let found = self.list_offsets(&query).await?;
        Ok(query
            .into_keys()
            .map(|tp| {
                let hit = found
                    .get(&tp)
                    .filter(|l| l.offset >= 0)
                    .map(|l| OffsetAndTimestamp {
                        offset: l.offset,
                        timestamp: l.timestamp,
                        leader_epoch: l.leader_epoch,
                    });
                (tp, hit)
            })
            .collect())
    }

    /// The first offset of each partition (the log start offset).
    pub async fn beginning_offsets(
        &self,
        tps: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i64>> {
        self.special_offsets(tps, ResetTo::Earliest).await
    }

    /// The end of each partition: the offset the next record produced will get (the last
    /// stable offset under read_committed).
    pub async fn end_offsets(
        &self,
        tps: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i64>> {
        self.special_offsets(tps, ResetTo::Latest).await
    }

    /// ListOffsets within `default.api.timeout.ms`.
    async fn list_offsets(
        &self,
        query: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, offsets::ListedOffset>> {
        let timeout = self.cfg.default_api_timeout;
        offsets::list_offsets(&self.cluster, &self.cfg, query, timeout).await
    }

    async fn special_offsets(
        &self,
        tps: &[TopicPartition],
        to: ResetTo,
    ) -> Result<HashMap<TopicPartition, i64>> {
        let query: BTreeMap<TopicPartition, i64> =
            tps.iter().map(|tp| (tp.clone(), to.timestamp())).collect();
        let found = self.list_offsets(&query).await?;
        Ok(found.into_iter().map(|(tp, l)| (tp, l.offset)).collect())
    }

    /// The partitions of a topic (an error if it does not exist and is not created by the
    /// broker under `allow.auto.create.topics`).
    pub async fn partitions_for(&self, topic: &str) -> Result<Vec<TopicPartition>> {
        let timeout = self.cfg.default_api_timeout;
        let deadline = deadline_after(timeout);
        let names = [topic.to_string()];
        loop {
            let last = match self
                .cluster
                .refresh(Some(&names), self.cfg.allow_auto_create_topics)
                .await
            {
                Ok(m) => match (m.topics.get(topic), m.topic_errors.get(topic)) {
                    (Some(t), _) if !t.partitions.is_empty() => {
                        return Ok((0..t.partitions.len() as i32)
                            .map(|p| TopicPartition::new(topic, p))
                            .collect())
                    }
                    (_, Some(&3)) => {
                        return Err(ClientError::kafka(
                            3,
                            Some(format!("topic '{topic}' does not exist")),
                        ))
                    }
                    (_, Some(&code)) => ClientError::kafka(code, Some(format!("topic '{topic}'"))),
                    _ => ClientError::kafka(
                        5,
                        Some(format!("topic '{topic}' has no partitions yet")),
                    ),
                },
                Err(e) => e,
            };
            if !last.is_retriable() {
                return Err(last);
            }
            if Instant::now() + self.cfg.cluster.retry_backoff >= deadline {
                return Err(match last {
                    ClientError::Connection { broker, reason } => ClientError::Connection {
                        broker,
                        reason: format!(
                            "{reason} (no broker reachable within default.api.timeout.ms = {} ms)",
                            timeout.as_millis()
                        ),
                    },
                    e => ClientError::Timeout {
                        what: format!("metadata of topic '{topic}' (last error: {e})"),
                        ms: timeout.as_millis() as u64,
                    },
                });
            }
            tokio::time::sleep(self.cfg.cluster.retry_backoff).await;
        }
    }

    // ---- commits ----

    /// Commits `offsets` (each the offset of the *next* record to read), or, with `None`,
    /// the consumed positions of every assigned partition; retries until done or
    /// `default.api.timeout.ms`.
    pub async fn commit_sync(
        &mut self,
        offsets: Option<HashMap<TopicPartition, OffsetAndMetadata>>,
    ) -> Result<()> {
        let offsets = offsets.unwrap_or_else(|| self.subs.consumed());
        let g = self.group.as_mut().ok_or_else(no_group)?;
        g.commit(&self.subs, offsets, true).await
    }

    /// As `commit_sync`, in the background and with one attempt (a retriable error is
    /// reported, not retried, as Kafka's commitAsync does: a later commit carries newer
    /// offsets). Commits reach the group in the order they were made. The returned future
    /// tells the outcome. Must be called within a Tokio runtime.
    pub fn commit_async(
        &mut self,
        offsets: Option<HashMap<TopicPartition, OffsetAndMetadata>>,
    ) -> CommitFuture {
        let offsets = offsets.unwrap_or_else(|| self.subs.consumed());
        let ready = |r| CommitFuture {
            inner: CommitInner::Ready(Some(r)),
        };
        let Some(g) = &self.group else {
            return ready(Err(no_group()));
        };
        if offsets.is_empty() {
            return ready(Ok(()));
        }
        match g.commit_in_background(&self.subs, offsets) {
            Ok(task) => CommitFuture {
                inner: CommitInner::Task(task),
            },
            Err(e) => ready(Err(e)),
        }
    }

    /// The group's committed offsets of these partitions (`None` where nothing is committed).
    pub async fn committed(
        &self,
        tps: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, Option<OffsetAndMetadata>>> {
        let g = self.group.as_ref().ok_or_else(no_group)?;
        if tps.is_empty() {
            return Ok(HashMap::new());
        }
        g.committed(tps).await
    }

    /// This consumer's member id and generation in its group, once joined.
    pub fn group_member(&self) -> Option<(String, i32)> {
        self.group.as_ref()?.member()
    }

    /// What a transactional producer sends with this consumer's offsets
    /// (`Producer::send_offsets_to_transaction`): the group, and this member's id,
    /// generation and instance id, by which the coordinator refuses offsets from a
    /// consumer that a rebalance has taken partitions from. `None` without a `group.id`.
    pub fn group_metadata(&self) -> Option<crate::producer::ConsumerGroupMetadata> {
        let g = self.group.as_ref()?;
        let (generation_id, member_id) = g.shared().identity();
        Some(crate::producer::ConsumerGroupMetadata {
            group_id: g.shared().group_id.clone(),
            generation_id,
            member_id,
            group_instance_id: self.cfg.group_instance_id.clone(),
        })
    }

    // ---- closing ----

    /// Closes within Kafka's default 30 s: commits (auto-commit), revokes the partitions
    /// through the listener, leaves the group (unless a static member). The consumer is
    /// closed even if this returns an error.
    pub async fn close(self) -> Result<()> {
        self.close_with_timeout(DEFAULT_CLOSE_TIMEOUT).await
    }

    pub async fn close_with_timeout(mut self, timeout: Duration) -> Result<()> {
        match tokio::time::timeout(timeout, self.leave("the consumer is being closed")).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout {
                what: "closing the consumer".into(),
                ms: timeout.as_millis() as u64,
            }),
        }
    }
}

impl Drop for Consumer {
    /// Dropped without close(): the group's tasks stop, and the member leaves the group in
    /// the background so the others need not wait for the session to time out.
    fn drop(&mut self) {
        if let Some(g) = &mut self.group {
            g.abandon();
        }
    }
}
