//! Group membership over Kafka's classic group protocol (the client half of Kafka's
//! `AbstractCoordinator`/`ConsumerCoordinator`): finding the coordinator, JoinGroup and
//! SyncGroup rounds (the leader runs the assignor), heartbeats in the background,
//! LeaveGroup, and the group's offsets (OffsetCommit, OffsetFetch).
//!
//! The consumer's coordinator (`coordinator`) owns the decisions that touch its partitions
//! (revoking, assigning, calling the rebalance listener); this module owns the wire and the
//! member's identity (member id, generation, phase), shared with the heartbeat task behind
//! one mutex that is never held across an `.await`.
//!
//! Group requests go over connections of their own to the coordinator, as Kafka's client
//! does: a heartbeat or commit must not queue behind a long-polling fetch, and JoinGroup,
//! which legitimately waits up to the rebalance timeout, has a connection with a longer
//! request timeout.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::mpsc::UnboundedSender;
use tracing::{debug, info, warn};

use super::assignor::{
    assignor_for, decode_assignment, decode_subscription, encode_assignment, encode_subscription,
    group_by_topic, CooperativeStickyAssignor, MemberSubscription,
};
use super::config::{AssignmentStrategy, ConsumerConfig, GroupProtocol};
use super::record::OffsetAndMetadata;
use super::Event;
use crate::cluster::Cluster;
use crate::conn::BrokerConnection;
use crate::error::{ClientError, Result};
use weir_kafka::TopicPartition;

const JOIN_GROUP_VERSIONS: (i16, i16) = (0, 9);
const SYNC_GROUP_VERSIONS: (i16, i16) = (0, 5);
const HEARTBEAT_VERSIONS: (i16, i16) = (0, 4);
const LEAVE_GROUP_VERSIONS: (i16, i16) = (0, 5);
const OFFSET_COMMIT_VERSIONS: (i16, i16) = (2, 9);
const OFFSET_FETCH_VERSIONS: (i16, i16) = (1, 7);

/// Kafka's `JOIN_GROUP_TIMEOUT_LAPSE`: JoinGroup may take the whole rebalance timeout, plus
/// this for the answer to travel.
const JOIN_GROUP_TIMEOUT_LAPSE: Duration = Duration::from_secs(5);

/// JoinGroup retries within one round (MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID and the like
/// retry at once); past this the consumer backs off and starts a new round.
const MAX_JOIN_ATTEMPTS: usize = 10;

pub(crate) const PROTOCOL_TYPE: &str = "consumer";

/// Kafka error codes the group protocol reacts to.
pub(crate) use weir_kafka::error::codes;

pub(crate) fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Where the member stands (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not in the group (or thrown out of it).
    Unjoined,
    /// JoinGroup sent, waiting for the group to form.
    PreparingRebalance,
    /// Joined; SyncGroup under way.
    CompletingRebalance,
    /// Has an assignment for the current generation.
    Stable,
}

/// The member's identity and what the background tasks have learnt.
#[derive(Debug)]
pub(crate) struct MemberState {
    pub member_id: String,
    /// -1 when there is no valid generation.
    pub generation: i32,
    pub protocol: Option<String>,
    pub phase: Phase,
    /// Why a rejoin is needed, if it is.
    pub rejoin: Option<String>,
    pub last_poll: Instant,
    /// An error the member cannot get past by rejoining (e.g. FENCED_INSTANCE_ID).
    pub fatal: Option<ClientError>,
    /// Under the consumer protocol (KIP-848): what the heartbeat and `poll` exchange.
    pub beat: BeatState,
}

/// What the KIP-848 heartbeat task (`membership`) and the consumer's coordinator exchange.
/// The member epoch is `MemberState::generation`.
#[derive(Debug, Default)]
pub(crate) struct BeatState {
    /// The topics subscribed, as `poll` last saw them.
    pub subscription: BTreeSet<String>,
    /// The partitions the consumer holds, as its last reconciliation left them.
    pub owned: BTreeSet<TopicPartition>,
    /// The coordinator's latest assignment, not yet reconciled by `poll`.
    pub target: Option<BTreeSet<TopicPartition>>,
    /// Why the member lost its place in the group: `poll` gives its partitions up as lost,
    /// clears this, and the heartbeat joins again at epoch 0.
    pub fenced: Option<String>,
}

/// Connections to the group's coordinator.
pub(crate) struct CoordinatorLink {
    cluster: Arc<Cluster>,
    group_id: String,
    client_id: String,
    connect_timeout: Duration,
    request_timeout: Duration,
    join_timeout: Duration,
    conns: tokio::sync::Mutex<Links>,
}

#[derive(Default)]
struct Links {
    addr: Option<String>,
    normal: Option<Arc<BrokerConnection>>,
    join: Option<Arc<BrokerConnection>>,
}

impl CoordinatorLink {
    async fn connect(&self, join: bool) -> Result<Arc<BrokerConnection>> {
        let mut links = self.conns.lock().await;
        let slot = if join { &links.join } else { &links.normal };
        if let Some(c) = slot {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        let addr = match &links.addr {
            Some(a) => a.clone(),
            None => {
                // FindCoordinator (cached by the cluster); only the address is kept.
                let c = self.cluster.coordinator(&self.group_id).await?;
                let a = c.addr().to_string();
                links.addr = Some(a.clone());
                a
            }
        };
        let timeout = if join {
            self.join_timeout
        } else {
            self.request_timeout
        };
        let security = &self.cluster.config().security;
        match BrokerConnection::connect(
            &addr,
            &self.client_id,
            self.connect_timeout,
            timeout,
            security,
        )
        .await
        {
            Ok(c) => {
                if join {
                    links.join = Some(c.clone());
                } else {
                    links.normal = Some(c.clone());
                }
                Ok(c)
            }
            Err(e) => {
                *links = Links::default();
                self.cluster.forget_coordinator(&self.group_id);
                Err(e)
            }
        }
    }

    /// The connection for everything but JoinGroup.
    pub async fn conn(&self) -> Result<Arc<BrokerConnection>> {
        self.connect(false).await
    }

    /// The connection for JoinGroup (request timeout = rebalance timeout + 5 s).
    pub async fn join_conn(&self) -> Result<Arc<BrokerConnection>> {
        self.connect(true).await
    }

    /// Forgets the coordinator (after NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a broken
    /// connection): the next request looks it up again.
    pub async fn mark_unknown(&self) {
        *self.conns.lock().await = Links::default();
        self.cluster.forget_coordinator(&self.group_id);
    }
}

/// What the consumer, its heartbeat task and its rebalance rounds share.
pub(crate) struct GroupShared {
    pub group_id: String,
    pub cfg: Arc<ConsumerConfig>,
    pub cluster: Arc<Cluster>,
    pub link: CoordinatorLink,
    state: Mutex<MemberState>,
    pub events: UnboundedSender<Event>,
    /// Held for the whole of one OffsetCommit (retries included), so that commits reach
    /// the coordinator in the order they were made: a retried older commit can never land
    /// after a newer one and move the group's offset backwards. Tokio's mutex is FIFO.
    commit_order: tokio::sync::Mutex<()>,
    /// Wakes the KIP-848 heartbeat before its interval (a reconciliation to acknowledge, a
    /// new subscription, a fence cleared).
    pub beat_now: tokio::sync::Notify,
}

impl GroupShared {
    pub fn new(
        group_id: String,
        cfg: Arc<ConsumerConfig>,
        cluster: Arc<Cluster>,
        events: UnboundedSender<Event>,
    ) -> Self {
        let c = &cfg.cluster;
        let link = CoordinatorLink {
            cluster: cluster.clone(),
            group_id: group_id.clone(),
            client_id: c.client_id.clone(),
            connect_timeout: c.connect_timeout,
            request_timeout: c.request_timeout,
            join_timeout: c
                .request_timeout
                .max(cfg.max_poll_interval + JOIN_GROUP_TIMEOUT_LAPSE),
            conns: tokio::sync::Mutex::new(Links::default()),
        };
        GroupShared {
            group_id,
            link,
            commit_order: tokio::sync::Mutex::new(()),
            state: Mutex::new(MemberState {
                member_id: String::new(),
                generation: -1,
                protocol: None,
                phase: Phase::Unjoined,
                rejoin: None,
                last_poll: Instant::now(),
                fatal: None,
                beat: BeatState::default(),
            }),
            beat_now: tokio::sync::Notify::new(),
            cfg,
            cluster,
            events,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// (generation, member id).
    pub fn identity(&self) -> (i32, String) {
        let s = self.lock();
        (s.generation, s.member_id.clone())
    }

    pub fn note_poll(&self) {
        self.lock().last_poll = Instant::now();
    }

    pub fn request_rejoin(&self, reason: impl Into<String>) {
        let mut s = self.lock();
        if s.rejoin.is_none() {
            s.rejoin = Some(reason.into());
        }
        drop(s);
        let _ = self.events.send(Event::Wake);
    }

    /// Kafka's `resetStateAndGeneration`: out of the generation (so owned partitions count
    /// as lost), and out of the group too if the member id is no longer valid. Under the
    /// consumer protocol, the member is fenced instead (it keeps its member id).
    pub fn reset_generation(&self, reason: &str, reset_member_id: bool) {
        if self.cfg.group_protocol == GroupProtocol::Consumer {
            self.fence(reason);
            return;
        }
        let mut s = self.lock();
        info!(group = %self.group_id, member = %s.member_id, generation = s.generation,
            "resetting the generation: {reason}");
        s.generation = -1;
        s.protocol = None;
        if reset_member_id {
            s.member_id.clear();
        }
        s.phase = Phase::Unjoined;
        if s.rejoin.is_none() {
            s.rejoin = Some(reason.to_string());
        }
        drop(s);
        let _ = self.events.send(Event::Wake);
    }

    /// Resets after an error answering a request sent in `generation`, unless a newer
    /// generation began meanwhile (Kafka's `generationUnchanged` check).
    fn reset_if_unchanged(&self, generation: i32, member_id: &str, code: i16, api: &str) {
        let unchanged = {
            let s = self.lock();
            s.generation == generation && s.member_id == member_id
        };
        if unchanged {
            let reason = format!("{} from {api}", error_name(code));
            self.reset_generation(&reason, code == codes::UNKNOWN_MEMBER_ID);
        }
    }

    /// KIP-848: the member lost its epoch (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, a poll
    /// timeout). Its partitions are lost; the heartbeat waits until `poll` has given them
    /// up, then joins again at epoch 0 under the same member id.
    pub fn fence(&self, reason: &str) {
        let mut s = self.lock();
        if s.beat.fenced.is_none() {
            info!(group = %self.group_id, member = %s.member_id, epoch = s.generation,
                "fenced from the group: {reason}");
            s.beat.fenced = Some(reason.to_string());
        }
        s.generation = -1;
        s.phase = Phase::Unjoined;
        s.beat.target = None;
        drop(s);
        let _ = self.events.send(Event::Wake);
    }

    pub(crate) fn set_fatal(&self, e: ClientError) {
        self.lock().fatal = Some(e);
        let _ = self.events.send(Event::Wake);
    }
}

pub(crate) fn error_name(code: i16) -> String {
    ClientError::kafka(code, None).to_string()
}

/// A Kafka error from a group API, with advice where the fix is the user's.
fn group_error(code: i16, api: &str, cfg: &ConsumerConfig, group: &str) -> ClientError {
    let hint = match code {
        codes::INVALID_SESSION_TIMEOUT => format!(
            "session.timeout.ms={} is outside the broker's group.min.session.timeout.ms .. \
             group.max.session.timeout.ms",
            cfg.session_timeout.as_millis()
        ),
        codes::INCONSISTENT_GROUP_PROTOCOL => format!(
            "the members of group '{group}' share no partition.assignment.strategy (this one \
             offers {}), or the group is used by consumers of group.protocol=consumer or by \
             another kind of client",
            cfg.assignment_strategies
                .iter()
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(",")
        ),
        codes::FENCED_INSTANCE_ID => format!(
            "another consumer joined group '{group}' with the same group.instance.id ({})",
            cfg.group_instance_id.as_deref().unwrap_or("")
        ),
        _ => format!("{api} for group '{group}'"),
    };
    ClientError::kafka(code, Some(hint))
}

/// The heartbeat task: runs while the consumer is subscribed. Heartbeats only in the
/// CompletingRebalance and Stable phases (a JoinGroup in flight keeps the member alive);
/// leaves the group when the application stops polling for `max.poll.interval.ms`.
pub(crate) async fn heartbeat_loop(shared: Arc<GroupShared>) {
    let cfg = shared.cfg.clone();
    let interval = cfg.heartbeat_interval;
    let mut last_ok = Instant::now();
    let mut next = tokio::time::Instant::now() + interval;
    loop {
        tokio::time::sleep_until(next).await;
        next = tokio::time::Instant::now() + interval;
        let (phase, generation, member_id, last_poll) = {
            let s = shared.lock();
            (s.phase, s.generation, s.member_id.clone(), s.last_poll)
        };
        if !matches!(phase, Phase::CompletingRebalance | Phase::Stable) {
            last_ok = Instant::now();
            continue;
        }
        if last_poll.elapsed() > cfg.max_poll_interval {
            warn!(group = %shared.group_id, member = %member_id,
                "no poll() for more than max.poll.interval.ms ({} ms): leaving the group; \
                 process records faster or raise max.poll.interval.ms / lower max.poll.records",
                cfg.max_poll_interval.as_millis());
            leave_group(&shared, "consumer poll timeout has expired").await;
            shared.reset_generation("consumer poll timeout has expired", true);
            continue;
        }
        let outcome = send_heartbeat(&shared, generation, &member_id).await;
        match outcome {
            Ok(codes::NONE) => last_ok = Instant::now(),
            Ok(codes::REBALANCE_IN_PROGRESS) => {
                last_ok = Instant::now();
                let stable = {
                    let s = shared.lock();
                    s.phase == Phase::Stable && s.generation == generation
                };
                if stable {
                    debug!(group = %shared.group_id, "the group is rebalancing: rejoining");
                    shared.request_rejoin("the group is rebalancing");
                }
            }
            Ok(code @ (codes::ILLEGAL_GENERATION | codes::UNKNOWN_MEMBER_ID)) => {
                shared.reset_if_unchanged(generation, &member_id, code, "Heartbeat");
            }
            Ok(codes::FENCED_INSTANCE_ID) => {
                shared.reset_if_unchanged(
                    generation,
                    &member_id,
                    codes::FENCED_INSTANCE_ID,
                    "Heartbeat",
                );
                shared.set_fatal(group_error(
                    codes::FENCED_INSTANCE_ID,
                    "Heartbeat",
                    &cfg,
                    &shared.group_id,
                ));
                return;
            }
            Ok(code @ (codes::NOT_COORDINATOR | codes::COORDINATOR_NOT_AVAILABLE)) => {
                debug!(group = %shared.group_id, "heartbeat: {}", error_name(code));
                shared.link.mark_unknown().await;
                next = tokio::time::Instant::now() + cfg.cluster.retry_backoff;
            }
            Ok(code) => {
                warn!(group = %shared.group_id, "heartbeat failed: {}", error_name(code));
                next = tokio::time::Instant::now() + cfg.cluster.retry_backoff;
            }
            Err(e) => {
                debug!(group = %shared.group_id, "heartbeat failed: {e}");
                if e.needs_metadata_refresh() || matches!(e, ClientError::Timeout { .. }) {
                    shared.link.mark_unknown().await;
                }
                next = tokio::time::Instant::now() + cfg.cluster.retry_backoff;
            }
        }
        if last_ok.elapsed() > cfg.session_timeout {
            // The coordinator has surely dropped this member; a new coordinator lookup and
            // the next heartbeat's UNKNOWN_MEMBER_ID will bring it back in.
            warn!(group = %shared.group_id,
                "no successful heartbeat within session.timeout.ms: looking for the coordinator again");
            shared.link.mark_unknown().await;
            last_ok = Instant::now();
        }
    }
}

async fn send_heartbeat(shared: &GroupShared, generation: i32, member_id: &str) -> Result<i16> {
    let conn = shared.link.conn().await?;
    let v = conn.version_for(ApiKey::Heartbeat, HEARTBEAT_VERSIONS)?;
    let mut req = HeartbeatRequest::default();
    req.group_id = GroupId(sb(&shared.group_id));
    req.generation_id = generation;
    req.member_id = sb(member_id);
    if v >= 3 {
        req.group_instance_id = shared.cfg.group_instance_id.clone().map(sb);
    }
    let resp: HeartbeatResponse = conn.request(&req, v).await?;
    Ok(resp.error_code)
}

/// Sends LeaveGroup (dynamic members only: a static member keeps its place until its
/// session times out, so a restart does not rebalance the group). Errors are logged: the
/// member is leaving either way.
pub(crate) async fn leave_group(shared: &GroupShared, reason: &str) {
    let member_id = shared.lock().member_id.clone();
    if member_id.is_empty() || shared.cfg.group_instance_id.is_some() {
        return;
    }
    let result: Result<()> = async {
        let conn = shared.link.conn().await?;
        let v = conn.version_for(ApiKey::LeaveGroup, LEAVE_GROUP_VERSIONS)?;
        let mut req = LeaveGroupRequest::default();
        req.group_id = GroupId(sb(&shared.group_id));
        if v < 3 {
            req.member_id = sb(&member_id);
        } else {
            let mut m = MemberIdentity::default();
            m.member_id = sb(&member_id);
            if v >= 5 {
                m.reason = Some(sb(reason));
            }
            req.members = vec![m];
        }
        let resp: LeaveGroupResponse = conn.request(&req, v).await?;
        let code = if resp.error_code != 0 {
            resp.error_code
        } else {
            resp.members
                .iter()
                .map(|m| m.error_code)
                .find(|c| *c != 0)
                .unwrap_or(0)
        };
        if code != 0 {
            return Err(ClientError::kafka(code, Some("LeaveGroup".into())));
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => info!(group = %shared.group_id, member = %member_id, "left the group: {reason}"),
        Err(e) => debug!(group = %shared.group_id, "LeaveGroup failed (leaving anyway): {e}"),
    }
    let mut s = shared.lock();
    s.member_id.clear();
    s.generation = -1;
    s.protocol = None;
    s.phase = Phase::Unjoined;
}

/// What a rebalance round starts from.
pub(crate) struct RoundParams {
    pub topics: BTreeSet<String>,
    /// Partitions owned going in (cooperative: all kept; eager: none).
    pub owned: Vec<TopicPartition>,
    pub reason: String,
}

/// A completed JoinGroup + SyncGroup.
#[derive(Debug)]
pub(crate) struct Joined {
    pub generation: i32,
    pub member_id: String,
    pub protocol: String,
    pub assignment: Vec<TopicPartition>,
    /// The leader's view of every member's topics (partition counts; 0 if missing), to
    /// rejoin when they change. Empty on followers.
    pub group_topics: BTreeMap<String, i32>,
}

#[derive(Debug)]
pub(crate) enum RoundOutcome {
    Joined(Joined),
    /// Try again after `retry.backoff.ms` (or at once if `backoff` is false).
    Retry {
        error: ClientError,
        backoff: bool,
    },
    /// The application must hear of it (authorization, bad configuration, ...).
    Fatal(ClientError),
}

enum Step {
    Again,
    Done(RoundOutcome),
}

/// One rebalance round: JoinGroup (retried at once for MEMBER_ID_REQUIRED and the like),
/// the assignment if this member leads, SyncGroup.
pub(crate) async fn run_round(shared: Arc<GroupShared>, p: RoundParams) -> RoundOutcome {
    for _ in 0..MAX_JOIN_ATTEMPTS {
        match round_attempt(&shared, &p).await {
            Step::Done(outcome) => return outcome,
            Step::Again => continue,
        }
    }
    RoundOutcome::Retry {
        error: ClientError::Protocol(format!(
            "group '{}' did not settle after {MAX_JOIN_ATTEMPTS} JoinGroup attempts",
            shared.group_id
        )),
        backoff: true,
    }
}

fn retry(error: ClientError) -> Step {
    Step::Done(RoundOutcome::Retry {
        error,
        backoff: true,
    })
}

async fn round_attempt(shared: &Arc<GroupShared>, p: &RoundParams) -> Step {
    let cfg = &shared.cfg;
    let group = shared.group_id.as_str();
    let (generation, member_id) = shared.identity();
    let conn = match shared.link.join_conn().await {
        Ok(c) => c,
        Err(e) => {
            shared.link.mark_unknown().await;
            return retry(e);
        }
    };
    let v = match conn.version_for(ApiKey::JoinGroup, JOIN_GROUP_VERSIONS) {
        Ok(v) => v,
        Err(e) => return Step::Done(RoundOutcome::Fatal(e)),
    };
    let mut protocols = Vec::new();
    for s in &cfg.assignment_strategies {
        let user_data = match s {
            AssignmentStrategy::CooperativeSticky => {
                Some(CooperativeStickyAssignor::user_data(generation))
            }
            _ => None,
        };
        let metadata = match encode_subscription(
            &p.topics,
            &p.owned,
            generation,
            cfg.client_rack.as_deref(),
            user_data,
        ) {
            Ok(m) => m,
            Err(e) => return Step::Done(RoundOutcome::Fatal(e)),
        };
        let mut proto = JoinGroupRequestProtocol::default();
        proto.name = sb(s.name());
        proto.metadata = metadata;
        protocols.push(proto);
    }
    let mut req = JoinGroupRequest::default();
    req.group_id = GroupId(sb(group));
    req.session_timeout_ms = cfg.session_timeout.as_millis() as i32;
    if v >= 1 {
        req.rebalance_timeout_ms = cfg.max_poll_interval.as_millis() as i32;
    }
    req.member_id = sb(&member_id);
    if v >= 5 {
        req.group_instance_id = cfg.group_instance_id.clone().map(sb);
    }
    req.protocol_type = sb(PROTOCOL_TYPE);
    req.protocols = protocols;
    if v >= 8 {
        req.reason = Some(sb(&p.reason));
    }
    debug!(group, member = %member_id, "JoinGroup v{v}: {}", p.reason);
    let resp: JoinGroupResponse = match conn.request(&req, v).await {
        Ok(r) => r,
        Err(e) => {
            shared.link.mark_unknown().await;
            return retry(e);
        }
    };
    match resp.error_code {
        codes::NONE => {}
        codes::MEMBER_ID_REQUIRED => {
            // KIP-394: join again with the id the coordinator handed out.
            shared.lock().member_id = resp.member_id.to_string();
            return Step::Again;
        }
        codes::UNKNOWN_MEMBER_ID => {
            shared.reset_generation("UNKNOWN_MEMBER_ID from JoinGroup", true);
            return Step::Again;
        }
        codes::ILLEGAL_GENERATION => {
            shared.reset_generation("ILLEGAL_GENERATION from JoinGroup", false);
            return Step::Again;
        }
        codes::REBALANCE_IN_PROGRESS | codes::COORDINATOR_LOAD_IN_PROGRESS => {
            return retry(ClientError::kafka(
                resp.error_code,
                Some("JoinGroup".into()),
            ));
        }
        code @ (codes::NOT_COORDINATOR | codes::COORDINATOR_NOT_AVAILABLE) => {
            shared.link.mark_unknown().await;
            return retry(ClientError::kafka(code, Some("JoinGroup".into())));
        }
        code => {
            if code == codes::FENCED_INSTANCE_ID {
                shared.set_fatal(group_error(code, "JoinGroup", cfg, group));
            }
            return Step::Done(RoundOutcome::Fatal(group_error(
                code,
                "JoinGroup",
                cfg,
                group,
            )));
        }
    }
    let joined_member = resp.member_id.to_string();
    let joined_generation = resp.generation_id;
    let protocol = resp
        .protocol_name
        .as_ref()
        .map(|p| p.to_string())
        .unwrap_or_default();
    if let Some(t) = &resp.protocol_type {
        if t.as_str() != PROTOCOL_TYPE {
            return Step::Done(RoundOutcome::Fatal(group_error(
                codes::INCONSISTENT_GROUP_PROTOCOL,
                "JoinGroup",
                cfg,
                group,
            )));
        }
    }
    let Some(strategy) = cfg
        .assignment_strategies
        .iter()
        .copied()
        .find(|s| s.name() == protocol)
    else {
        return Step::Done(RoundOutcome::Fatal(ClientError::Protocol(format!(
            "group '{group}' chose the protocol '{protocol}', which this consumer did not offer"
        ))));
    };
    {
        let mut s = shared.lock();
        s.member_id = joined_member.clone();
        s.generation = joined_generation;
        s.protocol = Some(protocol.clone());
        s.phase = Phase::CompletingRebalance;
    }
    let is_leader = resp.leader.as_str() == joined_member;
    info!(group, member = %joined_member, generation = joined_generation, %protocol,
        leader = is_leader, "joined the group");
    let mut group_topics = BTreeMap::new();
    let mut assignments = Vec::new();
    if is_leader && !resp.skip_assignment {
        match lead(shared, strategy, &resp).await {
            Ok((a, topics)) => {
                assignments = a;
                group_topics = topics;
            }
            Err(e) if e.is_retriable() => return retry(e),
            Err(e) => return Step::Done(RoundOutcome::Fatal(e)),
        }
    }
    sync(
        shared,
        joined_generation,
        &joined_member,
        &protocol,
        assignments,
        group_topics,
    )
    .await
}

/// The leader's part: every member's subscription, fresh metadata for all their topics,
/// the chosen assignor.
async fn lead(
    shared: &GroupShared,
    strategy: AssignmentStrategy,
    resp: &JoinGroupResponse,
) -> Result<(Vec<SyncGroupRequestAssignment>, BTreeMap<String, i32>)> {
    let mut members: Vec<MemberSubscription> = Vec::with_capacity(resp.members.len());
    for m in &resp.members {
        members.push(decode_subscription(
            m.member_id.as_str(),
            m.group_instance_id.as_ref().map(|i| i.as_str()),
            &m.metadata,
        )?);
    }
    let topics: Vec<String> = members
        .iter()
        .flat_map(|m| m.topics.iter().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let meta = if topics.is_empty() {
        Default::default()
    } else {
        shared
            .cluster
            .refresh(Some(&topics), shared.cfg.allow_auto_create_topics)
            .await?
    };
    let mut counts: BTreeMap<String, i32> = BTreeMap::new();
    for t in &topics {
        let n = meta.topics.get(t).map_or(0, |i| i.partitions.len() as i32);
        counts.insert(t.clone(), n);
    }
    let existing: BTreeMap<String, i32> = counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(t, n)| (t.clone(), *n))
        .collect();
    let plan = assignor_for(strategy).assign(&existing, &members);
    debug!(group = %shared.group_id, members = plan.len(), "assignment computed");
    let mut out = Vec::with_capacity(members.len());
    for m in &members {
        let mut a = SyncGroupRequestAssignment::default();
        a.member_id = sb(&m.member_id);
        a.assignment = encode_assignment(plan.get(&m.member_id).map_or(&[][..], Vec::as_slice))?;
        out.push(a);
    }
    Ok((out, counts))
}

async fn sync(
    shared: &GroupShared,
    generation: i32,
    member_id: &str,
    protocol: &str,
    assignments: Vec<SyncGroupRequestAssignment>,
    group_topics: BTreeMap<String, i32>,
) -> Step {
    let cfg = &shared.cfg;
    let group = shared.group_id.as_str();
    let result: Result<SyncGroupResponse> = async {
        let conn = shared.link.conn().await?;
        let v = conn.version_for(ApiKey::SyncGroup, SYNC_GROUP_VERSIONS)?;
        let mut req = SyncGroupRequest::default();
        req.group_id = GroupId(sb(group));
        req.generation_id = generation;
        req.member_id = sb(member_id);
        if v >= 3 {
            req.group_instance_id = cfg.group_instance_id.clone().map(sb);
        }
        if v >= 5 {
            req.protocol_type = Some(sb(PROTOCOL_TYPE));
            req.protocol_name = Some(sb(protocol));
        }
        req.assignments = assignments;
        let resp: SyncGroupResponse = conn.request(&req, v).await?;
        if v >= 5 && resp.error_code == codes::NONE {
            if let Some(name) = &resp.protocol_name {
                if name.as_str() != protocol {
                    return Err(group_error(
                        codes::INCONSISTENT_GROUP_PROTOCOL,
                        "SyncGroup",
                        cfg,
                        group,
                    ));
                }
            }
        }
        Ok(resp)
    }
    .await;
    let resp = match result {
        Ok(r) => r,
        Err(e) if e.is_retriable() => {
            shared.link.mark_unknown().await;
            shared.request_rejoin(format!("SyncGroup failed: {e}"));
            return retry(e);
        }
        Err(e) => return Step::Done(RoundOutcome::Fatal(e)),
    };
    match resp.error_code {
        codes::NONE => {}
        codes::REBALANCE_IN_PROGRESS => {
            // The group moved on while this member synced: join again at once, keeping the
            // generation (owned partitions stay valid).
            shared.lock().phase = Phase::PreparingRebalance;
            return Step::Again;
        }
        code @ (codes::UNKNOWN_MEMBER_ID | codes::ILLEGAL_GENERATION) => {
            shared.reset_if_unchanged(generation, member_id, code, "SyncGroup");
            return Step::Done(RoundOutcome::Retry {
                error: ClientError::kafka(code, Some("SyncGroup".into())),
                backoff: false,
            });
        }
        code @ (codes::NOT_COORDINATOR | codes::COORDINATOR_NOT_AVAILABLE) => {
            // Only the coordinator moved: the member keeps its generation, so the partitions
            // it owns are revoked normally (committed first), not lost — as Kafka does.
            shared.link.mark_unknown().await;
            return retry(ClientError::kafka(code, Some("SyncGroup".into())));
        }
        code => {
            if code == codes::FENCED_INSTANCE_ID {
                shared.set_fatal(group_error(code, "SyncGroup", cfg, group));
            }
            shared.reset_if_unchanged(generation, member_id, code, "SyncGroup");
            return Step::Done(RoundOutcome::Fatal(group_error(
                code,
                "SyncGroup",
                cfg,
                group,
            )));
        }
    }
    let assignment = match decode_assignment(&resp.assignment) {
        Ok(a) => a,
        Err(e) => return Step::Done(RoundOutcome::Fatal(e)),
    };
    {
        let mut s = shared.lock();
        if s.generation != generation || s.member_id != member_id {
            return Step::Done(RoundOutcome::Retry {
                error: ClientError::Protocol("the generation changed during SyncGroup".into()),
                backoff: false,
            });
        }
        s.phase = Phase::Stable;
    }
    Step::Done(RoundOutcome::Joined(Joined {
        generation,
        member_id: member_id.to_string(),
        protocol: protocol.to_string(),
        assignment,
        group_topics,
    }))
}

/// Who commits: a member of the current generation, or (generation -1, no member id) a
/// consumer outside group management.
#[derive(Debug, Clone)]
pub(crate) struct CommitIdentity {
    pub generation: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

impl CommitIdentity {
    pub fn standalone() -> Self {
        CommitIdentity {
            generation: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

/// The identity a group member commits with: only a member with a stable generation may
/// commit (Kafka fails the commit otherwise, and the member rejoins in `poll`).
pub(crate) fn member_commit_identity(shared: &GroupShared) -> Result<CommitIdentity> {
    let s = shared.lock();
    if s.phase != Phase::Stable || s.generation < 0 {
        let (code, what) = if matches!(
            s.phase,
            Phase::PreparingRebalance | Phase::CompletingRebalance
        ) || s.rejoin.is_some()
        {
            (
                codes::REBALANCE_IN_PROGRESS,
                "the group is rebalancing; poll() to complete the rebalance, then commit again",
            )
        } else {
            (
                codes::UNKNOWN_MEMBER_ID,
                "this consumer is not in an active generation of the group (poll() to join it)",
            )
        };
        return Err(ClientError::kafka(
            code,
            Some(format!(
                "offset commit to group '{}' failed: {what}",
                shared.group_id
            )),
        ));
    }
    Ok(CommitIdentity {
        generation: s.generation,
        member_id: s.member_id.clone(),
        group_instance_id: shared.cfg.group_instance_id.clone(),
    })
}

/// How long a commit keeps trying.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CommitRetry {
    /// Retriable errors are retried until this much time has passed (commitSync).
    Until(Duration),
    /// One attempt; a retriable error is returned as it is (commitAsync and auto-commit,
    /// as in Kafka: the next commit carries newer offsets anyway).
    Once,
}

/// OffsetCommit, in the order commits were made (see `GroupShared::commit_order`).
pub(crate) async fn commit_offsets(
    shared: &GroupShared,
    who: &CommitIdentity,
    offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
    retry: CommitRetry,
) -> Result<()> {
    let _in_order = shared.commit_order.lock().await;
    let (deadline, timeout) = match retry {
        CommitRetry::Until(t) => (Instant::now().checked_add(t), t),
        CommitRetry::Once => (Some(Instant::now()), Duration::ZERO),
    };
    let mut pending: BTreeMap<TopicPartition, OffsetAndMetadata> = offsets
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let group = shared.group_id.as_str();
    let mut last_error: ClientError;
    let mut who = who.clone();
    loop {
        match commit_once(shared, &who, &pending).await {
            Ok(errors) => {
                let mut retriable = None;
                let mut stale = false;
                for (tp, code) in errors {
                    match code {
                        codes::NONE => {
                            pending.remove(&tp);
                        }
                        codes::STALE_MEMBER_EPOCH if matches!(retry, CommitRetry::Until(_)) => {
                            // KIP-848: a heartbeat has moved the member to a newer epoch than
                            // the commit carried; the next attempt carries the member's latest.
                            retriable = Some(code);
                            stale = true;
                        }
                        codes::STALE_MEMBER_EPOCH => {
                            return Err(ClientError::kafka(
                                code,
                                Some(format!(
                                    "offset commit to group '{group}' failed: it carried member \
                                     epoch {}, older than the member's; commit again",
                                    who.generation
                                )),
                            ))
                        }
                        codes::COORDINATOR_LOAD_IN_PROGRESS
                        | codes::REQUEST_TIMED_OUT
                        | codes::NETWORK_EXCEPTION
                        | codes::UNKNOWN_TOPIC_OR_PARTITION => retriable = Some(code),
                        codes::NOT_COORDINATOR | codes::COORDINATOR_NOT_AVAILABLE => {
                            shared.link.mark_unknown().await;
                            retriable = Some(code);
                        }
                        codes::UNKNOWN_MEMBER_ID
                        | codes::ILLEGAL_GENERATION
                        | codes::FENCED_MEMBER_EPOCH => {
                            shared.reset_if_unchanged(
                                who.generation,
                                &who.member_id,
                                code,
                                "OffsetCommit",
                            );
                            return Err(ClientError::kafka(
                                code,
                                Some(format!(
                                    "offset commit to group '{group}' failed: this consumer is no \
                                     longer in generation (member epoch) {} of the group (it was \
                                     removed, e.g. \
                                     for not calling poll() within max.poll.interval.ms); its \
                                     partitions may have moved, poll() to rejoin",
                                    who.generation
                                )),
                            ));
                        }
                        codes::REBALANCE_IN_PROGRESS => {
                            return Err(ClientError::kafka(
                                code,
                                Some(format!(
                                    "offset commit to group '{group}' failed: the group is \
                                     rebalancing; poll() to complete the rebalance, then commit \
                                     again"
                                )),
                            ))
                        }
                        codes::FENCED_INSTANCE_ID => {
                            let e = group_error(code, "OffsetCommit", &shared.cfg, group);
                            shared.set_fatal(e.clone());
                            return Err(e);
                        }
                        code => {
                            return Err(ClientError::kafka(
                                code,
                                Some(format!("committing the offset of {tp} to group '{group}'")),
                            ))
                        }
                    }
                }
                if pending.is_empty() {
                    return Ok(());
                }
                if stale {
                    let (epoch, member_id) = shared.identity();
                    if member_id == who.member_id && epoch > who.generation {
                        who.generation = epoch;
                    }
                }
                last_error =
                    ClientError::kafka(retriable.unwrap_or(codes::REQUEST_TIMED_OUT), None);
            }
            Err(e) if e.is_retriable() => {
                shared.link.mark_unknown().await;
                last_error = e;
            }
            Err(e) => return Err(e),
        }
        if matches!(retry, CommitRetry::Once) {
            return Err(last_error);
        }
        if deadline.is_some_and(|d| Instant::now() + shared.cfg.cluster.retry_backoff >= d) {
            return Err(ClientError::Timeout {
                what: format!("OffsetCommit to group '{group}' (last error: {last_error})"),
                ms: timeout.as_millis() as u64,
            });
        }
        tokio::time::sleep(shared.cfg.cluster.retry_backoff).await;
    }
}

async fn commit_once(
    shared: &GroupShared,
    who: &CommitIdentity,
    offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
) -> Result<Vec<(TopicPartition, i16)>> {
    let conn = shared.link.conn().await?;
    let v = conn.version_for(ApiKey::OffsetCommit, OFFSET_COMMIT_VERSIONS)?;
    let mut req = OffsetCommitRequest::default();
    req.group_id = GroupId(sb(&shared.group_id));
    req.generation_id_or_member_epoch = who.generation;
    req.member_id = sb(&who.member_id);
    if v >= 7 {
        req.group_instance_id = who.group_instance_id.clone().map(sb);
    }
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, o) in offsets {
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = tp.partition;
        p.committed_offset = o.offset;
        if v >= 6 {
            p.committed_leader_epoch = o.leader_epoch.unwrap_or(-1);
        }
        p.committed_metadata = Some(sb(&o.metadata));
        by_topic.entry(&*tp.topic).or_default().push(p);
    }
    req.topics = by_topic
        .into_iter()
        .map(|(topic, partitions)| {
            let mut t = OffsetCommitRequestTopic::default();
            t.name = TopicName(sb(topic));
            t.partitions = partitions;
            t
        })
        .collect();
    let resp: OffsetCommitResponse = conn.request(&req, v).await?;
    let mut out = Vec::new();
    for t in &resp.topics {
        for p in &t.partitions {
            out.push((
                TopicPartition::new(t.name.0.to_string(), p.partition_index),
                p.error_code,
            ));
        }
    }
    // A partition the broker did not answer for is retried.
    for tp in offsets.keys() {
        if !out.iter().any(|(x, _)| x == tp) {
            out.push((tp.clone(), codes::REQUEST_TIMED_OUT));
        }
    }
    Ok(out)
}

/// OffsetFetch: the group's committed offsets of `tps` (None where nothing is committed),
/// retried on retriable errors until `timeout`.
pub(crate) async fn fetch_committed(
    shared: &GroupShared,
    tps: &[TopicPartition],
    timeout: Duration,
) -> Result<HashMap<TopicPartition, Option<OffsetAndMetadata>>> {
    let deadline = super::deadline_after(timeout);
    let group = shared.group_id.as_str();
    loop {
        let last_error = match fetch_committed_once(shared, tps).await {
            Ok(r) => return Ok(r),
            Err(e) if e.is_retriable() => {
                if matches!(
                    e.code(),
                    None | Some(codes::NOT_COORDINATOR) | Some(codes::COORDINATOR_NOT_AVAILABLE)
                ) {
                    shared.link.mark_unknown().await;
                }
                e
            }
            Err(e) => return Err(e),
        };
        if Instant::now() + shared.cfg.cluster.retry_backoff >= deadline {
            return Err(ClientError::Timeout {
                what: format!("OffsetFetch from group '{group}' (last error: {last_error})"),
                ms: timeout.as_millis() as u64,
            });
        }
        tokio::time::sleep(shared.cfg.cluster.retry_backoff).await;
    }
}

async fn fetch_committed_once(
    shared: &GroupShared,
    tps: &[TopicPartition],
) -> Result<HashMap<TopicPartition, Option<OffsetAndMetadata>>> {
    let group = shared.group_id.as_str();
    let conn = shared.link.conn().await?;
    let v = conn.version_for(ApiKey::OffsetFetch, OFFSET_FETCH_VERSIONS)?;
    let mut req = OffsetFetchRequest::default();
    req.group_id = GroupId(sb(group));
    req.topics = Some(
        group_by_topic(tps)
            .into_iter()
            .map(|(topic, partitions)| {
                let mut t = OffsetFetchRequestTopic::default();
                t.name = TopicName(sb(topic));
                t.partition_indexes = partitions;
                t
            })
            .collect(),
    );
    if v >= 7 {
        // As Kafka: a read_committed consumer waits for pending transactional commits.
        req.require_stable =
            shared.cfg.isolation_level == super::config::IsolationLevel::ReadCommitted;
    }
    let resp: OffsetFetchResponse = conn.request(&req, v).await?;
    if resp.error_code != 0 {
        return Err(ClientError::kafka(
            resp.error_code,
            Some(format!("OffsetFetch from group '{group}'")),
        ));
    }
    let mut out: HashMap<TopicPartition, Option<OffsetAndMetadata>> =
        tps.iter().map(|tp| (tp.clone(), None)).collect();
    for t in &resp.topics {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
            match p.error_code {
                codes::NONE => {}
                codes::UNSTABLE_OFFSET_COMMIT => {
                    return Err(ClientError::kafka(
                        codes::UNSTABLE_OFFSET_COMMIT,
                        Some(format!("the offset of {tp} has a transaction pending")),
                    ))
                }
                code => {
                    return Err(ClientError::kafka(
                        code,
                        Some(format!(
                            "fetching the committed offset of {tp} from group '{group}'"
                        )),
                    ))
                }
            }
            let committed = (p.committed_offset >= 0).then(|| OffsetAndMetadata {
                offset: p.committed_offset,
                leader_epoch: (p.committed_leader_epoch >= 0).then_some(p.committed_leader_epoch),
                metadata: p
                    .metadata
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            });
            if out.contains_key(&tp) {
                out.insert(tp, committed);
            }
        }
    }
    Ok(out)
}
