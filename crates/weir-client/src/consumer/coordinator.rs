//! The consumer's side of its group, the half of Kafka's `ConsumerCoordinator` that decides
//! (`group` is the half that talks the classic protocol, `membership` KIP-848's): when to
//! join; what to give up before a rebalance and take after it, cooperatively or eagerly, or
//! as the KIP-848 coordinator's assignment says; the rebalance listener's callbacks around
//! both;
//! and the group's offsets, committed by hand, before a rebalance, on leaving and every
//! `auto.commit.interval.ms`. It changes the assignment only through the
//! `SubscriptionState` the consumer lends it, and never fetches or sends a request itself.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::config::{ConsumerConfig, GroupProtocol, RebalanceProtocol};
use super::group::{
    self, codes, CommitIdentity, CommitRetry, GroupShared, Joined, Phase, RoundOutcome, RoundParams,
};
use super::listener::{RebalanceContext, RebalanceListener};
use super::membership;
use super::record::OffsetAndMetadata;
use super::subscription::{Mode, SubscriptionState};
use super::Event;
use crate::cluster::{Cluster, Metadata};
use crate::error::{ClientError, Result};
use weir_kafka::TopicPartition;

/// Which listener callback runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Callback {
    Revoked,
    Assigned,
    Lost,
}

/// "t-0, t-1" for logs.
fn list<'a>(tps: impl IntoIterator<Item = &'a TopicPartition>) -> String {
    tps.into_iter()
        .map(|tp| tp.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The consumer's side of its group (one per consumer with a `group.id`).
pub(crate) struct ConsumerCoordinator {
    cfg: Arc<ConsumerConfig>,
    shared: Arc<GroupShared>,
    heartbeat: Option<JoinHandle<()>>,
    round: Option<JoinHandle<()>>,
    round_not_before: Instant,
    /// Rounds failed in a row (for the backoff).
    round_failures: u32,
    protocol: RebalanceProtocol,
    /// Leader only: partition counts of every member's topics when it last assigned them;
    /// a change means a new assignment is needed.
    topics_snapshot: BTreeMap<String, i32>,
    listener: Option<Box<dyn RebalanceListener>>,
    /// Offsets this consumer committed last, so auto-commit skips unchanged ones.
    last_committed: HashMap<TopicPartition, i64>,
    auto_commit_at: Instant,
    auto_commit_in_flight: bool,
    /// Errors to raise from the next `poll` (e.g. a commit a rebalance callback asked for).
    pending_errors: VecDeque<ClientError>,
    /// Consumer protocol: whether an assignment has been reconciled since the member
    /// (re)joined (the first one is announced to the listener even when empty).
    reconciled: bool,
}

impl ConsumerCoordinator {
    pub fn new(
        group_id: String,
        cfg: Arc<ConsumerConfig>,
        cluster: Arc<Cluster>,
        events: UnboundedSender<Event>,
    ) -> Self {
        let now = Instant::now();
        ConsumerCoordinator {
            shared: Arc::new(GroupShared::new(group_id, cfg.clone(), cluster, events)),
            heartbeat: None,
            round: None,
            round_not_before: now,
            round_failures: 0,
            protocol: cfg.rebalance_protocol(),
            topics_snapshot: BTreeMap::new(),
            listener: None,
            last_committed: HashMap::new(),
            auto_commit_at: now + cfg.auto_commit_interval,
            auto_commit_in_flight: false,
            pending_errors: VecDeque::new(),
            reconciled: false,
            cfg,
        }
    }

    fn consumer_protocol(&self) -> bool {
        self.cfg.group_protocol == GroupProtocol::Consumer
    }

    /// What the group's background tasks share (for OffsetFetch while positions are looked
    /// up).
    pub fn shared(&self) -> &Arc<GroupShared> {
        &self.shared
    }

    /// This consumer's member id and generation in its group, once joined.
    pub fn member(&self) -> Option<(String, i32)> {
        let (generation, member_id) = self.shared.identity();
        (!member_id.is_empty()).then_some((member_id, generation))
    }

    pub fn note_poll(&self) {
        self.shared.note_poll();
    }

    /// An error to raise from `poll`, if one is waiting.
    pub fn take_error(&mut self) -> Option<ClientError> {
        self.pending_errors.pop_front()
    }

    /// `subscribe`: the listener for the partitions to come, and a rejoin if the member is
    /// in the group and the topics changed.
    pub fn subscribe(
        &mut self,
        topics: &BTreeSet<String>,
        changed: bool,
        listener: Option<Box<dyn RebalanceListener>>,
    ) {
        self.listener = listener;
        if self.consumer_protocol() {
            // The next poll tells the heartbeat.
            return;
        }
        if changed && self.shared.lock().phase != Phase::Unjoined {
            self.shared
                .request_rejoin(format!("the subscription changed to {topics:?}"));
        }
    }

    /// The topics of every member, as the leader last assigned them (their metadata is
    /// watched for new partitions).
    pub fn group_topics(&self) -> impl Iterator<Item = &String> {
        self.topics_snapshot.keys()
    }

    /// The instants at which something of the group is due: the next join round, the next
    /// auto-commit.
    pub fn next_due(&self, mode: &Mode) -> impl Iterator<Item = Instant> {
        let auto_commit = self.cfg.enable_auto_commit && *mode != Mode::None;
        let round = self.round.is_none();
        [
            auto_commit.then_some(self.auto_commit_at),
            round.then_some(self.round_not_before),
        ]
        .into_iter()
        .flatten()
    }

    // ---- rebalancing ----

    /// Keeps the member in the group (the heartbeat task running) and starts a join round
    /// when one is needed: not joined yet, or a rejoin was asked for. Fails with an error
    /// the member cannot get past (e.g. FENCED_INSTANCE_ID).
    pub async fn maintain(&mut self, subs: &mut SubscriptionState, now: Instant) -> Result<()> {
        let (phase, rejoin, fatal) = {
            let s = self.shared.lock();
            (s.phase, s.rejoin.clone(), s.fatal.clone())
        };
        if let Some(e) = fatal {
            return Err(e);
        }
        if self.consumer_protocol() {
            self.maintain_membership(subs).await;
            return Ok(());
        }
        if self.heartbeat.as_ref().is_none_or(|h| h.is_finished()) {
            self.heartbeat = Some(tokio::spawn(group::heartbeat_loop(self.shared.clone())));
        }
        if self.round.is_some() || now < self.round_not_before {
            return Ok(());
        }
        if phase == Phase::Stable && rejoin.is_none() {
            return Ok(());
        }
        let reason = rejoin.unwrap_or_else(|| "joining the group".to_string());
        self.on_join_prepare(subs).await;
        let params = RoundParams {
            topics: subs.subscribed_topics(),
            owned: subs.assignment().into_iter().collect(),
            reason,
        };
        {
            let mut s = self.shared.lock();
            s.phase = Phase::PreparingRebalance;
            s.rejoin = None;
        }
        let shared = self.shared.clone();
        self.round = Some(tokio::spawn(async move {
            let outcome = group::run_round(shared.clone(), params).await;
            let _ = shared.events.send(Event::Rebalance(outcome));
        }));
        Ok(())
    }

    /// The consumer protocol's part of `poll`: tell the heartbeat the subscription, give up
    /// the partitions as lost if the member was fenced, reconcile the coordinator's latest
    /// assignment, and tell the heartbeat what the consumer now owns.
    async fn maintain_membership(&mut self, subs: &mut SubscriptionState) {
        let topics = subs.subscribed_topics();
        let (fenced, target) = {
            let mut s = self.shared.lock();
            (s.beat.fenced.clone(), s.beat.target.take())
        };
        let rejoin = fenced.is_some();
        if let Some(reason) = fenced {
            let owned: Vec<TopicPartition> = subs.assignment().into_iter().collect();
            if !owned.is_empty() {
                info!(group = %self.shared.group_id, owned = %list(&owned),
                    "giving up every partition as lost: {reason}");
                self.invoke(subs, Callback::Lost, &owned).await;
                subs.remove(&owned);
            }
            self.reconciled = false;
            self.shared.lock().beat.fenced = None;
        } else {
            // Partitions of topics no longer subscribed go at once; the coordinator's next
            // assignment takes them back.
            let unsubscribed: Vec<TopicPartition> = subs
                .assignment()
                .into_iter()
                .filter(|tp| !topics.contains(&*tp.topic))
                .collect();
            if !unsubscribed.is_empty() {
                self.revoke(subs, &unsubscribed).await;
            }
            if let Some(target) = target {
                self.reconcile(subs, &topics, target).await;
            }
        }
        let owned = subs.assignment();
        let tell = {
            let mut s = self.shared.lock();
            let changed = rejoin || s.beat.subscription != topics || s.beat.owned != owned;
            s.beat.subscription = topics;
            s.beat.owned = owned;
            changed
        };
        if self.heartbeat.as_ref().is_none_or(|h| h.is_finished()) {
            self.heartbeat = Some(tokio::spawn(membership::heartbeat_loop(
                self.shared.clone(),
            )));
        } else if tell {
            self.shared.beat_now.notify_one();
        }
    }

    /// Moves the consumer to the coordinator's assignment: first gives up what is no longer
    /// its own (committed first with auto-commit), then takes what is new. The coordinator
    /// only hands out partitions no other member still holds.
    async fn reconcile(
        &mut self,
        subs: &mut SubscriptionState,
        topics: &BTreeSet<String>,
        target: BTreeSet<TopicPartition>,
    ) {
        let (assigned, foreign): (BTreeSet<TopicPartition>, BTreeSet<TopicPartition>) = target
            .into_iter()
            .partition(|tp| topics.contains(&*tp.topic));
        if !foreign.is_empty() {
            // A subscription change the coordinator has not seen yet.
            debug!(foreign = %list(&foreign), "assigned partitions of topics no longer subscribed");
        }
        let owned = subs.assignment();
        let revoked: Vec<TopicPartition> = owned.difference(&assigned).cloned().collect();
        let added: Vec<TopicPartition> = assigned.difference(&owned).cloned().collect();
        if revoked.is_empty() && added.is_empty() && self.reconciled {
            return;
        }
        let epoch = self.shared.identity().0;
        info!(group = %self.shared.group_id, epoch, assigned = %list(&assigned),
            added = %list(&added), revoked = %list(&revoked), "assignment received");
        if !revoked.is_empty() {
            self.revoke(subs, &revoked).await;
        }
        subs.add(added.iter().cloned());
        self.invoke(subs, Callback::Assigned, &added).await;
        self.reconciled = true;
    }

    /// Gives up partitions the member still owns: their positions are committed
    /// (auto-commit), the listener is told, they stop being fetched.
    async fn revoke(&mut self, subs: &mut SubscriptionState, revoked: &[TopicPartition]) {
        if self.cfg.enable_auto_commit {
            if let Err(e) = self.commit_positions(subs, Some(revoked)).await {
                warn!("committing revoked partitions failed: {e}");
            }
        }
        self.invoke(subs, Callback::Revoked, revoked).await;
        subs.remove(revoked);
    }

    /// Before a JoinGroup (Kafka's `onJoinPrepare`): commit (auto-commit), then give up
    /// partitions: all of them if the generation was lost (as lost) or with the eager
    /// protocol; with the cooperative protocol only those of topics no longer subscribed.
    async fn on_join_prepare(&mut self, subs: &mut SubscriptionState) {
        let (generation, member_id) = self.shared.identity();
        let valid = generation >= 0 && !member_id.is_empty();
        if valid && self.cfg.enable_auto_commit {
            if let Err(e) = self.commit_positions(subs, None).await {
                warn!("committing offsets before the rebalance failed: {e}");
            }
        }
        let owned: Vec<TopicPartition> = subs.assignment().into_iter().collect();
        if owned.is_empty() {
            return;
        }
        if !valid {
            info!(
                owned = %list(&owned),
                "the generation was lost: giving up every partition as lost"
            );
            self.invoke(subs, Callback::Lost, &owned).await;
            subs.remove(&owned);
            return;
        }
        let revoked: Vec<TopicPartition> = match self.protocol {
            RebalanceProtocol::Eager => owned,
            RebalanceProtocol::Cooperative => {
                let topics = subs.subscribed_topics();
                owned
                    .into_iter()
                    .filter(|tp| !topics.contains(&*tp.topic))
                    .collect()
            }
        };
        if !revoked.is_empty() {
            info!(revoked = %list(&revoked), "revoking partitions before rejoining");
            self.invoke(subs, Callback::Revoked, &revoked).await;
            subs.remove(&revoked);
        }
    }

    /// A join round ended: take its assignment, or back off and try again. Returns the
    /// partitions newly assigned.
    pub async fn on_round(
        &mut self,
        subs: &mut SubscriptionState,
        outcome: RoundOutcome,
    ) -> Result<Vec<TopicPartition>> {
        self.round = None;
        if !matches!(subs.mode, Mode::Subscribed(_)) {
            return Ok(Vec::new());
        }
        let (error, backoff, fatal) = match outcome {
            RoundOutcome::Joined(j) => return self.on_join_complete(subs, j).await,
            RoundOutcome::Retry { error, backoff } => (error, backoff, false),
            RoundOutcome::Fatal(error) => (error, true, true),
        };
        {
            let mut s = self.shared.lock();
            if s.phase != Phase::Stable {
                s.phase = Phase::Unjoined;
            }
            if s.rejoin.is_none() {
                s.rejoin = Some(format!("retrying after: {error}"));
            }
        }
        if backoff {
            // retry.backoff.ms, doubling with each failed round up to retry.backoff.max.ms.
            self.round_failures = self.round_failures.saturating_add(1);
            let factor = 1u32 << self.round_failures.min(10).saturating_sub(1);
            let wait = (self.cfg.cluster.retry_backoff * factor).min(self.cfg.retry_backoff_max);
            self.round_not_before = Instant::now() + wait;
        }
        if fatal {
            warn!(group = %self.shared.group_id, "joining the group failed: {error}");
            return Err(error);
        }
        debug!(group = %self.shared.group_id, "rebalance round ended early: {error}");
        Ok(Vec::new())
    }

    /// After SyncGroup (Kafka's `onJoinComplete`): take the new assignment. Cooperative
    /// members revoke what moved away (committing it first) and rejoin so that it can be
    /// handed over. Returns the partitions newly assigned.
    async fn on_join_complete(
        &mut self,
        subs: &mut SubscriptionState,
        j: Joined,
    ) -> Result<Vec<TopicPartition>> {
        {
            let s = self.shared.lock();
            if s.generation != j.generation
                || s.member_id != j.member_id
                || s.phase != Phase::Stable
            {
                debug!(
                    "dropping the assignment of generation {}: superseded",
                    j.generation
                );
                return Ok(Vec::new());
            }
        }
        let shared = self.shared.clone();
        self.round_failures = 0;
        self.topics_snapshot = j.group_topics;
        let topics = subs.subscribed_topics();
        let (assigned, foreign): (BTreeSet<TopicPartition>, BTreeSet<TopicPartition>) = j
            .assignment
            .into_iter()
            .partition(|tp| topics.contains(&*tp.topic));
        if !foreign.is_empty() {
            warn!(
                foreign = %list(&foreign),
                "the assignment names topics this consumer did not subscribe to; rejoining"
            );
            shared.request_rejoin("the assignment did not match the subscription");
        }
        let owned = subs.assignment();
        let revoked: Vec<TopicPartition> = owned.difference(&assigned).cloned().collect();
        let added: Vec<TopicPartition> = assigned.difference(&owned).cloned().collect();
        info!(group = %shared.group_id, generation = j.generation, protocol = %j.protocol,
            assigned = %list(&assigned), added = %list(&added), revoked = %list(&revoked),
            "assignment received");
        if !revoked.is_empty() {
            self.revoke(subs, &revoked).await;
            if self.protocol == RebalanceProtocol::Cooperative {
                shared.request_rejoin("partitions were revoked and must be reassigned");
            }
        }
        subs.add(added.iter().cloned());
        self.invoke(subs, Callback::Assigned, &added).await;
        Ok(added)
    }

    /// The leader rejoins when a topic of the group gains partitions (or appears).
    pub fn check_partition_counts(&mut self, snapshot: &Metadata) {
        if self.topics_snapshot.is_empty() || self.shared.lock().phase != Phase::Stable {
            return;
        }
        for (topic, &before) in &self.topics_snapshot {
            let now = match snapshot.topics.get(topic) {
                Some(t) => t.partitions.len() as i32,
                // Known not to exist (as opposed to a transient error).
                None if snapshot.topic_errors.get(topic) == Some(&3) => 0,
                None => continue,
            };
            if now != before {
                info!(%topic, before, now, "the partitions of a subscribed topic changed: rebalancing");
                self.shared.request_rejoin(format!(
                    "topic '{topic}' now has {now} partitions (was {before})"
                ));
                self.topics_snapshot.clear();
                return;
            }
        }
    }

    /// Runs a listener callback; commits it asked for are made right after.
    async fn invoke(
        &mut self,
        subs: &mut SubscriptionState,
        kind: Callback,
        partitions: &[TopicPartition],
    ) {
        let Some(mut listener) = self.listener.take() else {
            return;
        };
        let commits = {
            let mut ctx = RebalanceContext::new(subs);
            match kind {
                Callback::Revoked => listener.on_partitions_revoked(&mut ctx, partitions),
                Callback::Assigned => listener.on_partitions_assigned(&mut ctx, partitions),
                Callback::Lost => listener.on_partitions_lost(&mut ctx, partitions),
            }
            ctx.into_commits()
        };
        self.listener = Some(listener);
        if commits.is_empty() {
            return;
        }
        let result = if kind == Callback::Lost {
            Err(ClientError::kafka(
                codes::UNKNOWN_MEMBER_ID,
                Some(
                    "cannot commit offsets of lost partitions: this consumer left the generation"
                        .into(),
                ),
            ))
        } else {
            self.commit(subs, commits, false).await
        };
        if let Err(e) = result {
            self.pending_errors.push_back(e);
        }
    }

    /// Leaves the group (or, with manual assignment, just commits): commit (auto-commit),
    /// revoke (or lose) the partitions, LeaveGroup. The first error is returned; the rest
    /// goes ahead regardless.
    pub async fn leave(&mut self, subs: &mut SubscriptionState, reason: &str) -> Result<()> {
        let mut first_error = None;
        let auto_commit = self.cfg.enable_auto_commit;
        match subs.mode.clone() {
            Mode::Subscribed(_) => {
                if let Some(round) = self.round.take() {
                    round.abort();
                }
                if let Some(h) = self.heartbeat.take() {
                    h.abort();
                }
                let shared = self.shared.clone();
                let (generation, member_id, phase) = {
                    let s = shared.lock();
                    (s.generation, s.member_id.clone(), s.phase)
                };
                let valid = generation >= 0 && !member_id.is_empty();
                if valid && auto_commit {
                    if let Err(e) = self.commit_positions(subs, None).await {
                        warn!("committing offsets on leaving the group failed: {e}");
                        first_error = Some(e);
                    }
                }
                let owned: Vec<TopicPartition> = subs.assignment().into_iter().collect();
                if !owned.is_empty() {
                    let kind = if valid && phase != Phase::Unjoined {
                        Callback::Revoked
                    } else {
                        Callback::Lost
                    };
                    self.invoke(subs, kind, &owned).await;
                    subs.remove(&owned);
                }
                if self.consumer_protocol() {
                    membership::leave_group(&shared, reason).await;
                    self.reconciled = false;
                } else {
                    group::leave_group(&shared, reason).await;
                }
                self.topics_snapshot.clear();
            }
            Mode::Manual => {
                if auto_commit {
                    if let Err(e) = self.commit_positions(subs, None).await {
                        warn!("committing offsets failed: {e}");
                        first_error = Some(e);
                    }
                }
            }
            Mode::None => {}
        }
        if let Some(e) = self.pending_errors.pop_front() {
            first_error.get_or_insert(e);
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Dropped without close(): stop the group's tasks, and leave the group in the
    /// background so the others need not wait for the session to time out.
    pub fn abandon(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        if let Some(r) = self.round.take() {
            r.abort();
        }
        let member = self.shared.lock().member_id.clone();
        let consumer_protocol = self.consumer_protocol();
        // A static member of the consumer protocol says it leaves for now (epoch -2).
        if !member.is_empty() && (consumer_protocol || self.cfg.group_instance_id.is_none()) {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let shared = self.shared.clone();
                rt.spawn(async move {
                    let reason = "the consumer was dropped without close()";
                    if consumer_protocol {
                        membership::leave_group(&shared, reason).await;
                    } else {
                        group::leave_group(&shared, reason).await;
                    }
                });
            }
        }
    }

    // ---- the group's offsets ----

    /// The group's committed offsets of these partitions (`None` where nothing is
    /// committed).
    pub async fn committed(
        &self,
        tps: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, Option<OffsetAndMetadata>>> {
        group::fetch_committed(&self.shared, tps, self.cfg.default_api_timeout).await
    }

    /// Who commits: a subscribed consumer as a member of its generation (`strict`: only when
    /// stable, as Kafka requires of application commits); otherwise outside group management.
    fn commit_identity(&self, subs: &SubscriptionState, strict: bool) -> Result<CommitIdentity> {
        if !matches!(subs.mode, Mode::Subscribed(_)) {
            return Ok(CommitIdentity::standalone());
        }
        if strict {
            return group::member_commit_identity(&self.shared);
        }
        let (generation, member_id) = self.shared.identity();
        if generation < 0 || member_id.is_empty() {
            return group::member_commit_identity(&self.shared);
        }
        Ok(CommitIdentity {
            generation,
            member_id,
            group_instance_id: self.cfg.group_instance_id.clone(),
        })
    }

    /// Commits `offsets`, retrying until `default.api.timeout.ms` (`strict`: as the
    /// application's `commit_sync`, only in a stable generation).
    pub async fn commit(
        &mut self,
        subs: &SubscriptionState,
        offsets: HashMap<TopicPartition, OffsetAndMetadata>,
        strict: bool,
    ) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let who = self.commit_identity(subs, strict)?;
        let retry = CommitRetry::Until(self.cfg.default_api_timeout);
        group::commit_offsets(&self.shared, &who, &offsets, retry).await?;
        for (tp, o) in offsets {
            self.last_committed.insert(tp, o.offset);
        }
        Ok(())
    }

    /// `commit_async`: one attempt in the background, in order with every other commit.
    pub fn commit_in_background(
        &self,
        subs: &SubscriptionState,
        offsets: HashMap<TopicPartition, OffsetAndMetadata>,
    ) -> Result<JoinHandle<Result<()>>> {
        let who = self.commit_identity(subs, true)?;
        let shared = self.shared.clone();
        Ok(tokio::spawn(async move {
            group::commit_offsets(&shared, &who, &offsets, CommitRetry::Once).await
        }))
    }

    /// Consumed positions that differ from what this consumer last committed.
    fn changed_positions(
        &self,
        subs: &SubscriptionState,
        only: Option<&[TopicPartition]>,
    ) -> HashMap<TopicPartition, OffsetAndMetadata> {
        subs.consumed()
            .into_iter()
            .filter(|(tp, _)| only.is_none_or(|only| only.contains(tp)))
            .filter(|(tp, o)| self.last_committed.get(tp) != Some(&o.offset))
            .collect()
    }

    /// Commits changed consumed positions (of `only`, or all) as part of a rebalance or a
    /// close.
    async fn commit_positions(
        &mut self,
        subs: &SubscriptionState,
        only: Option<&[TopicPartition]>,
    ) -> Result<()> {
        let offsets = self.changed_positions(subs, only);
        self.commit(subs, offsets, false).await
    }

    /// With auto-commit, `assign` commits the positions of the partitions it gives up, as
    /// Kafka does (in the background: `assign` does not wait).
    pub fn commit_given_up(&self, subs: &SubscriptionState, gone: &[TopicPartition]) {
        if !self.cfg.enable_auto_commit {
            return;
        }
        let offsets = self.changed_positions(subs, Some(gone));
        if let (false, Ok(rt)) = (offsets.is_empty(), tokio::runtime::Handle::try_current()) {
            let shared = self.shared.clone();
            rt.spawn(async move {
                let who = CommitIdentity::standalone();
                if let Err(e) =
                    group::commit_offsets(&shared, &who, &offsets, CommitRetry::Once).await
                {
                    warn!(group = %shared.group_id, "committing unassigned partitions failed: {e}");
                }
            });
        }
    }

    /// Auto-commit: every `auto.commit.interval.ms`, the changed consumed positions, one
    /// commit in flight at a time; the outcome comes back as `Event::Committed`.
    pub fn maybe_auto_commit(&mut self, subs: &SubscriptionState, now: Instant) {
        if !self.cfg.enable_auto_commit || self.auto_commit_in_flight || now < self.auto_commit_at {
            return;
        }
        self.auto_commit_at = now + self.cfg.auto_commit_interval;
        let who = match &subs.mode {
            // While rebalancing, the commit before the rejoin covers it.
            Mode::Subscribed(_) => match group::member_commit_identity(&self.shared) {
                Ok(w) => w,
                Err(_) => return,
            },
            Mode::Manual => CommitIdentity::standalone(),
            Mode::None => return,
        };
        let offsets = self.changed_positions(subs, None);
        if offsets.is_empty() {
            return;
        }
        self.auto_commit_in_flight = true;
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let once = CommitRetry::Once;
            let result = group::commit_offsets(&shared, &who, &offsets, once).await;
            let _ = shared.events.send(Event::Committed { offsets, result });
        });
    }

    /// An auto-commit ended.
    pub fn on_auto_commit(
        &mut self,
        offsets: HashMap<TopicPartition, OffsetAndMetadata>,
        result: Result<()>,
    ) {
        self.auto_commit_in_flight = false;
        match result {
            Ok(()) => {
                for (tp, o) in offsets {
                    self.last_committed.insert(tp, o.offset);
                }
            }
            Err(e) => warn!("auto-commit of offsets failed: {e}"),
        }
    }
}
