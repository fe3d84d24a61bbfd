//! Membership (Kafka's `GroupCoordinator`): JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! rebalances and their timers, driven by [`GroupCoordinator::run`]. Must not hold a lock
//! across an `.await`, nor take the groups-map lock while holding a group's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::codes;
use super::metadata::{
    Group, GroupState, JoinOutcome, JoinTimer, Member, Protocol, SyncOutcome,
    NEW_MEMBER_JOIN_TIMEOUT_MS,
};
use super::records::{self, fits_string};
use super::{ConsumerGroupSettings, GroupConfig, GroupStore};

/// Kafka's `offsets.retention.check.interval.ms` default.
pub(crate) const OFFSETS_RETENTION_CHECK_INTERVAL_MS: u64 = 600_000;

/// When a rebalance ends with members but none of them rejoined, the join phase is started
/// again; this floor keeps a zero rebalance timeout from spinning.
const MIN_REJOIN_WAIT_MS: u64 = 1_000;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Timers never wait longer than this (~50 days, twice the largest i32 timeout), so that a
/// huge configured delay cannot overflow the clock.
const MAX_TIMER_MS: u64 = 2 * i32::MAX as u64;

fn ms(duration_ms: u64) -> Duration {
    Duration::from_millis(duration_ms.min(MAX_TIMER_MS))
}

/// Member ids are `<client id or instance id>-<uuid>`; the prefix is capped so that the id
/// always fits the i16-length strings of a GroupMetadataValue.
const MEMBER_ID_PREFIX_MAX_BYTES: usize = 1024;

fn member_id_prefix(s: &str) -> &str {
    if s.len() <= MEMBER_ID_PREFIX_MAX_BYTES {
        return s;
    }
    let mut end = MEMBER_ID_PREFIX_MAX_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The consumer group coordinator. Create with [`GroupCoordinator::new`], replay
/// `__consumer_offsets` with `load`, spawn [`GroupCoordinator::run`], then serve requests.
pub struct GroupCoordinator {
    pub(super) config: GroupConfig,
    /// Groups' own settings (group configs), by group id.
    group_settings: RwLock<HashMap<String, ConsumerGroupSettings>>,
    pub(super) store: Arc<dyn GroupStore>,
    pub(super) groups: Mutex<HashMap<String, Arc<Mutex<Group>>>>,
    /// Wall clock derived from the (pausable) tokio clock, so timestamps and timers agree.
    base_instant: Instant,
    base_wall_ms: i64,
    /// The earliest deadline `run` sleeps towards; `None` while it is recomputing.
    wake_at: Mutex<Option<Instant>>,
    wake: Notify,
}

/// A JoinGroup/SyncGroup answer, now or later.
pub(crate) enum Step<T> {
    Done(T),
    Wait(oneshot::Receiver<T>),
}

/// A JoinGroup request, decoded once.
struct JoinParams {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    rebalance_timeout_ms: i32,
    session_timeout_ms: i32,
    protocol_type: String,
    protocols: Vec<Protocol>,
    require_known_member_id: bool,
    supports_skip_assignment: bool,
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig, store: Arc<dyn GroupStore>) -> Arc<Self> {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Arc::new(GroupCoordinator {
            config,
            group_settings: RwLock::new(HashMap::new()),
            store,
            groups: Mutex::new(HashMap::new()),
            base_instant: Instant::now(),
            base_wall_ms: wall,
            wake_at: Mutex::new(None),
            wake: Notify::new(),
        })
    }

    /// Replaces every group's own settings (a group config changed): each applies from the
    /// group's next heartbeat.
    pub fn set_group_settings(&self, all: HashMap<String, ConsumerGroupSettings>) {
        *self
            .group_settings
            .write()
            .unwrap_or_else(PoisonError::into_inner) = all;
    }

    /// The session timeout and heartbeat interval of consumer-protocol group `group`: its
    /// own, else the broker's.
    pub(super) fn consumer_timing(&self, group: &str) -> (i32, i32) {
        let own = self
            .group_settings
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(group)
            .copied()
            .unwrap_or_default();
        (
            own.session_timeout_ms
                .unwrap_or(self.config.consumer_session_timeout_ms),
            own.heartbeat_interval_ms
                .unwrap_or(self.config.consumer_heartbeat_interval_ms),
        )
    }

    /// The `__consumer_offsets` partition of a group: Kafka's
    /// `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`.
    pub fn partition_for(&self, group_id: &str) -> i32 {
        let hash = group_id.encode_utf16().fold(0i32, |h, unit| {
            h.wrapping_mul(31).wrapping_add(i32::from(unit))
        });
        let abs = if hash == i32::MIN { 0 } else { hash.abs() };
        abs % self.config.offsets_topic_partitions.max(1)
    }

    // -----------------------------------------------------------------------------------------
    // Clock, timers, the groups map, persistence.

    pub(super) fn now_ms(&self) -> i64 {
        let elapsed = Instant::now().saturating_duration_since(self.base_instant);
        self.base_wall_ms
            .saturating_add(i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
    }

    /// Makes `run` wake up by `deadline`.
    pub(super) fn schedule(&self, deadline: Instant) {
        let mut wake_at = lock(&self.wake_at);
        if wake_at.is_none_or(|current| deadline < current) {
            *wake_at = Some(deadline);
            drop(wake_at);
            self.wake.notify_one();
        }
    }

    fn schedule_heartbeat(&self, member: &mut Member, timeout_ms: u64) {
        let deadline = Instant::now() + ms(timeout_ms);
        member.heartbeat_deadline = Some(deadline);
        self.schedule(deadline);
    }

    /// Kafka's `completeAndScheduleNextHeartbeatExpiration`.
    pub(super) fn heartbeat_member(&self, group: &mut Group, member_id: &str) {
        if let Some(member) = group.members.get_mut(member_id) {
            let timeout = u64::try_from(member.session_timeout_ms).unwrap_or(0);
            self.schedule_heartbeat(member, timeout);
        }
    }

    pub(super) fn get_group(&self, group_id: &str) -> Option<Arc<Mutex<Group>>> {
        lock(&self.groups).get(group_id).cloned()
    }

    /// The group, created Empty if unknown (or if only a Dead one is left in the map). Never
    /// takes a group's lock while holding the map's.
    pub(super) fn get_or_create_group(&self, group_id: &str) -> Arc<Mutex<Group>> {
        let dead = match self.get_group(group_id) {
            Some(group) if !lock(&group).is(GroupState::Dead) => return group,
            other => other,
        };
        let mut groups = lock(&self.groups);
        if let Some(current) = groups.get(group_id) {
            // Someone else created it meanwhile, or it is not the Dead one we saw.
            if dead.as_ref().is_none_or(|d| !Arc::ptr_eq(d, current)) {
                return current.clone();
            }
        }
        let group = Arc::new(Mutex::new(Group::new(group_id.to_owned(), self.now_ms())));
        groups.insert(group_id.to_owned(), group.clone());
        group
    }

    /// Drops a Dead group from the map (unless the map already holds a newer one).
    pub(super) fn forget_group(&self, group_id: &str, group: &Arc<Mutex<Group>>) {
        let mut groups = lock(&self.groups);
        if groups.get(group_id).is_some_and(|g| Arc::ptr_eq(g, group)) {
            groups.remove(group_id);
        }
    }

    pub(super) fn snapshot_groups(&self) -> Vec<(String, Arc<Mutex<Group>>)> {
        lock(&self.groups)
            .iter()
            .map(|(id, g)| (id.clone(), g.clone()))
            .collect()
    }

    /// Kafka's `storeGroup`: writes the GroupMetadataValue (with these assignments, or the
    /// members' current ones). Errors come back translated as Kafka does.
    fn store_group(
        &self,
        group: &Group,
        assignments: Option<&HashMap<String, Bytes>>,
    ) -> Result<(), i16> {
        let value = group.metadata_value(assignments);
        let key = records::encode_group_key(&group.group_id);
        let value = records::encode_group_value(&value);
        let (key, value) = match (key, value) {
            (Ok(k), Ok(v)) => (k, v),
            (Err(e), _) | (_, Err(e)) => {
                warn!(group = %group.group_id, "cannot encode group metadata: {e}");
                return Err(codes::UNKNOWN_SERVER_ERROR);
            }
        };
        let partition = self.partition_for(&group.group_id);
        self.store
            .append(partition, vec![(key, Some(value))], self.now_ms())
            .map_err(|code| {
                warn!(group = %group.group_id, code, "failed to store group metadata");
                codes::for_group_store(code)
            })
    }

    // -----------------------------------------------------------------------------------------
    // JoinGroup.

    /// Kafka's `handleJoinGroup`. Parks until the join phase completes when a rebalance runs.
    pub async fn join_group(
        self: &Arc<Self>,
        req: JoinGroupRequest,
        version: i16,
        client_id: &str,
        client_host: &str,
    ) -> JoinGroupResponse {
        let member_id = req.member_id.as_str().to_owned();
        let outcome = match self.handle_join(req, version, client_id, client_host) {
            Step::Done(outcome) => outcome,
            Step::Wait(rx) => rx.await.unwrap_or_else(|_| {
                JoinOutcome::error(member_id, codes::COORDINATOR_NOT_AVAILABLE)
            }),
        };
        join_response(outcome, version)
    }

    fn handle_join(
        &self,
        req: JoinGroupRequest,
        version: i16,
        client_id: &str,
        client_host: &str,
    ) -> Step<JoinOutcome> {
        let group_id = req.group_id.0.as_str();
        let member_id = req.member_id.as_str().to_owned();
        if group_id.is_empty() || !fits_string(group_id) {
            return Step::Done(JoinOutcome::error(member_id, codes::INVALID_GROUP_ID));
        }
        let session_timeout_ms = req.session_timeout_ms;
        if session_timeout_ms < self.config.min_session_timeout_ms
            || session_timeout_ms > self.config.max_session_timeout_ms
        {
            return Step::Done(JoinOutcome::error(
                member_id,
                codes::INVALID_SESSION_TIMEOUT,
            ));
        }
        let group_instance_id = if version >= 5 {
            req.group_instance_id
                .as_ref()
                .map(|s| s.as_str().to_owned())
        } else {
            None
        };
        // The first protocol of a name wins, as in Kafka's keyed collection.
        let mut protocols: Vec<Protocol> = Vec::with_capacity(req.protocols.len());
        for p in &req.protocols {
            if !protocols.iter().any(|q| q.name == p.name.as_str()) {
                protocols.push(Protocol {
                    name: p.name.as_str().to_owned(),
                    metadata: p.metadata.clone(),
                });
            }
        }
        let protocol_type = req.protocol_type.as_str().to_owned();
        // Everything below ends up in a GroupMetadataValue with i16 string lengths.
        let persistable = fits_string(&member_id)
            && fits_string(&protocol_type)
            && fits_string(client_id)
            && fits_string(client_host)
            && group_instance_id.as_deref().is_none_or(fits_string)
            && protocols.iter().all(|p| fits_string(&p.name));
        if !persistable {
            return Step::Done(JoinOutcome::error(member_id, codes::INVALID_REQUEST));
        }
        let params = JoinParams {
            member_id,
            require_known_member_id: version >= 4 && group_instance_id.is_none(),
            group_instance_id,
            client_id: client_id.to_owned(),
            client_host: client_host.to_owned(),
            // JoinGroup v0 has no rebalance timeout: Kafka uses the session timeout.
            rebalance_timeout_ms: if version == 0 {
                session_timeout_ms
            } else {
                req.rebalance_timeout_ms
            },
            session_timeout_ms,
            protocol_type,
            protocols,
            supports_skip_assignment: version >= 9,
        };

        let is_unknown = params.member_id.is_empty();
        let group = if is_unknown {
            self.get_or_create_group(group_id)
        } else {
            match self.get_group(group_id) {
                Some(group) => group,
                None => {
                    return Step::Done(JoinOutcome::error(
                        params.member_id,
                        codes::UNKNOWN_MEMBER_ID,
                    ))
                }
            }
        };
        let mut g = lock(&group);
        if let Some(consumer) = &g.consumer {
            if !consumer.members.is_empty() {
                // Kafka with `group.consumer.migration.policy` disabled: classic members
                // cannot join a group of consumer-protocol members.
                return Step::Done(JoinOutcome::error(
                    params.member_id,
                    codes::INCONSISTENT_GROUP_PROTOCOL,
                ));
            }
            // An empty consumer-protocol group becomes classic on first use, as in Kafka.
            info!(group = %group_id, "the empty consumer-protocol group becomes a classic group");
            g.consumer = None;
            g.protocol_type = None;
        }
        let step = if !self.accept_joining_member(&g, &params.member_id) {
            if let Some(mut removed) = g.remove_member(&params.member_id) {
                removed.answer_join(JoinOutcome::error("", codes::GROUP_MAX_SIZE_REACHED));
                removed.answer_sync(SyncOutcome::error(codes::GROUP_MAX_SIZE_REACHED));
            }
            Step::Done(JoinOutcome::error("", codes::GROUP_MAX_SIZE_REACHED))
        } else if is_unknown {
            self.join_new_member(&mut g, params)
        } else {
            self.join_current_member(&mut g, params)
        };
        if g.is(GroupState::PreparingRebalance) {
            self.maybe_complete_join(&mut g);
        }
        step
    }

    /// Kafka's `acceptJoiningMember` (group.max.size).
    fn accept_joining_member(&self, g: &Group, member_id: &str) -> bool {
        let max = self.config.max_size;
        match g.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                g.members
                    .get(member_id)
                    .is_some_and(Member::is_awaiting_join)
                    || g.num_awaiting_join() < max
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                g.members.contains_key(member_id) || g.members.len() < max
            }
        }
    }

    /// Kafka's `doNewMemberJoinGroup`: a JoinGroup without a member id.
    fn join_new_member(&self, g: &mut Group, p: JoinParams) -> Step<JoinOutcome> {
        if g.is(GroupState::Dead) {
            return Step::Done(JoinOutcome::error("", codes::COORDINATOR_NOT_AVAILABLE));
        }
        if !g.supports_protocols(&p.protocol_type, &p.protocols) {
            return Step::Done(JoinOutcome::error("", codes::INCONSISTENT_GROUP_PROTOCOL));
        }
        let prefix = member_id_prefix(p.group_instance_id.as_deref().unwrap_or(&p.client_id));
        let new_member_id = format!("{prefix}-{}", uuid::Uuid::new_v4());
        match p.group_instance_id.clone() {
            Some(instance) => match g.static_member_id(&instance).map(str::to_owned) {
                Some(old_member_id) => {
                    info!(group = %g.group_id, %instance, %old_member_id, %new_member_id,
                        "static member rejoins with a new member id");
                    self.update_static_member_and_rebalance(
                        g,
                        &old_member_id,
                        &new_member_id,
                        &instance,
                        p,
                    )
                }
                None => self.add_member_and_rebalance(g, new_member_id, p),
            },
            None if p.require_known_member_id => {
                let deadline =
                    Instant::now() + ms(u64::try_from(p.session_timeout_ms).unwrap_or(0));
                g.pending_members.insert(new_member_id.clone(), deadline);
                self.schedule(deadline);
                debug!(group = %g.group_id, %new_member_id, "member id required");
                Step::Done(JoinOutcome::error(new_member_id, codes::MEMBER_ID_REQUIRED))
            }
            None => self.add_member_and_rebalance(g, new_member_id, p),
        }
    }

    /// Kafka's `doCurrentMemberJoinGroup`: a JoinGroup with a member id.
    fn join_current_member(&self, g: &mut Group, p: JoinParams) -> Step<JoinOutcome> {
        let member_id = p.member_id.clone();
        if g.is(GroupState::Dead) {
            return Step::Done(JoinOutcome::error(
                member_id,
                codes::COORDINATOR_NOT_AVAILABLE,
            ));
        }
        if !g.supports_protocols(&p.protocol_type, &p.protocols) {
            return Step::Done(JoinOutcome::error(
                member_id,
                codes::INCONSISTENT_GROUP_PROTOCOL,
            ));
        }
        if g.pending_members.contains_key(&member_id) {
            if p.group_instance_id.is_some() {
                // Static members never get MEMBER_ID_REQUIRED; this id is not theirs.
                g.pending_members.remove(&member_id);
                return Step::Done(JoinOutcome::error(member_id, codes::UNKNOWN_MEMBER_ID));
            }
            return self.add_member_and_rebalance(g, member_id, p);
        }
        if let Err(error) = g.validate_current_member(&member_id, p.group_instance_id.as_deref()) {
            return Step::Done(JoinOutcome::error(member_id, error));
        }
        let (is_leader, matches) = match g.members.get(&member_id) {
            Some(m) => (g.is_leader(&member_id), m.matches(&p.protocols)),
            None => return Step::Done(JoinOutcome::error(member_id, codes::UNKNOWN_MEMBER_ID)),
        };
        match g.state {
            GroupState::PreparingRebalance => self.update_member_and_rebalance(g, &member_id, p),
            GroupState::CompletingRebalance if matches => {
                // A retry of a JoinGroup whose answer was lost: answer it again.
                Step::Done(self.current_generation_outcome(g, &member_id, is_leader))
            }
            GroupState::Stable if matches && !is_leader => {
                // A follower with unchanged metadata: no rebalance, straight to SyncGroup.
                Step::Done(self.current_generation_outcome(g, &member_id, false))
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                // Changed metadata, or the leader asking for a new assignment.
                self.update_member_and_rebalance(g, &member_id, p)
            }
            GroupState::Empty | GroupState::Dead => {
                Step::Done(JoinOutcome::error(member_id, codes::UNKNOWN_MEMBER_ID))
            }
        }
    }

    fn current_generation_outcome(
        &self,
        g: &Group,
        member_id: &str,
        with_members: bool,
    ) -> JoinOutcome {
        JoinOutcome {
            error: codes::NONE,
            generation_id: g.generation_id,
            protocol_type: g.protocol_type.clone(),
            protocol_name: g.protocol_name.clone(),
            leader: g.leader_id.clone().unwrap_or_default(),
            skip_assignment: false,
            member_id: member_id.to_owned(),
            members: if with_members {
                g.current_member_metadata()
            } else {
                Vec::new()
            },
        }
    }

    /// Kafka's `addMemberAndRebalance`.
    fn add_member_and_rebalance(
        &self,
        g: &mut Group,
        member_id: String,
        p: JoinParams,
    ) -> Step<JoinOutcome> {
        let (tx, rx) = oneshot::channel();
        let mut member = Member {
            member_id,
            group_instance_id: p.group_instance_id,
            client_id: p.client_id,
            client_host: p.client_host,
            rebalance_timeout_ms: p.rebalance_timeout_ms,
            session_timeout_ms: p.session_timeout_ms,
            protocol_type: p.protocol_type,
            protocols: p.protocols,
            assignment: Bytes::new(),
            awaiting_join: Some(tx),
            awaiting_sync: None,
            is_new: true,
            heartbeat_deadline: None,
        };
        // A new member cannot heartbeat before its first JoinGroup answer; Kafka gives it
        // NewMemberJoinTimeoutMs instead of the session timeout.
        self.schedule_heartbeat(&mut member, NEW_MEMBER_JOIN_TIMEOUT_MS);
        if g.is(GroupState::PreparingRebalance) && g.generation_id == 0 {
            g.new_member_added = true;
        }
        info!(group = %g.group_id, member = %member.member_id,
            instance = ?member.group_instance_id, "new member joins");
        g.add_member(member);
        self.maybe_prepare_rebalance(g, "new member joined");
        Step::Wait(rx)
    }

    fn update_member(member: &mut Member, p: JoinParams) -> oneshot::Receiver<JoinOutcome> {
        member.protocols = p.protocols;
        member.rebalance_timeout_ms = p.rebalance_timeout_ms;
        member.session_timeout_ms = p.session_timeout_ms;
        member.park_join()
    }

    /// Kafka's `updateMemberAndRebalance`.
    fn update_member_and_rebalance(
        &self,
        g: &mut Group,
        member_id: &str,
        p: JoinParams,
    ) -> Step<JoinOutcome> {
        let Some(member) = g.members.get_mut(member_id) else {
            return Step::Done(JoinOutcome::error(member_id, codes::UNKNOWN_MEMBER_ID));
        };
        let rx = Self::update_member(member, p);
        self.maybe_prepare_rebalance(g, "member rejoined");
        Step::Wait(rx)
    }

    /// Kafka's `updateStaticMemberAndRebalance`: a known group.instance.id joins without its
    /// member id (a restarted static member). It takes over the old member's place; in a
    /// Stable group whose protocol would not change it gets the current generation without a
    /// rebalance.
    fn update_static_member_and_rebalance(
        &self,
        g: &mut Group,
        old_member_id: &str,
        new_member_id: &str,
        instance: &str,
        p: JoinParams,
    ) -> Step<JoinOutcome> {
        let current_leader = g.leader_id.clone().unwrap_or_default();
        if !g.replace_static_member(instance, old_member_id, new_member_id) {
            return Step::Done(JoinOutcome::error("", codes::UNKNOWN_MEMBER_ID));
        }
        self.heartbeat_member(g, new_member_id);
        let supports_skip_assignment = p.supports_skip_assignment;
        let Some(member) = g.members.get_mut(new_member_id) else {
            return Step::Done(JoinOutcome::error("", codes::UNKNOWN_MEMBER_ID));
        };
        let old_protocols = member.protocols.clone();
        let old_rebalance_timeout = member.rebalance_timeout_ms;
        let old_session_timeout = member.session_timeout_ms;
        let rx = Self::update_member(member, p);

        match g.state {
            GroupState::Stable => {
                if g.select_protocol() != g.protocol_name {
                    self.maybe_prepare_rebalance(g, "static member changed the group protocol");
                    return Step::Wait(rx);
                }
                // Persist the new member id; on failure, undo the replacement.
                if let Err(error) = self.store_group(g, None) {
                    if let Some(member) = g.members.get_mut(new_member_id) {
                        member.protocols = old_protocols;
                        member.rebalance_timeout_ms = old_rebalance_timeout;
                        member.session_timeout_ms = old_session_timeout;
                        member.answer_join(JoinOutcome {
                            error,
                            generation_id: g.generation_id,
                            protocol_type: g.protocol_type.clone(),
                            protocol_name: g.protocol_name.clone(),
                            leader: current_leader.clone(),
                            skip_assignment: false,
                            member_id: String::new(),
                            members: Vec::new(),
                        });
                    }
                    g.replace_static_member(instance, new_member_id, old_member_id);
                    self.heartbeat_member(g, old_member_id);
                    return Step::Wait(rx);
                }
                let is_leader = g.is_leader(new_member_id);
                let outcome = if supports_skip_assignment {
                    // JoinGroup v9+: the leader learns it leads but must not reassign.
                    JoinOutcome {
                        members: if is_leader {
                            g.current_member_metadata()
                        } else {
                            Vec::new()
                        },
                        skip_assignment: is_leader,
                        ..self.current_generation_outcome(g, new_member_id, false)
                    }
                } else {
                    // Older clients get the old leader id, so that a rejoining leader does
                    // not compute an assignment a Stable group would ignore.
                    JoinOutcome {
                        leader: current_leader,
                        ..self.current_generation_outcome(g, new_member_id, false)
                    }
                };
                if let Some(member) = g.members.get_mut(new_member_id) {
                    member.answer_join(outcome);
                }
            }
            GroupState::CompletingRebalance => {
                // The leader may be assigning to the old member id: start over.
                self.prepare_rebalance(g, "static member rejoined during CompletingRebalance");
            }
            GroupState::PreparingRebalance => {}
            GroupState::Empty | GroupState::Dead => {
                if let Some(member) = g.members.get_mut(new_member_id) {
                    member.answer_join(JoinOutcome::error("", codes::UNKNOWN_MEMBER_ID));
                }
            }
        }
        Step::Wait(rx)
    }

    fn maybe_prepare_rebalance(&self, g: &mut Group, reason: &str) {
        if g.can_rebalance() {
            self.prepare_rebalance(g, reason);
        }
    }

    /// Kafka's `prepareRebalance`.
    fn prepare_rebalance(&self, g: &mut Group, reason: &str) {
        if g.is(GroupState::CompletingRebalance) {
            self.reset_and_propagate_assignment_error(g, codes::REBALANCE_IN_PROGRESS);
        }
        g.pending_sync_members.clear();
        g.sync_timer = None;
        let now = Instant::now();
        let rebalance_timeout = g.rebalance_timeout_ms();
        let timer = if g.is(GroupState::Empty) {
            let delay = self.config.initial_rebalance_delay_ms;
            JoinTimer::InitialDelay {
                deadline: now + ms(delay),
                remaining_ms: rebalance_timeout.saturating_sub(delay),
            }
        } else {
            JoinTimer::Rebalance {
                deadline: now + ms(rebalance_timeout),
            }
        };
        info!(group = %g.group_id, state = g.state.name(), generation = g.generation_id,
            reason, "preparing to rebalance");
        g.transition_to(GroupState::PreparingRebalance, self.now_ms());
        g.join_timer = Some(timer);
        self.schedule(timer.deadline());
        self.maybe_complete_join(g);
    }

    /// Kafka's `tryCompleteJoin`: a normal join phase ends as soon as everyone rejoined.
    fn maybe_complete_join(&self, g: &mut Group) {
        let initial_delay = matches!(g.join_timer, Some(JoinTimer::InitialDelay { .. }));
        if g.is(GroupState::PreparingRebalance) && !initial_delay && g.has_all_members_joined() {
            self.on_complete_join(g);
        }
    }

    /// Kafka's `onCompleteJoin`: the next generation begins.
    fn on_complete_join(&self, g: &mut Group) {
        g.join_timer = None;
        let not_rejoined: Vec<String> = g
            .members
            .values()
            .filter(|m| !m.is_awaiting_join() && m.group_instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in not_rejoined {
            info!(group = %g.group_id, member = %member_id, "removing member that did not rejoin");
            if let Some(mut member) = g.remove_member(&member_id) {
                member.answer_sync(SyncOutcome::error(codes::UNKNOWN_MEMBER_ID));
            }
        }
        if g.is(GroupState::Dead) {
            return;
        }
        if !g.maybe_elect_new_joined_leader() && !g.members.is_empty() {
            // Only static members are left and none of them rejoined: wait another round.
            let wait = g.rebalance_timeout_ms().max(MIN_REJOIN_WAIT_MS);
            let deadline = Instant::now() + ms(wait);
            g.join_timer = Some(JoinTimer::Rebalance { deadline });
            self.schedule(deadline);
            warn!(group = %g.group_id, "no member rejoined; waiting another rebalance timeout");
            return;
        }
        g.init_next_generation(self.now_ms());
        if g.is(GroupState::Empty) {
            info!(group = %g.group_id, generation = g.generation_id, "group is now empty");
            if let Err(code) = self.store_group(g, None) {
                warn!(group = %g.group_id, code, "failed to write empty group metadata");
            }
            return;
        }
        info!(group = %g.group_id, generation = g.generation_id, members = g.members.len(),
            protocol = ?g.protocol_name, "group stabilized; awaiting sync");
        let leader_view = g.current_member_metadata();
        let base = self.current_generation_outcome(g, "", false);
        let ids: Vec<String> = g.members.keys().cloned().collect();
        for member_id in ids {
            let is_leader = g.is_leader(&member_id);
            if let Some(member) = g.members.get_mut(&member_id) {
                member.answer_join(JoinOutcome {
                    member_id: member_id.clone(),
                    members: if is_leader {
                        leader_view.clone()
                    } else {
                        Vec::new()
                    },
                    ..base.clone()
                });
                let timeout = u64::try_from(member.session_timeout_ms).unwrap_or(0);
                self.schedule_heartbeat(member, timeout);
                member.is_new = false;
            }
            g.pending_sync_members.insert(member_id);
        }
        let deadline = Instant::now() + ms(g.rebalance_timeout_ms());
        g.sync_timer = Some((deadline, g.generation_id));
        self.schedule(deadline);
    }

    fn reset_and_propagate_assignment_error(&self, g: &mut Group, error: i16) {
        for member in g.members.values_mut() {
            member.assignment = Bytes::new();
        }
        self.propagate_assignment(g, error);
    }

    /// Answers every parked SyncGroup with its member's assignment (or the error).
    fn propagate_assignment(&self, g: &mut Group, error: i16) {
        let (protocol_type, protocol_name) = if error == codes::NONE {
            (g.protocol_type.clone(), g.protocol_name.clone())
        } else {
            (None, None)
        };
        for member in g.members.values_mut() {
            let outcome = SyncOutcome {
                error,
                protocol_type: protocol_type.clone(),
                protocol_name: protocol_name.clone(),
                assignment: member.assignment.clone(),
            };
            if member.answer_sync(outcome) {
                let timeout = u64::try_from(member.session_timeout_ms).unwrap_or(0);
                self.schedule_heartbeat(member, timeout);
            }
        }
    }

    /// Kafka's `removeMemberAndUpdateGroup`.
    pub(super) fn remove_member_and_update_group(&self, g: &mut Group, member_id: &str) {
        if let Some(mut member) = g.remove_member(member_id) {
            member.answer_join(JoinOutcome::error("", codes::UNKNOWN_MEMBER_ID));
            member.answer_sync(SyncOutcome::error(codes::UNKNOWN_MEMBER_ID));
        }
        match g.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance(g, "member left or failed");
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(g),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    // -----------------------------------------------------------------------------------------
    // SyncGroup.

    /// Kafka's `handleSyncGroup`. Followers park until the leader's assignment arrives.
    pub async fn sync_group(
        self: &Arc<Self>,
        req: SyncGroupRequest,
        version: i16,
    ) -> SyncGroupResponse {
        let outcome = match self.handle_sync(req, version) {
            Step::Done(outcome) => outcome,
            Step::Wait(rx) => rx
                .await
                .unwrap_or_else(|_| SyncOutcome::error(codes::COORDINATOR_NOT_AVAILABLE)),
        };
        let mut resp = SyncGroupResponse::default();
        resp.throttle_time_ms = 0;
        resp.error_code = outcome.error;
        if version >= 5 {
            resp.protocol_type = outcome.protocol_type.map(sb);
            resp.protocol_name = outcome.protocol_name.map(sb);
        }
        resp.assignment = outcome.assignment;
        resp
    }

    fn handle_sync(&self, req: SyncGroupRequest, version: i16) -> Step<SyncOutcome> {
        let fail = |code| Step::Done(SyncOutcome::error(code));
        // v5 must name the protocol type and name it syncs for (Kafka's
        // `areMandatoryProtocolTypeAndNamePresent`).
        if version >= 5 && (req.protocol_type.is_none() || req.protocol_name.is_none()) {
            return fail(codes::INCONSISTENT_GROUP_PROTOCOL);
        }
        let group_id = req.group_id.0.as_str();
        if group_id.is_empty() {
            return fail(codes::INVALID_GROUP_ID);
        }
        let Some(group) = self.get_group(group_id) else {
            return fail(codes::UNKNOWN_MEMBER_ID);
        };
        let member_id = req.member_id.as_str();
        let instance = if version >= 3 {
            req.group_instance_id.as_ref().map(|s| s.as_str())
        } else {
            None
        };
        let mut g = lock(&group);
        if g.is(GroupState::Dead) {
            return fail(codes::COORDINATOR_NOT_AVAILABLE);
        }
        if let Err(error) = g.validate_current_member(member_id, instance) {
            return fail(error);
        }
        if req.generation_id != g.generation_id {
            return fail(codes::ILLEGAL_GENERATION);
        }
        if let Some(t) = &req.protocol_type {
            if g.protocol_type.as_deref() != Some(t.as_str()) {
                return fail(codes::INCONSISTENT_GROUP_PROTOCOL);
            }
        }
        if let Some(n) = &req.protocol_name {
            if g.protocol_name.as_deref() != Some(n.as_str()) {
                return fail(codes::INCONSISTENT_GROUP_PROTOCOL);
            }
        }
        match g.state {
            GroupState::Empty => fail(codes::UNKNOWN_MEMBER_ID),
            GroupState::PreparingRebalance => fail(codes::REBALANCE_IN_PROGRESS),
            GroupState::Dead => fail(codes::COORDINATOR_NOT_AVAILABLE),
            GroupState::CompletingRebalance => {
                let Some(member) = g.members.get_mut(member_id) else {
                    return fail(codes::UNKNOWN_MEMBER_ID);
                };
                let rx = member.park_sync();
                self.remove_pending_sync_member(&mut g, member_id);
                if g.is_leader(member_id) {
                    info!(group = %g.group_id, generation = g.generation_id,
                        "assignment received from the leader");
                    let mut assignment: HashMap<String, Bytes> = HashMap::new();
                    for a in req.assignments {
                        assignment.insert(a.member_id.as_str().to_owned(), a.assignment);
                    }
                    for id in g.members.keys() {
                        assignment.entry(id.clone()).or_default();
                    }
                    match self.store_group(&g, Some(&assignment)) {
                        Ok(()) => {
                            for member in g.members.values_mut() {
                                member.assignment =
                                    assignment.remove(&member.member_id).unwrap_or_default();
                            }
                            self.propagate_assignment(&mut g, codes::NONE);
                            let now_ms = self.now_ms();
                            g.transition_to(GroupState::Stable, now_ms);
                        }
                        Err(error) => {
                            self.reset_and_propagate_assignment_error(&mut g, error);
                            self.maybe_prepare_rebalance(&mut g, "failed to store the assignment");
                        }
                    }
                }
                Step::Wait(rx)
            }
            GroupState::Stable => {
                self.remove_pending_sync_member(&mut g, member_id);
                let outcome = SyncOutcome {
                    error: codes::NONE,
                    protocol_type: g.protocol_type.clone(),
                    protocol_name: g.protocol_name.clone(),
                    assignment: g
                        .members
                        .get(member_id)
                        .map(|m| m.assignment.clone())
                        .unwrap_or_default(),
                };
                self.heartbeat_member(&mut g, member_id);
                Step::Done(outcome)
            }
        }
    }

    fn remove_pending_sync_member(&self, g: &mut Group, member_id: &str) {
        g.pending_sync_members.remove(member_id);
        if g.pending_sync_members.is_empty() {
            g.sync_timer = None;
        }
    }

    // -----------------------------------------------------------------------------------------
    // Heartbeat and LeaveGroup.

    /// Kafka's `handleHeartbeat`.
    pub fn heartbeat(&self, req: HeartbeatRequest, version: i16) -> HeartbeatResponse {
        let mut resp = HeartbeatResponse::default();
        resp.throttle_time_ms = 0;
        resp.error_code = self.handle_heartbeat(&req, version);
        resp
    }

    fn handle_heartbeat(&self, req: &HeartbeatRequest, version: i16) -> i16 {
        let group_id = req.group_id.0.as_str();
        if group_id.is_empty() {
            return codes::INVALID_GROUP_ID;
        }
        let Some(group) = self.get_group(group_id) else {
            return codes::UNKNOWN_MEMBER_ID;
        };
        let member_id = req.member_id.as_str();
        let instance = if version >= 3 {
            req.group_instance_id.as_ref().map(|s| s.as_str())
        } else {
            None
        };
        let mut g = lock(&group);
        if g.is(GroupState::Dead) {
            return codes::COORDINATOR_NOT_AVAILABLE;
        }
        if let Err(error) = g.validate_current_member(member_id, instance) {
            return error;
        }
        if req.generation_id != g.generation_id {
            return codes::ILLEGAL_GENERATION;
        }
        match g.state {
            GroupState::Empty => codes::UNKNOWN_MEMBER_ID,
            GroupState::Dead => codes::COORDINATOR_NOT_AVAILABLE,
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.heartbeat_member(&mut g, member_id);
                codes::NONE
            }
            GroupState::PreparingRebalance => {
                self.heartbeat_member(&mut g, member_id);
                codes::REBALANCE_IN_PROGRESS
            }
        }
    }

    /// Kafka's `handleLeaveGroup`: v0–2 name one member id; v3+ a list of members by member
    /// id and/or group.instance.id, each with its own error.
    pub fn leave_group(&self, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
        let leaving: Vec<(String, Option<String>)> = if version >= 3 {
            req.members
                .iter()
                .map(|m| {
                    (
                        m.member_id.as_str().to_owned(),
                        m.group_instance_id.as_ref().map(|s| s.as_str().to_owned()),
                    )
                })
                .collect()
        } else {
            vec![(req.member_id.as_str().to_owned(), None)]
        };
        let (top_error, errors) = self.handle_leave(req.group_id.0.as_str(), &leaving);
        let mut resp = LeaveGroupResponse::default();
        resp.throttle_time_ms = 0;
        if version >= 3 {
            resp.error_code = top_error;
            resp.members = leaving
                .into_iter()
                .zip(errors)
                .map(|((member_id, instance), error)| {
                    let mut m = MemberResponse::default();
                    m.member_id = sb(member_id);
                    m.group_instance_id = instance.map(sb);
                    m.error_code = error;
                    m
                })
                .collect();
        } else {
            resp.error_code = if top_error != codes::NONE {
                top_error
            } else {
                errors
                    .into_iter()
                    .find(|e| *e != codes::NONE)
                    .unwrap_or(codes::NONE)
            };
        }
        resp
    }

    fn handle_leave(
        &self,
        group_id: &str,
        leaving: &[(String, Option<String>)],
    ) -> (i16, Vec<i16>) {
        if group_id.is_empty() {
            return (codes::INVALID_GROUP_ID, Vec::new());
        }
        let Some(group) = self.get_group(group_id) else {
            return (codes::NONE, vec![codes::UNKNOWN_MEMBER_ID; leaving.len()]);
        };
        let mut g = lock(&group);
        if g.is(GroupState::Dead) {
            return (codes::COORDINATOR_NOT_AVAILABLE, Vec::new());
        }
        let errors = leaving
            .iter()
            .map(|(member_id, instance)| {
                if member_id.is_empty() {
                    // Administrative removal of a static member by group.instance.id.
                    match instance
                        .as_deref()
                        .and_then(|i| g.static_member_id(i))
                        .map(str::to_owned)
                    {
                        Some(current) => {
                            info!(group = %g.group_id, member = %current, "static member removed by LeaveGroup");
                            self.remove_member_and_update_group(&mut g, &current);
                            codes::NONE
                        }
                        None => codes::UNKNOWN_MEMBER_ID,
                    }
                } else if g.pending_members.remove(member_id).is_some() {
                    if g.is(GroupState::PreparingRebalance) {
                        self.maybe_complete_join(&mut g);
                    }
                    codes::NONE
                } else {
                    match g.validate_current_member(member_id, instance.as_deref()) {
                        Ok(()) => {
                            info!(group = %g.group_id, member = %member_id, "member left");
                            self.remove_member_and_update_group(&mut g, member_id);
                            codes::NONE
                        }
                        Err(error) => error,
                    }
                }
            })
            .collect();
        (codes::NONE, errors)
    }

    // -----------------------------------------------------------------------------------------
    // The background task.

    /// Background duties until `shutdown` flips to true (or its sender goes away): member
    /// session expiry, rebalance and pending-sync timeouts, the initial rebalance delay, and
    /// expiry of committed offsets every `offsets.retention.check.interval.ms` (600 s).
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let interval = ms(OFFSETS_RETENTION_CHECK_INTERVAL_MS);
        let mut next_offsets_check = Instant::now() + interval;
        loop {
            if *shutdown.borrow() {
                break;
            }
            // While `wake_at` is None every new deadline notifies: none is missed while the
            // next wake-up is being computed.
            *lock(&self.wake_at) = None;
            let now = Instant::now();
            let next_timer = self.process_timers(now);
            if now >= next_offsets_check {
                self.cleanup_expired_offsets();
                next_offsets_check = now + interval;
            }
            let wake = next_timer.map_or(next_offsets_check, |t| t.min(next_offsets_check));
            let wake = {
                let mut wake_at = lock(&self.wake_at);
                let wake = wake_at.map_or(wake, |w| w.min(wake));
                *wake_at = Some(wake);
                wake
            };
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = self.wake.notified() => {}
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
            }
        }
        debug!("group coordinator background task stopped");
    }

    /// Fires every due timer of every group; returns the earliest one left.
    pub(super) fn process_timers(&self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for (_, group) in self.snapshot_groups() {
            let mut g = lock(&group);
            if g.is(GroupState::Dead) {
                continue;
            }
            self.process_group_timers(&mut g, now);
            if let Some(deadline) = g.next_deadline() {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
            }
        }
        next
    }

    fn process_group_timers(&self, g: &mut Group, now: Instant) {
        self.process_consumer_timers(g, now);
        // Member ids handed out with MEMBER_ID_REQUIRED that never came back.
        let expired_pending: Vec<String> = g
            .pending_members
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        if !expired_pending.is_empty() {
            for id in &expired_pending {
                debug!(group = %g.group_id, member = %id, "pending member expired");
                g.pending_members.remove(id);
            }
            self.maybe_complete_join(g);
        }

        // Sessions (Kafka's DelayedHeartbeat).
        let due: Vec<String> = g
            .members
            .values()
            .filter(|m| m.heartbeat_deadline.is_some_and(|d| d <= now))
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in due {
            let Some(member) = g.members.get_mut(&member_id) else {
                continue;
            };
            if member.heartbeat_deadline.is_none_or(|d| d > now) {
                continue; // answered and rescheduled meanwhile
            }
            if !member.is_new && member.is_parked() {
                // A parked call counts as a heartbeat; the session restarts when it is answered.
                member.heartbeat_deadline = None;
                continue;
            }
            info!(group = %g.group_id, member = %member_id, "member session expired; removing it");
            self.remove_member_and_update_group(g, &member_id);
        }

        // The join phase (Kafka's InitialDelayedJoin / DelayedJoin).
        if g.is(GroupState::PreparingRebalance) {
            match g.join_timer {
                Some(JoinTimer::InitialDelay {
                    deadline,
                    remaining_ms,
                }) if deadline <= now => {
                    if g.new_member_added && remaining_ms > 0 {
                        g.new_member_added = false;
                        let delay = self.config.initial_rebalance_delay_ms.min(remaining_ms);
                        let deadline = now + ms(delay);
                        g.join_timer = Some(JoinTimer::InitialDelay {
                            deadline,
                            remaining_ms: remaining_ms - delay,
                        });
                        self.schedule(deadline);
                    } else {
                        self.on_complete_join(g);
                    }
                }
                Some(JoinTimer::Rebalance { deadline }) if deadline <= now => {
                    self.on_complete_join(g);
                }
                None => self.on_complete_join(g),
                Some(_) => {}
            }
        }

        // Members that got their JoinGroup answer but never sent SyncGroup (Kafka's DelayedSync).
        if let Some((deadline, generation)) = g.sync_timer {
            if deadline <= now {
                g.sync_timer = None;
                let syncing = matches!(
                    g.state,
                    GroupState::CompletingRebalance | GroupState::Stable
                );
                if generation == g.generation_id && syncing && !g.pending_sync_members.is_empty() {
                    let missing: Vec<String> = g.pending_sync_members.drain().collect();
                    info!(group = %g.group_id, ?missing, "members did not sync in time; removing them");
                    for member_id in &missing {
                        if let Some(mut member) = g.remove_member(member_id) {
                            member.answer_join(JoinOutcome::error("", codes::UNKNOWN_MEMBER_ID));
                            member.answer_sync(SyncOutcome::error(codes::UNKNOWN_MEMBER_ID));
                        }
                    }
                    self.prepare_rebalance(g, "pending sync expired");
                }
            }
        }
    }
}

/// A JoinGroup answered with `error` before it reaches the group (the client may not
/// read the group).
pub fn join_group_error(member_id: &str, version: i16, error: i16) -> JoinGroupResponse {
    join_response(JoinOutcome::error(member_id, error), version)
}

/// Builds a JoinGroup response for the request's version.
fn join_response(o: JoinOutcome, version: i16) -> JoinGroupResponse {
    let mut resp = JoinGroupResponse::default();
    resp.throttle_time_ms = 0;
    resp.error_code = o.error;
    resp.generation_id = o.generation_id;
    if version >= 7 {
        resp.protocol_type = o.protocol_type.map(sb);
        resp.protocol_name = o.protocol_name.map(sb);
    } else {
        // Not nullable before v7.
        resp.protocol_type = None;
        resp.protocol_name = Some(sb(o.protocol_name.unwrap_or_default()));
    }
    resp.leader = sb(o.leader);
    resp.skip_assignment = version >= 9 && o.skip_assignment;
    resp.member_id = sb(o.member_id);
    resp.members = o
        .members
        .into_iter()
        .map(|m| {
            let mut member = JoinGroupResponseMember::default();
            member.member_id = sb(m.member_id);
            member.group_instance_id = if version >= 5 {
                m.group_instance_id.map(sb)
            } else {
                None
            };
            member.metadata = m.metadata;
            member
        })
        .collect();
    resp
}
