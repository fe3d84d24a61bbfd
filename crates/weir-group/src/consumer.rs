//! The KIP-848 consumer group protocol: ConsumerGroupHeartbeat and ConsumerGroupDescribe.
//!
//! The coordinator, not a group leader, assigns the partitions: each heartbeat carries the
//! member's subscription (and, when it changed, the partitions it owns); a change to any
//! member's subscription, to the members, or to the subscribed topics bumps the group
//! epoch; the next heartbeat computes the target assignment for that epoch with a
//! server-side assignor (`assignor`); each member then moves towards its target on its own
//! (Kafka's `CurrentAssignmentBuilder`): it first gives up what it must revoke (keeping its
//! epoch), and only then takes the new partitions nobody else still holds, at the new
//! epoch. A partition is never held by two members at once.
//!
//! Kafka's rules, our code. Deliberate differences, each harmless to clients:
//! - Membership is not persisted (Kafka writes ConsumerGroupMember* records): after a
//!   restart or a coordinator move the members get UNKNOWN_MEMBER_ID, rejoin at epoch 0 and
//!   are assigned again; committed offsets are kept as for classic groups.
//! - A heartbeat at epoch 0 from a member id the group knows fences the old incarnation
//!   (its partitions are released) and joins a new one.
//! - A heartbeat at epoch > 0 for a group this coordinator does not know answers
//!   UNKNOWN_MEMBER_ID, so the member rejoins (e.g. after a restart).
//! - Classic members cannot join a group with consumer-protocol members
//!   (INCONSISTENT_GROUP_PROTOCOL), as in Kafka with `group.consumer.migration.policy`
//!   disabled; an empty group changes type on first use either way.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use indexmap::IndexMap;
use kafka_protocol::messages::consumer_group_describe_response as describe;
use kafka_protocol::messages::consumer_group_heartbeat_response as heartbeat;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, GroupId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use regex::Regex;
use tokio::time::Instant;
use tracing::info;
use uuid::Uuid;

use super::assignor::{self, Assignment, AssignorMember, ASSIGNORS};
use super::codes;
use super::coordinator::{lock, GroupCoordinator};
use super::metadata::{Group, GroupState, CONSUMER_PROTOCOL_TYPE};
use super::records::fits_string;

/// The member epoch of a heartbeat that leaves the group.
const LEAVE_GROUP_EPOCH: i32 = -1;
/// The member epoch of a static member leaving for now (its instance id keeps its place).
const LEAVE_GROUP_STATIC_EPOCH: i32 = -2;

/// A topic as the coordinator needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
}

/// What the broker tells the coordinator about its topics, at the moment of a request.
pub trait TopicCatalog {
    fn by_name(&self, name: &str) -> Option<TopicInfo>;
    /// Every topic a regular-expression subscription may match (internal topics are not).
    fn matchable(&self) -> Vec<TopicInfo>;
}

/// Where a member is on its way to its target assignment (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemberState {
    /// It holds its whole target (or waits for nothing).
    Stable,
    /// It must give up partitions first; it keeps its epoch until it says it did.
    UnrevokedPartitions,
    /// It is at the new epoch, but some of its target is still held by others.
    UnreleasedPartitions,
}

/// One member of a consumer-protocol group (Kafka's `ConsumerGroupMember`).
#[derive(Debug, Clone)]
pub(crate) struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    pub topic_names: BTreeSet<String>,
    pub regex: Option<Regex>,
    pub assigned: Assignment,
    pub revoking: Assignment,
    /// The member is removed unless it heartbeats before this.
    pub session_deadline: Instant,
    /// While it has partitions to revoke: it is removed unless it has by then.
    pub revocation_deadline: Option<Instant>,
    /// A static member that left with epoch -2: its place waits for its instance id.
    pub left_static: bool,
}

impl ConsumerMember {
    fn subscribes_to(&self, topic: &str) -> bool {
        self.topic_names.contains(topic) || self.regex.as_ref().is_some_and(|r| r.is_match(topic))
    }

    pub(crate) fn next_deadline(&self) -> Instant {
        match self.revocation_deadline {
            Some(d) => d.min(self.session_deadline),
            None => self.session_deadline,
        }
    }
}

/// The consumer-protocol side of a group (Kafka's `ConsumerGroup`); committed offsets stay
/// in [`Group::offsets`], shared with the classic protocol.
#[derive(Debug)]
pub(crate) struct ConsumerGroup {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: IndexMap<String, ConsumerMember>,
    /// Each member's target assignment, as of `assignment_epoch`.
    pub target: HashMap<String, Assignment>,
    /// Who holds each partition now (assigned or still revoking): never two members.
    pub owners: HashMap<(Uuid, i32), String>,
    /// The subscribed topics as of the group epoch: name → (id, partition count).
    pub subscribed: BTreeMap<String, (Uuid, i32)>,
    /// The assignor of the last target assignment.
    pub assignor: String,
}

/// A new group's epoch, before its first member: Kafka 4's `ModernGroup` starts at 1, so the
/// first join makes epoch 2, and the epochs a client sees are Kafka's for the same history.
const NEW_GROUP_EPOCH: i32 = 1;

impl Default for ConsumerGroup {
    fn default() -> Self {
        Self {
            group_epoch: NEW_GROUP_EPOCH,
            assignment_epoch: 0,
            members: IndexMap::new(),
            target: HashMap::new(),
            owners: HashMap::new(),
            subscribed: BTreeMap::new(),
            assignor: String::new(),
        }
    }
}

impl ConsumerGroup {
    /// Kafka's ConsumerGroupState names.
    pub(crate) fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.group_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.state != MemberState::Stable || m.epoch != self.assignment_epoch)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    pub(crate) fn is_subscribed_to(&self, topic: &str) -> bool {
        self.members.values().any(|m| m.subscribes_to(topic))
    }

    fn topic_name(&self, id: &Uuid) -> Option<&str> {
        self.subscribed
            .iter()
            .find(|(_, (tid, _))| tid == id)
            .map(|(name, _)| name.as_str())
    }

    /// Removes a member, releasing what it holds; bumps the group epoch.
    fn remove_member(&mut self, member_id: &str) -> Option<ConsumerMember> {
        let member = self.members.shift_remove(member_id)?;
        self.owners.retain(|_, owner| owner != member_id);
        self.target.remove(member_id);
        self.group_epoch = self.group_epoch.wrapping_add(1);
        if self.members.is_empty() {
            self.target.clear();
            self.assignment_epoch = self.group_epoch;
        }
        Some(member)
    }

    /// The subscribed topics now: what the members name or match and the catalog has.
    fn resolve_subscriptions(&self, catalog: &dyn TopicCatalog) -> BTreeMap<String, (Uuid, i32)> {
        let mut out = BTreeMap::new();
        for m in self.members.values() {
            for name in &m.topic_names {
                if let Some(t) = catalog.by_name(name) {
                    out.insert(t.name, (t.id, t.partitions));
                }
            }
        }
        if self.members.values().any(|m| m.regex.is_some()) {
            for t in catalog.matchable() {
                if self
                    .members
                    .values()
                    .any(|m| m.regex.as_ref().is_some_and(|r| r.is_match(&t.name)))
                {
                    out.insert(t.name, (t.id, t.partitions));
                }
            }
        }
        out
    }

    /// The assignor for the next target: the one most members ask for, else the default.
    fn choose_assignor(&self, default: &str) -> String {
        let mut votes: IndexMap<&str, usize> = IndexMap::new();
        for m in self.members.values() {
            if let Some(a) = &m.server_assignor {
                *votes.entry(a.as_str()).or_default() += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, count) in votes {
            if best.is_none_or(|(_, c)| count > c) {
                best = Some((name, count));
            }
        }
        best.map_or(default, |(name, _)| name).to_owned()
    }

    /// Kafka's target assignment update: runs the assignor for the current group epoch.
    fn update_target(&mut self, default_assignor: &str) {
        let assignor = self.choose_assignor(default_assignor);
        let partitions: BTreeMap<Uuid, i32> = self
            .subscribed
            .values()
            .map(|&(id, count)| (id, count))
            .collect();
        let inputs: Vec<AssignorMember<'_>> = self
            .members
            .values()
            .map(|m| AssignorMember {
                member_id: &m.member_id,
                topics: self
                    .subscribed
                    .iter()
                    .filter(|(name, _)| m.subscribes_to(name))
                    .map(|(_, (id, _))| *id)
                    .collect(),
                previous: self.target.get(&m.member_id),
            })
            .collect();
        let target = assignor::assign(&assignor, &inputs, &partitions);
        self.target = target;
        self.assignor = assignor;
        self.assignment_epoch = self.group_epoch;
    }

    /// Kafka's `CurrentAssignmentBuilder`: moves one member towards its target, given the
    /// partitions it says it owns (`None`: it did not say). Returns whether its assignment
    /// changed.
    fn reconcile(&mut self, member_id: &str, owned: Option<&Assignment>, now: Instant) -> bool {
        let Some(member) = self.members.get(member_id) else {
            return false;
        };
        let before = (member.epoch, member.assigned.clone());
        match member.state {
            MemberState::UnrevokedPartitions => {
                let revoked = owned.is_some_and(|o| !intersects(o, &member.revoking));
                if revoked {
                    self.next_assignment(member_id, owned, now);
                }
            }
            MemberState::UnreleasedPartitions => self.next_assignment(member_id, owned, now),
            MemberState::Stable => {
                if member.epoch != self.assignment_epoch {
                    self.next_assignment(member_id, owned, now);
                }
            }
        }
        let member = &self.members[member_id];
        (member.epoch, &member.assigned) != (before.0, &before.1)
    }

    fn next_assignment(&mut self, member_id: &str, owned: Option<&Assignment>, now: Instant) {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let assignment_epoch = self.assignment_epoch;
        let member = self
            .members
            .get_mut(member_id)
            .expect("reconciled member exists");
        // What it holds (assigned and still revoking) against its target.
        let mut held = member.assigned.clone();
        for (t, ps) in &member.revoking {
            held.entry(*t).or_default().extend(ps);
        }
        let keep = intersect(&held, &target);
        let revoke = difference(&held, &target);
        if !revoke.is_empty() && owned.is_none_or(|o| intersects(o, &revoke)) {
            // First the member gives up what it must; it keeps its epoch meanwhile.
            if member.state != MemberState::UnrevokedPartitions {
                let timeout = u64::try_from(member.rebalance_timeout_ms).unwrap_or(0);
                member.revocation_deadline = Some(now + std::time::Duration::from_millis(timeout));
            }
            member.state = MemberState::UnrevokedPartitions;
            member.assigned = keep;
            member.revoking = revoke;
            return;
        }
        // Nothing (left) to revoke: the revoked partitions are free for others.
        for (t, ps) in &revoke {
            for p in ps {
                if self.owners.get(&(*t, *p)).map(String::as_str) == Some(member_id) {
                    self.owners.remove(&(*t, *p));
                }
            }
        }
        let mut assigned = keep;
        let mut unreleased = false;
        for (t, ps) in difference(&target, &assigned) {
            for p in ps {
                match self.owners.get(&(t, p)) {
                    Some(other) if other != member_id => unreleased = true,
                    _ => {
                        self.owners.insert((t, p), member_id.to_owned());
                        assigned.entry(t).or_default().insert(p);
                    }
                }
            }
        }
        let member = self
            .members
            .get_mut(member_id)
            .expect("reconciled member exists");
        member.assigned = assigned;
        member.revoking.clear();
        member.revocation_deadline = None;
        if member.epoch != assignment_epoch {
            member.previous_epoch = member.epoch;
            member.epoch = assignment_epoch;
        }
        member.state = if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
    }
}

fn intersects(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .any(|(t, ps)| b.get(t).is_some_and(|qs| !ps.is_disjoint(qs)))
}

fn intersect(a: &Assignment, b: &Assignment) -> Assignment {
    a.iter()
        .filter_map(|(t, ps)| {
            let common: BTreeSet<i32> = b.get(t).map(|qs| ps & qs).unwrap_or_default();
            (!common.is_empty()).then_some((*t, common))
        })
        .collect()
}

fn difference(a: &Assignment, b: &Assignment) -> Assignment {
    a.iter()
        .filter_map(|(t, ps)| {
            let rest: BTreeSet<i32> = match b.get(t) {
                Some(qs) => ps - qs,
                None => ps.clone(),
            };
            (!rest.is_empty()).then_some((*t, rest))
        })
        .collect()
}

fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    difference(a, b).is_empty()
}

fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// A heartbeat's refusal: the code and the message for the client.
type Refusal = (i16, String);

/// A heartbeat, decoded and checked (Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`).
struct Beat {
    group_id: String,
    member_id: String,
    epoch: i32,
    instance_id: Option<String>,
    rack_id: Option<String>,
    rebalance_timeout_ms: i32,
    topic_names: Option<BTreeSet<String>>,
    /// `Some(None)`: the regex was cleared (sent empty).
    regex: Option<Option<Regex>>,
    server_assignor: Option<String>,
    /// Topic ids and partitions, as sent.
    owned: Option<Assignment>,
}

fn invalid(message: impl Into<String>) -> Refusal {
    (codes::INVALID_REQUEST, message.into())
}

fn decode_beat(req: ConsumerGroupHeartbeatRequest, version: i16) -> Result<Beat, Refusal> {
    let group_id = req.group_id.0.as_str().to_owned();
    if group_id.is_empty() {
        return Err(invalid("GroupId can't be empty."));
    }
    if req.instance_id.as_ref().is_some_and(|i| i.is_empty()) {
        return Err(invalid("InstanceId can't be empty."));
    }
    if req.rack_id.as_ref().is_some_and(|r| r.is_empty()) {
        return Err(invalid("RackId can't be empty."));
    }
    let epoch = req.member_epoch;
    let member_id = req.member_id.as_str().to_owned();
    // v1 clients make up their own member id; v0 ones get it in the first answer.
    if (version >= 1 || epoch != 0) && member_id.is_empty() {
        return Err(invalid("MemberId can't be empty."));
    }
    if !fits_string(&member_id) || !fits_string(&group_id) {
        return Err(invalid("GroupId and MemberId must be at most 32767 bytes."));
    }
    let regex = match req.subscribed_topic_regex.as_ref().map(|r| r.as_str()) {
        None => None,
        Some("") => Some(None),
        Some(pattern) => match Regex::new(&format!("^(?:{pattern})$")) {
            Ok(r) => Some(Some(r)),
            Err(e) => {
                return Err((
                    codes::INVALID_REGULAR_EXPRESSION,
                    format!(
                        "SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}"
                    ),
                ))
            }
        },
    };
    if epoch == 0 {
        if req.rebalance_timeout_ms <= 0 {
            return Err(invalid(
                "RebalanceTimeoutMs must be provided in first request.",
            ));
        }
        if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
            return Err(invalid("TopicPartitions must be empty when (re-)joining."));
        }
        if req.subscribed_topic_names.is_none() && !matches!(regex, Some(Some(_))) {
            return Err(invalid(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            ));
        }
    } else if epoch < LEAVE_GROUP_STATIC_EPOCH {
        return Err(invalid(format!("MemberEpoch {epoch} is invalid.")));
    } else if epoch == LEAVE_GROUP_STATIC_EPOCH && req.instance_id.is_none() {
        return Err(invalid(
            "InstanceId can't be null when leaving with MemberEpoch -2.",
        ));
    }
    if let Some(a) = req.server_assignor.as_ref() {
        if !ASSIGNORS.contains(&a.as_str()) {
            return Err((
                codes::UNSUPPORTED_ASSIGNOR,
                format!(
                    "ServerAssignor {} is not supported. Supported assignors: {}.",
                    a.as_str(),
                    ASSIGNORS.join(", ")
                ),
            ));
        }
    }
    let owned = req.topic_partitions.map(|topics| {
        let mut a = Assignment::new();
        for t in topics {
            a.entry(t.topic_id).or_default().extend(t.partitions);
        }
        a.retain(|_, ps| !ps.is_empty());
        a
    });
    Ok(Beat {
        group_id,
        member_id,
        epoch,
        instance_id: req.instance_id.map(|s| s.as_str().to_owned()),
        rack_id: req.rack_id.map(|s| s.as_str().to_owned()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        topic_names: req
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.as_str().to_owned()).collect()),
        regex,
        server_assignor: req.server_assignor.map(|s| s.as_str().to_owned()),
        owned,
    })
}

/// A heartbeat's answer, before it is a response.
struct BeatAnswer {
    member_id: String,
    epoch: i32,
    assignment: Option<Assignment>,
}

impl GroupCoordinator {
    /// ConsumerGroupHeartbeat: joins, heartbeats, reconciles and leaves, all in one API.
    pub fn consumer_group_heartbeat(
        &self,
        req: ConsumerGroupHeartbeatRequest,
        version: i16,
        client_id: &str,
        client_host: &str,
        catalog: &dyn TopicCatalog,
    ) -> ConsumerGroupHeartbeatResponse {
        let mut resp = ConsumerGroupHeartbeatResponse::default();
        resp.throttle_time_ms = 0;
        resp.heartbeat_interval_ms = self.consumer_timing(req.group_id.0.as_str()).1;
        let answer = decode_beat(req, version)
            .and_then(|beat| self.handle_beat(beat, client_id, client_host, catalog));
        match answer {
            Ok(a) => {
                resp.error_code = codes::NONE;
                resp.member_id = Some(sb(a.member_id));
                resp.member_epoch = a.epoch;
                resp.assignment = a.assignment.map(|a| {
                    let mut out = heartbeat::Assignment::default();
                    out.topic_partitions = a
                        .into_iter()
                        .map(|(id, ps)| {
                            let mut t = heartbeat::TopicPartitions::default();
                            t.topic_id = id;
                            t.partitions = ps.into_iter().collect();
                            t
                        })
                        .collect();
                    out
                });
            }
            Err((code, message)) => {
                resp.error_code = code;
                resp.error_message = Some(sb(message));
                resp.member_epoch = -1;
            }
        }
        resp
    }

    fn handle_beat(
        &self,
        beat: Beat,
        client_id: &str,
        client_host: &str,
        catalog: &dyn TopicCatalog,
    ) -> Result<BeatAnswer, Refusal> {
        if !self.config.consumer_protocol {
            return Err((
                codes::UNSUPPORTED_VERSION,
                "The consumer group protocol is disabled on this broker \
                 (group.coordinator.rebalance.protocols does not list `consumer`)."
                    .into(),
            ));
        }
        let now = Instant::now();
        let now_ms = self.now_ms();
        let group = if beat.epoch == 0 {
            self.get_or_create_group(&beat.group_id)
        } else {
            match self.get_group(&beat.group_id) {
                Some(g) => g,
                None => {
                    return Err((
                        codes::UNKNOWN_MEMBER_ID,
                        format!("Group {} has no member {}.", beat.group_id, beat.member_id),
                    ))
                }
            }
        };
        let mut g = lock(&group);
        if g.is(GroupState::Dead) {
            return Err((
                codes::COORDINATOR_NOT_AVAILABLE,
                "The group is being unloaded.".into(),
            ));
        }
        if g.consumer.is_none() {
            if !g.members.is_empty() || !g.is(GroupState::Empty) {
                return Err((
                    codes::GROUP_ID_NOT_FOUND,
                    format!(
                        "Group {} is a classic group with members; it becomes a consumer \
                         group once they have left.",
                        beat.group_id
                    ),
                ));
            }
            if beat.epoch != 0 {
                return Err((
                    codes::UNKNOWN_MEMBER_ID,
                    format!("Group {} has no member {}.", beat.group_id, beat.member_id),
                ));
            }
            info!(group = %beat.group_id, "the empty group becomes a consumer-protocol group");
            g.consumer = Some(ConsumerGroup::default());
            g.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.to_owned());
            g.protocol_name = None;
        }
        let session = std::time::Duration::from_millis(
            u64::try_from(self.consumer_timing(&beat.group_id).0).unwrap_or(0),
        );
        let max_size = self.config.consumer_max_size;
        let default_assignor = self
            .config
            .consumer_assignors
            .first()
            .cloned()
            .unwrap_or_else(|| ASSIGNORS[0].to_owned());
        let group_id = beat.group_id.clone();
        let cg = g.consumer.as_mut().expect("a consumer group");

        // Leaving.
        if beat.epoch == LEAVE_GROUP_EPOCH || beat.epoch == LEAVE_GROUP_STATIC_EPOCH {
            let member_id = match (&beat.instance_id, cg.members.contains_key(&beat.member_id)) {
                (_, true) => beat.member_id.clone(),
                (Some(instance), false) => cg
                    .members
                    .values()
                    .find(|m| m.instance_id.as_deref() == Some(instance))
                    .map(|m| m.member_id.clone())
                    .ok_or_else(|| unknown_member(&group_id, &beat.member_id))?,
                (None, false) => return Err(unknown_member(&group_id, &beat.member_id)),
            };
            if beat.epoch == LEAVE_GROUP_STATIC_EPOCH {
                // Its place (and partitions) wait for its instance id, until its session ends.
                let m = cg.members.get_mut(&member_id).expect("member");
                m.left_static = true;
                m.session_deadline = now + session;
                let deadline = m.next_deadline();
                drop(g);
                self.schedule(deadline);
            } else {
                cg.remove_member(&member_id);
                info!(group = %group_id, member = %member_id, "member left the group");
                if cg.members.is_empty() {
                    g.state_timestamp_ms = Some(now_ms);
                }
            }
            return Ok(BeatAnswer {
                member_id,
                epoch: beat.epoch,
                assignment: None,
            });
        }

        // Joining, or heartbeating as a known member.
        let mut member_id = beat.member_id.clone();
        let mut full = beat.epoch == 0;
        let mut subscription_changed = false;
        if beat.epoch == 0 {
            if member_id.is_empty() {
                member_id = Uuid::new_v4().to_string();
            }
            let by_instance = beat.instance_id.as_ref().and_then(|instance| {
                cg.members
                    .values()
                    .find(|m| m.instance_id.as_deref() == Some(instance))
                    .map(|m| (m.member_id.clone(), m.left_static))
            });
            match by_instance {
                Some((old, left)) if old != member_id => {
                    if !left {
                        return Err((
                            codes::UNRELEASED_INSTANCE_ID,
                            format!(
                                "Static member {old} with instance id {} has not left the group.",
                                beat.instance_id.as_deref().unwrap_or_default()
                            ),
                        ));
                    }
                    // The instance comes back under a new member id: it takes its place,
                    // its epoch and its partitions.
                    let mut m = cg.members.shift_remove(&old).expect("member");
                    for owner in cg.owners.values_mut() {
                        if *owner == old {
                            owner.clone_from(&member_id);
                        }
                    }
                    if let Some(t) = cg.target.remove(&old) {
                        cg.target.insert(member_id.clone(), t);
                    }
                    m.member_id.clone_from(&member_id);
                    m.left_static = false;
                    cg.members.insert(member_id.clone(), m);
                }
                _ => {
                    if cg.members.contains_key(&member_id) {
                        // The same id back at epoch 0: its old incarnation is fenced.
                        info!(group = %group_id, member = %member_id, "member rejoined at epoch 0; fencing its old incarnation");
                        cg.remove_member(&member_id);
                    }
                    if cg.members.len() >= max_size {
                        return Err((
                            codes::GROUP_MAX_SIZE_REACHED,
                            format!(
                                "The consumer group has reached its maximum capacity of {max_size} members."
                            ),
                        ));
                    }
                    cg.members.insert(
                        member_id.clone(),
                        ConsumerMember {
                            member_id: member_id.clone(),
                            instance_id: beat.instance_id.clone(),
                            rack_id: None,
                            client_id: client_id.to_owned(),
                            client_host: client_host.to_owned(),
                            epoch: 0,
                            previous_epoch: 0,
                            state: MemberState::Stable,
                            rebalance_timeout_ms: beat.rebalance_timeout_ms,
                            server_assignor: None,
                            topic_names: BTreeSet::new(),
                            regex: None,
                            assigned: Assignment::new(),
                            revoking: Assignment::new(),
                            session_deadline: now + session,
                            revocation_deadline: None,
                            left_static: false,
                        },
                    );
                    subscription_changed = true;
                    info!(group = %group_id, member = %member_id, "member joined the group");
                }
            }
        } else {
            let Some(m) = cg.members.get(&member_id) else {
                return Err(unknown_member(&group_id, &member_id));
            };
            if m.left_static {
                return Err(unknown_member(&group_id, &member_id));
            }
            if beat.epoch != m.epoch {
                let tolerated = beat.epoch == m.previous_epoch
                    && beat
                        .owned
                        .as_ref()
                        .is_some_and(|o| is_subset(o, &m.assigned));
                if !tolerated {
                    return Err((
                        codes::FENCED_MEMBER_EPOCH,
                        format!(
                            "The member epoch {} is fenced: the member's epoch is {}.",
                            beat.epoch, m.epoch
                        ),
                    ));
                }
                // It did not get our last answer: give it again.
                full = true;
            }
        }

        // The member's subscription, as this heartbeat says it.
        let m = cg.members.get_mut(&member_id).expect("member");
        m.session_deadline = now + session;
        m.client_id = client_id.to_owned();
        m.client_host = client_host.to_owned();
        if beat.rebalance_timeout_ms > 0 {
            m.rebalance_timeout_ms = beat.rebalance_timeout_ms;
        }
        if beat.rack_id.is_some() && beat.rack_id != m.rack_id {
            m.rack_id.clone_from(&beat.rack_id);
            subscription_changed = true;
        }
        if let Some(names) = beat.topic_names {
            if names != m.topic_names {
                m.topic_names = names;
                subscription_changed = true;
            }
        }
        if let Some(regex) = beat.regex {
            if regex.as_ref().map(Regex::as_str) != m.regex.as_ref().map(Regex::as_str) {
                m.regex = regex;
                subscription_changed = true;
            }
        }
        if beat.server_assignor.is_some() && beat.server_assignor != m.server_assignor {
            m.server_assignor.clone_from(&beat.server_assignor);
            subscription_changed = true;
        }

        // The group epoch moves with the members' subscriptions and the topics they reach.
        let subscribed = cg.resolve_subscriptions(catalog);
        if subscribed != cg.subscribed {
            cg.subscribed = subscribed;
            subscription_changed = true;
        }
        if subscription_changed {
            cg.group_epoch = cg.group_epoch.wrapping_add(1);
        }
        if cg.assignment_epoch != cg.group_epoch {
            cg.update_target(&default_assignor);
        }
        let changed = cg.reconcile(&member_id, beat.owned.as_ref(), now);
        let m = &cg.members[&member_id];
        let assignment_out =
            (full || changed || beat.owned.as_ref().is_some_and(|o| *o != m.assigned))
                .then(|| m.assigned.clone());
        let answer = BeatAnswer {
            member_id: member_id.clone(),
            epoch: m.epoch,
            assignment: assignment_out,
        };
        let deadline = m.next_deadline();
        drop(g);
        self.schedule(deadline);
        Ok(answer)
    }

    /// Expired sessions and revocations of one group's consumer-protocol members.
    pub(super) fn process_consumer_timers(&self, g: &mut Group, now: Instant) {
        let group_id = g.group_id.clone();
        let Some(cg) = g.consumer.as_mut() else {
            return;
        };
        let due: Vec<(String, bool)> = cg
            .members
            .values()
            .filter(|m| m.next_deadline() <= now)
            .map(|m| (m.member_id.clone(), m.session_deadline <= now))
            .collect();
        if due.is_empty() {
            return;
        }
        for (member_id, session) in due {
            if session {
                info!(group = %group_id, member = %member_id, "member session expired; removing it");
            } else {
                info!(group = %group_id, member = %member_id, "member did not revoke its partitions within its rebalance timeout; removing it");
            }
            cg.remove_member(&member_id);
        }
        if cg.members.is_empty() {
            // Offset expiry counts from when the group became empty.
            g.state_timestamp_ms = Some(self.now_ms());
        }
    }

    /// ConsumerGroupDescribe: a consumer-protocol group, its epochs and each member's
    /// current and target assignment. A classic or unknown group is GROUP_ID_NOT_FOUND.
    pub fn consumer_group_describe(
        &self,
        req: ConsumerGroupDescribeRequest,
        _version: i16,
    ) -> ConsumerGroupDescribeResponse {
        let mut resp = ConsumerGroupDescribeResponse::default();
        resp.throttle_time_ms = 0;
        resp.groups = req
            .group_ids
            .into_iter()
            .map(|group_id| self.describe_consumer_group(group_id))
            .collect();
        resp
    }

    fn describe_consumer_group(&self, group_id: GroupId) -> describe::DescribedGroup {
        let mut out = describe::DescribedGroup::default();
        out.authorized_operations = i32::MIN;
        let group = self.get_group(group_id.0.as_str());
        let g = group.as_ref().map(|g| lock(g));
        let cg = g
            .as_deref()
            .filter(|g| !g.is(GroupState::Dead))
            .and_then(|g| g.consumer.as_ref());
        let Some(cg) = cg else {
            let is_classic = g.as_deref().is_some_and(|g| !g.is(GroupState::Dead));
            out.error_code = codes::GROUP_ID_NOT_FOUND;
            out.error_message = Some(sb(if is_classic {
                format!("Group {} is not a consumer group.", group_id.0.as_str())
            } else {
                format!("Group {} not found.", group_id.0.as_str())
            }));
            out.group_id = group_id;
            return out;
        };
        let to_wire = |a: &Assignment| {
            let mut w = describe::Assignment::default();
            w.topic_partitions = a
                .iter()
                .map(|(id, ps)| {
                    let mut t = describe::TopicPartitions::default();
                    t.topic_id = *id;
                    t.topic_name = TopicName(sb(cg.topic_name(id).unwrap_or_default()));
                    t.partitions = ps.iter().copied().collect();
                    t
                })
                .collect();
            w
        };
        out.error_code = codes::NONE;
        out.group_state = sb(cg.state_name());
        out.group_epoch = cg.group_epoch;
        out.assignment_epoch = cg.assignment_epoch;
        out.assignor_name = sb(if cg.assignor.is_empty() {
            self.config
                .consumer_assignors
                .first()
                .cloned()
                .unwrap_or_default()
        } else {
            cg.assignor.clone()
        });
        out.members = cg
            .members
            .values()
            .map(|m| {
                let mut d = describe::Member::default();
                d.member_id = sb(m.member_id.clone());
                d.instance_id = m.instance_id.clone().map(sb);
                d.rack_id = m.rack_id.clone().map(sb);
                d.member_epoch = m.epoch;
                d.client_id = sb(m.client_id.clone());
                d.client_host = sb(m.client_host.clone());
                d.subscribed_topic_names = m
                    .topic_names
                    .iter()
                    .map(|n| TopicName(sb(n.clone())))
                    .collect();
                d.subscribed_topic_regex = m.regex.as_ref().map(|r| {
                    // Shown as the client sent it: without our anchors.
                    let s = r.as_str();
                    sb(s.strip_prefix("^(?:")
                        .and_then(|s| s.strip_suffix(")$"))
                        .unwrap_or(s))
                });
                d.assignment = to_wire(&m.assigned);
                d.target_assignment =
                    to_wire(cg.target.get(&m.member_id).unwrap_or(&Assignment::new()));
                d.member_type = 1;
                d
            })
            .collect();
        out.group_id = group_id;
        out
    }
}

fn unknown_member(group_id: &str, member_id: &str) -> Refusal {
    (
        codes::UNKNOWN_MEMBER_ID,
        format!("Group {group_id} has no member {member_id}."),
    )
}

/// Kafka's `ConsumerGroup.validateOffsetCommit` / `validateOffsetFetch` for a member of a
/// consumer-protocol group: epoch -1 from outside the group only while it is empty; a member
/// must commit with OffsetCommit v9+ at its current epoch.
pub(crate) fn validate_member_offsets(
    cg: &ConsumerGroup,
    member_id: &str,
    epoch: i32,
    commit_version: Option<i16>,
) -> Result<(), i16> {
    if epoch < 0 && cg.members.is_empty() {
        return Ok(());
    }
    let member = cg.members.get(member_id).ok_or(codes::UNKNOWN_MEMBER_ID)?;
    if commit_version.is_some_and(|v| v < 9) {
        return Err(codes::UNSUPPORTED_VERSION);
    }
    match epoch.cmp(&member.epoch) {
        std::cmp::Ordering::Greater => Err(codes::FENCED_MEMBER_EPOCH),
        std::cmp::Ordering::Less => Err(codes::STALE_MEMBER_EPOCH),
        std::cmp::Ordering::Equal => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::*;

    use super::*;
    use crate::{GroupConfig, GroupStore};

    struct NoStore;
    impl GroupStore for NoStore {
        fn append(&self, _: i32, _: Vec<(Vec<u8>, Option<Vec<u8>>)>, _: i64) -> Result<(), i16> {
            Ok(())
        }
        fn append_transactional(
            &self,
            _: i32,
            _: (i64, i16),
            _: Vec<(Vec<u8>, Option<Vec<u8>>)>,
            _: i64,
        ) -> Result<(), i16> {
            Ok(())
        }
    }

    #[derive(Default)]
    struct Topics(Mutex<Vec<TopicInfo>>);
    impl Topics {
        fn add(&self, name: &str, partitions: i32) -> Uuid {
            let id = Uuid::new_v4();
            self.0.lock().unwrap().push(TopicInfo {
                name: name.into(),
                id,
                partitions,
            });
            id
        }
    }
    impl TopicCatalog for Topics {
        fn by_name(&self, name: &str) -> Option<TopicInfo> {
            self.0
                .lock()
                .unwrap()
                .iter()
                .find(|t| t.name == name)
                .cloned()
        }
        fn matchable(&self) -> Vec<TopicInfo> {
            self.0.lock().unwrap().clone()
        }
    }

    fn coordinator() -> Arc<GroupCoordinator> {
        GroupCoordinator::new(GroupConfig::default(), Arc::new(NoStore))
    }

    struct Beat<'a> {
        member: &'a str,
        epoch: i32,
        topics: Option<&'a [&'a str]>,
        owned: Option<Assignment>,
    }

    fn beat(c: &GroupCoordinator, t: &Topics, b: Beat<'_>) -> ConsumerGroupHeartbeatResponse {
        let mut req = ConsumerGroupHeartbeatRequest::default();
        req.group_id = GroupId(sb("g"));
        req.member_id = sb(b.member);
        req.member_epoch = b.epoch;
        req.rebalance_timeout_ms = if b.epoch == 0 { 60_000 } else { -1 };
        req.subscribed_topic_names = b
            .topics
            .map(|ts| ts.iter().map(|n| TopicName(sb(*n))).collect());
        // As librdkafka: a subscription by names clears any regex.
        req.subscribed_topic_regex = b.topics.map(|_| sb(""));
        req.topic_partitions = if b.epoch == 0 {
            Some(Vec::new())
        } else {
            b.owned.map(|a| {
                a.into_iter()
                    .map(|(id, ps)| {
                        let mut tp = TopicPartitions::default();
                        tp.topic_id = id;
                        tp.partitions = ps.into_iter().collect();
                        tp
                    })
                    .collect()
            })
        };
        c.consumer_group_heartbeat(req, 1, "client", "/127.0.0.1", t)
    }

    fn parts(resp: &ConsumerGroupHeartbeatResponse) -> Option<Assignment> {
        resp.assignment.as_ref().map(|a| {
            a.topic_partitions
                .iter()
                .map(|t| (t.topic_id, t.partitions.iter().copied().collect()))
                .collect()
        })
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    /// No partition is held by two members, and `owners` says exactly who holds what.
    fn assert_exclusive(c: &GroupCoordinator) {
        let group = c.get_group("g").unwrap();
        let g = lock(&group);
        let cg = g.consumer.as_ref().unwrap();
        let mut seen = HashMap::new();
        for m in cg.members.values() {
            for (t, ps) in m.assigned.iter().chain(m.revoking.iter()) {
                for p in ps {
                    assert!(
                        seen.insert((*t, *p), m.member_id.clone()).is_none(),
                        "{t}/{p} held twice"
                    );
                }
            }
        }
        assert_eq!(seen, cg.owners);
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_member_gets_its_share_only_after_the_first_revokes_it() {
        let (c, t) = (coordinator(), Topics::default());
        t.add("orders", 4);
        let a = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 0,
                topics: Some(&["orders"]),
                owned: None,
            },
        );
        assert_eq!((a.error_code, a.member_epoch), (0, 2));
        let a_parts = parts(&a).unwrap();
        assert_eq!(count(&a_parts), 4);

        let b = beat(
            &c,
            &t,
            Beat {
                member: "b",
                epoch: 0,
                topics: Some(&["orders"]),
                owned: None,
            },
        );
        assert_eq!((b.error_code, b.member_epoch), (0, 3));
        assert_eq!(
            parts(&b).map(|a| count(&a)),
            Some(0),
            "a still holds everything"
        );
        assert_exclusive(&c);

        // a is told to give up two partitions, at its old epoch.
        let a = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 2,
                topics: None,
                owned: None,
            },
        );
        assert_eq!(a.member_epoch, 2);
        let kept = parts(&a).unwrap();
        assert_eq!(count(&kept), 2);
        assert_exclusive(&c);
        // Still owning all four: nothing moves.
        let a = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 2,
                topics: None,
                owned: Some(a_parts.clone()),
            },
        );
        assert_eq!(a.member_epoch, 2);
        let b = beat(
            &c,
            &t,
            Beat {
                member: "b",
                epoch: 3,
                topics: None,
                owned: None,
            },
        );
        assert!(parts(&b).is_none_or(|p| count(&p) == 0));
        // It revoked them: it moves to epoch 3, and b takes the other two.
        let a = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 2,
                topics: None,
                owned: Some(kept.clone()),
            },
        );
        assert_eq!(a.member_epoch, 3);
        let b = beat(
            &c,
            &t,
            Beat {
                member: "b",
                epoch: 3,
                topics: None,
                owned: Some(Assignment::new()),
            },
        );
        let b_parts = parts(&b).unwrap();
        assert_eq!(count(&b_parts), 2);
        assert!(!intersects(&b_parts, &kept));
        assert_exclusive(&c);
        {
            let group = c.get_group("g").unwrap();
            assert_eq!(lock(&group).state_name(), "Stable");
        }

        // b leaves: a gets everything back at the next epoch.
        let left = beat(
            &c,
            &t,
            Beat {
                member: "b",
                epoch: -1,
                topics: None,
                owned: None,
            },
        );
        assert_eq!((left.error_code, left.member_epoch), (0, -1));
        let a = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 3,
                topics: None,
                owned: None,
            },
        );
        assert_eq!(a.member_epoch, 4);
        assert_eq!(parts(&a).map(|p| count(&p)), Some(4));
        assert_exclusive(&c);
    }

    #[tokio::test(start_paused = true)]
    async fn epochs_are_checked_and_a_lost_answer_is_given_again() {
        let (c, t) = (coordinator(), Topics::default());
        t.add("orders", 2);
        let a = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 0,
                topics: Some(&["orders"]),
                owned: None,
            },
        );
        let held = parts(&a).unwrap();
        let wrong = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 7,
                topics: None,
                owned: None,
            },
        );
        assert_eq!(wrong.error_code, codes::FENCED_MEMBER_EPOCH);
        let unknown = beat(
            &c,
            &t,
            Beat {
                member: "zz",
                epoch: 2,
                topics: None,
                owned: None,
            },
        );
        assert_eq!(unknown.error_code, codes::UNKNOWN_MEMBER_ID);
        // A partition count change bumps the epoch; the member missed that answer and
        // comes back at its previous epoch with what it owned: tolerated, answered in full.
        t.0.lock().unwrap()[0].partitions = 4;
        let a2 = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 2,
                topics: None,
                owned: None,
            },
        );
        assert_eq!(a2.member_epoch, 3);
        let again = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 2,
                topics: None,
                owned: Some(held),
            },
        );
        assert_eq!((again.error_code, again.member_epoch), (0, 3));
        assert_eq!(parts(&again).map(|p| count(&p)), Some(4));
        // The same member id at epoch 0 again: a new incarnation, the old one fenced.
        let rejoin = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 0,
                topics: Some(&["orders"]),
                owned: None,
            },
        );
        assert_eq!(rejoin.error_code, 0);
        assert_eq!(parts(&rejoin).map(|p| count(&p)), Some(4));
        assert_exclusive(&c);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_member_is_removed_after_its_session() {
        let (c, t) = (coordinator(), Topics::default());
        t.add("orders", 2);
        beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 0,
                topics: Some(&["orders"]),
                owned: None,
            },
        );
        tokio::time::advance(std::time::Duration::from_millis(44_000)).await;
        c.process_timers(Instant::now());
        assert_eq!(
            lock(&c.get_group("g").unwrap())
                .consumer
                .as_ref()
                .unwrap()
                .members
                .len(),
            1
        );
        tokio::time::advance(std::time::Duration::from_millis(2_000)).await;
        c.process_timers(Instant::now());
        let group = c.get_group("g").unwrap();
        let g = lock(&group);
        assert!(g.consumer.as_ref().unwrap().members.is_empty());
        assert!(g.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn bad_heartbeats_get_errors_clients_do_not_retry() {
        let (c, t) = (coordinator(), Topics::default());
        let mut req = ConsumerGroupHeartbeatRequest::default();
        req.group_id = GroupId(sb("g"));
        req.member_id = sb("m");
        req.topic_partitions = Some(Vec::new());
        req.subscribed_topic_names = Some(Vec::new());
        let resp = c.consumer_group_heartbeat(req.clone(), 1, "c", "/h", &t);
        assert_eq!(
            resp.error_code,
            codes::INVALID_REQUEST,
            "no rebalance timeout"
        );
        req.rebalance_timeout_ms = 1000;
        req.subscribed_topic_regex = Some(sb("("));
        let resp = c.consumer_group_heartbeat(req.clone(), 1, "c", "/h", &t);
        assert_eq!(resp.error_code, codes::INVALID_REGULAR_EXPRESSION);
        req.subscribed_topic_regex = None;
        req.server_assignor = Some(sb("sticky"));
        let resp = c.consumer_group_heartbeat(req.clone(), 1, "c", "/h", &t);
        assert_eq!(resp.error_code, codes::UNSUPPORTED_ASSIGNOR);
        req.server_assignor = Some(sb("range"));
        req.member_id = sb("");
        let resp = c.consumer_group_heartbeat(req.clone(), 1, "c", "/h", &t);
        assert_eq!(
            resp.error_code,
            codes::INVALID_REQUEST,
            "v1 needs a member id"
        );
        let resp = c.consumer_group_heartbeat(req, 0, "c", "/h", &t);
        assert_eq!(resp.error_code, 0, "v0 gets one");
        assert!(resp.member_id.is_some_and(|m| !m.is_empty()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_regex_subscription_follows_new_topics() {
        let (c, t) = (coordinator(), Topics::default());
        t.add("logs-a", 1);
        t.add("other", 1);
        let mut req = ConsumerGroupHeartbeatRequest::default();
        req.group_id = GroupId(sb("g"));
        req.member_id = sb("m");
        req.rebalance_timeout_ms = 1000;
        req.topic_partitions = Some(Vec::new());
        req.subscribed_topic_regex = Some(sb("logs-.*"));
        let resp = c.consumer_group_heartbeat(req, 1, "c", "/h", &t);
        assert_eq!(parts(&resp).map(|p| count(&p)), Some(1));
        t.add("logs-b", 2);
        let resp = beat(
            &c,
            &t,
            Beat {
                member: "m",
                epoch: resp.member_epoch,
                topics: None,
                owned: None,
            },
        );
        assert_eq!(parts(&resp).map(|p| count(&p)), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn offsets_of_a_member_are_checked_against_its_epoch() {
        let (c, t) = (coordinator(), Topics::default());
        t.add("orders", 1);
        let a = beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 0,
                topics: Some(&["orders"]),
                owned: None,
            },
        );
        let commit = |version: i16, epoch: i32| {
            let mut req = OffsetCommitRequest::default();
            req.group_id = GroupId(sb("g"));
            req.member_id = sb("a");
            req.generation_id_or_member_epoch = epoch;
            let mut p = OffsetCommitRequestPartition::default();
            p.partition_index = 0;
            p.committed_offset = 5;
            let mut topic = OffsetCommitRequestTopic::default();
            topic.name = TopicName(sb("orders"));
            topic.partitions = vec![p];
            req.topics = vec![topic];
            c.offset_commit(req, version, &|_, _| true).topics[0].partitions[0].error_code
        };
        assert_eq!(commit(8, a.member_epoch), codes::UNSUPPORTED_VERSION);
        assert_eq!(commit(9, a.member_epoch - 1), codes::STALE_MEMBER_EPOCH);
        assert_eq!(commit(9, a.member_epoch + 1), codes::FENCED_MEMBER_EPOCH);
        assert_eq!(commit(9, a.member_epoch), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_group_type_is_reported_and_changes_only_when_empty() {
        let (c, t) = (coordinator(), Topics::default());
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(c.clone().run(stopped));
        t.add("orders", 1);
        beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: 0,
                topics: Some(&["orders"]),
                owned: None,
            },
        );
        let listed = c.list_groups(ListGroupsRequest::default(), 5);
        assert_eq!(listed.groups[0].group_type.as_str(), "consumer");
        assert_eq!(listed.groups[0].group_state.as_str(), "Stable");
        let mut filter = ListGroupsRequest::default();
        filter.types_filter = vec![sb("classic")];
        assert!(c.list_groups(filter, 5).groups.is_empty());
        let described = c.describe_groups(
            DescribeGroupsRequest::default().with_groups(vec![GroupId(sb("g"))]),
            5,
        );
        assert_eq!(
            (
                described.groups[0].error_code,
                described.groups[0].group_state.as_str()
            ),
            (0, "Dead")
        );
        let cgd = c.consumer_group_describe(
            ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(sb("g")), GroupId(sb("nope"))]),
            0,
        );
        assert_eq!(cgd.groups[0].error_code, 0);
        assert_eq!(
            cgd.groups[0].members[0].assignment.topic_partitions[0]
                .topic_name
                .0
                .as_str(),
            "orders"
        );
        assert_eq!(cgd.groups[1].error_code, codes::GROUP_ID_NOT_FOUND);

        // A classic member cannot join while consumer members are there; once they left,
        // the group becomes classic.
        let mut join = JoinGroupRequest::default();
        join.group_id = GroupId(sb("g"));
        join.session_timeout_ms = 10_000;
        join.rebalance_timeout_ms = 10_000;
        join.protocol_type = sb("consumer");
        join.protocols = vec![
            kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol::default()
                .with_name(sb("range"))
                .with_metadata(bytes::Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0])),
        ];
        let refused = c.join_group(join.clone(), 5, "c", "/h").await;
        assert_eq!(refused.error_code, codes::INCONSISTENT_GROUP_PROTOCOL);
        beat(
            &c,
            &t,
            Beat {
                member: "a",
                epoch: -1,
                topics: None,
                owned: None,
            },
        );
        let joined = c.join_group(join, 3, "c", "/h").await;
        assert_eq!(joined.error_code, 0);
        // And a consumer heartbeat to a classic group with members is refused.
        let resp = beat(
            &c,
            &t,
            Beat {
                member: "b",
                epoch: 0,
                topics: Some(&["orders"]),
                owned: None,
            },
        );
        assert_eq!(resp.error_code, codes::GROUP_ID_NOT_FOUND);
    }
}
