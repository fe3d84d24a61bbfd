//! One group's state (Kafka's `GroupMetadata` and `MemberMetadata`) and the pure rules of its
//! state machine. Must not lock, persist, read the clock, or answer anyone except through the
//! parked-call channels it holds.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use indexmap::IndexMap;
use kafka_protocol::messages::ConsumerProtocolSubscription;
use kafka_protocol::protocol::Decodable;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::codes;
use super::consumer::ConsumerGroup;
use super::records::{GroupValue, MemberValue, OffsetValue};

/// The protocol type of Kafka consumers; only such groups have their subscriptions decoded.
pub(crate) const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// Kafka's `GroupCoordinator.NewMemberJoinTimeoutMs`: a member that joined but never got its
/// first JoinGroup answer is dropped after this long (its socket may be gone).
pub(crate) const NEW_MEMBER_JOIN_TIMEOUT_MS: u64 = 5 * 60 * 1000;

/// The classic group states, with the names Kafka prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub(crate) fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    /// Kafka's `validPreviousStates`.
    fn can_follow(self, previous: GroupState) -> bool {
        use GroupState::*;
        match self {
            PreparingRebalance => matches!(previous, Stable | CompletingRebalance | Empty),
            CompletingRebalance => previous == PreparingRebalance,
            Stable => previous == CompletingRebalance,
            Empty => previous == PreparingRebalance,
            Dead => true,
        }
    }
}

/// What a JoinGroup call is answered with (Kafka's `JoinGroupResult`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JoinOutcome {
    pub error: i16,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    /// Non-empty only for the leader: every member with its metadata for the chosen protocol.
    pub members: Vec<JoinedMember>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

impl JoinOutcome {
    pub(crate) fn error(member_id: impl Into<String>, error: i16) -> Self {
        JoinOutcome {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            skip_assignment: false,
            member_id: member_id.into(),
            members: Vec::new(),
        }
    }
}

/// What a SyncGroup call is answered with (Kafka's `SyncGroupResult`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SyncOutcome {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncOutcome {
    pub(crate) fn error(error: i16) -> Self {
        SyncOutcome {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// One protocol a member supports (name and opaque metadata), in its order of preference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

/// One member (Kafka's `MemberMetadata`).
#[derive(Debug)]
pub(crate) struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    pub assignment: Bytes,
    /// A parked JoinGroup call (Kafka's `awaitingJoinCallback`).
    pub awaiting_join: Option<oneshot::Sender<JoinOutcome>>,
    /// A parked SyncGroup call (Kafka's `awaitingSyncCallback`).
    pub awaiting_sync: Option<oneshot::Sender<SyncOutcome>>,
    /// Joined but not yet answered its first JoinGroup.
    pub is_new: bool,
    /// When the member is dropped unless it heartbeats (or is parked) first; `None` while a
    /// parked call keeps it alive (rescheduled when that call is answered).
    pub heartbeat_deadline: Option<Instant>,
}

impl Member {
    pub(crate) fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| &p.metadata)
    }

    /// Same protocols, same order, same metadata bytes.
    pub(crate) fn matches(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }

    /// The member's most preferred protocol among `candidates`.
    fn vote<'a>(&'a self, candidates: &HashSet<&str>) -> Option<&'a str> {
        self.protocols
            .iter()
            .map(|p| p.name.as_str())
            .find(|name| candidates.contains(name))
    }

    pub(crate) fn is_awaiting_join(&self) -> bool {
        self.awaiting_join.is_some()
    }

    /// A parked JoinGroup or SyncGroup call whose client is still waiting. Kafka counts a
    /// parked call as a heartbeat; a call whose future was dropped no longer does.
    pub(crate) fn is_parked(&self) -> bool {
        self.awaiting_join
            .as_ref()
            .is_some_and(|tx| !tx.is_closed())
            || self
                .awaiting_sync
                .as_ref()
                .is_some_and(|tx| !tx.is_closed())
    }

    /// Answers the parked JoinGroup call, if any. Returns whether there was one.
    pub(crate) fn answer_join(&mut self, outcome: JoinOutcome) -> bool {
        match self.awaiting_join.take() {
            Some(tx) => {
                let _ = tx.send(outcome);
                true
            }
            None => false,
        }
    }

    /// Answers the parked SyncGroup call, if any. Returns whether there was one.
    pub(crate) fn answer_sync(&mut self, outcome: SyncOutcome) -> bool {
        match self.awaiting_sync.take() {
            Some(tx) => {
                let _ = tx.send(outcome);
                true
            }
            None => false,
        }
    }

    /// Parks a JoinGroup call; a call parked before it (a client retry) is told to rejoin.
    pub(crate) fn park_join(&mut self) -> oneshot::Receiver<JoinOutcome> {
        let (tx, rx) = oneshot::channel();
        if let Some(old) = self.awaiting_join.replace(tx) {
            let _ = old.send(JoinOutcome::error(
                self.member_id.clone(),
                codes::REBALANCE_IN_PROGRESS,
            ));
        }
        rx
    }

    /// Parks a SyncGroup call; a call parked before it is told to rejoin.
    pub(crate) fn park_sync(&mut self) -> oneshot::Receiver<SyncOutcome> {
        let (tx, rx) = oneshot::channel();
        if let Some(old) = self.awaiting_sync.replace(tx) {
            let _ = old.send(SyncOutcome::error(codes::REBALANCE_IN_PROGRESS));
        }
        rx
    }
}

/// The rebalance (join phase) timer: Kafka's `InitialDelayedJoin` or `DelayedJoin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JoinTimer {
    /// The first rebalance of an Empty group: waits the whole delay even if everyone joined,
    /// and is extended while new members keep arriving, up to the rebalance timeout.
    InitialDelay {
        deadline: Instant,
        remaining_ms: u64,
    },
    /// Completes early once every member has rejoined.
    Rebalance { deadline: Instant },
}

impl JoinTimer {
    pub(crate) fn deadline(&self) -> Instant {
        match *self {
            JoinTimer::InitialDelay { deadline, .. } | JoinTimer::Rebalance { deadline } => {
                deadline
            }
        }
    }
}

/// One group (Kafka's `GroupMetadata`).
#[derive(Debug)]
pub(crate) struct Group {
    pub group_id: String,
    pub state: GroupState,
    /// Wall-clock ms of the last state change (`currentStateTimestamp`); `None` when loaded
    /// from a record that did not carry it.
    pub state_timestamp_ms: Option<i64>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub generation_id: i32,
    pub leader_id: Option<String>,
    /// Members in join order (the leader's JoinGroup response lists them in this order).
    pub members: IndexMap<String, Member>,
    /// group.instance.id → member id.
    pub static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with their expiry.
    pub pending_members: HashMap<String, Instant>,
    /// Members that got the JoinGroup answer of this generation but have not sent SyncGroup.
    pub pending_sync_members: HashSet<String>,
    /// Topics the members of a consumer group subscribe to; `None` when unknown.
    pub subscribed_topics: Option<HashSet<String>>,
    /// A member joined during the initial delay of a brand-new group.
    pub new_member_added: bool,
    pub join_timer: Option<JoinTimer>,
    /// Pending-sync expiry (Kafka's `DelayedSync`) and the generation it belongs to.
    pub sync_timer: Option<(Instant, i32)>,
    /// Committed offsets by (topic, partition).
    pub offsets: BTreeMap<(String, i32), OffsetValue>,
    /// Offsets transactions committed (TxnOffsetCommit), by producer id: written, but the
    /// group's only once the transaction's COMMIT marker is (an ABORT drops them).
    pub pending_txn_offsets: BTreeMap<i64, BTreeMap<(String, i32), OffsetValue>>,
    /// Set while the group uses the KIP-848 consumer protocol (then `members` is empty and
    /// `state` stays Empty: the classic machinery is idle).
    pub consumer: Option<ConsumerGroup>,
}

impl Group {
    pub(crate) fn new(group_id: String, now_ms: i64) -> Self {
        Group {
            group_id,
            state: GroupState::Empty,
            state_timestamp_ms: Some(now_ms),
            protocol_type: None,
            protocol_name: None,
            generation_id: 0,
            leader_id: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            pending_sync_members: HashSet::new(),
            subscribed_topics: None,
            new_member_added: false,
            join_timer: None,
            sync_timer: None,
            offsets: BTreeMap::new(),
            pending_txn_offsets: BTreeMap::new(),
            consumer: None,
        }
    }

    /// No member of either protocol: the group may be deleted, and its offsets expire.
    pub(crate) fn is_empty(&self) -> bool {
        self.is(GroupState::Empty) && self.consumer.as_ref().is_none_or(|c| c.members.is_empty())
    }

    /// Kafka's group type name (ListGroups v5): `consumer` for the KIP-848 protocol.
    pub(crate) fn type_name(&self) -> &'static str {
        if self.consumer.is_some() {
            "consumer"
        } else {
            "classic"
        }
    }

    /// The state as Kafka names it for this group's type.
    pub(crate) fn state_name(&self) -> &'static str {
        match &self.consumer {
            Some(c) if !self.is(GroupState::Dead) => c.state_name(),
            _ => self.state.name(),
        }
    }

    pub(crate) fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    pub(crate) fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    pub(crate) fn transition_to(&mut self, state: GroupState, now_ms: i64) {
        debug_assert!(
            state.can_follow(self.state),
            "group {}: {:?} -> {:?}",
            self.group_id,
            self.state,
            state
        );
        self.state = state;
        self.state_timestamp_ms = Some(now_ms);
    }

    /// Kafka's `canRebalance`: PreparingRebalance may follow the current state.
    pub(crate) fn can_rebalance(&self) -> bool {
        GroupState::PreparingRebalance.can_follow(self.state)
    }

    pub(crate) fn add_member(&mut self, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member.member_id.clone());
        }
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        self.pending_members.remove(&member.member_id);
        self.members.insert(member.member_id.clone(), member);
    }

    /// Removes a member and hands it back (its parked calls are the caller's to answer).
    pub(crate) fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let member = self.members.shift_remove(member_id);
        if let Some(instance) = member.as_ref().and_then(|m| m.group_instance_id.as_ref()) {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        if self.is_leader(member_id) {
            self.leader_id = self.members.keys().next().cloned();
        }
        self.pending_members.remove(member_id);
        self.pending_sync_members.remove(member_id);
        member
    }

    /// Kafka's `replaceStaticMember`: the member keeps its place, protocols and assignment
    /// under a new id. Parked calls of the old id are fenced.
    pub(crate) fn replace_static_member(
        &mut self,
        instance_id: &str,
        old_member_id: &str,
        new_member_id: &str,
    ) -> bool {
        let Some(index) = self.members.get_index_of(old_member_id) else {
            return false;
        };
        let Some(mut member) = self.members.shift_remove(old_member_id) else {
            return false;
        };
        member.answer_join(JoinOutcome::error(old_member_id, codes::FENCED_INSTANCE_ID));
        member.answer_sync(SyncOutcome::error(codes::FENCED_INSTANCE_ID));
        member.member_id = new_member_id.to_owned();
        self.members
            .shift_insert(index, new_member_id.to_owned(), member);
        if self.is_leader(old_member_id) {
            self.leader_id = Some(new_member_id.to_owned());
        }
        if self.pending_sync_members.remove(old_member_id) {
            self.pending_sync_members.insert(new_member_id.to_owned());
        }
        self.static_members
            .insert(instance_id.to_owned(), new_member_id.to_owned());
        true
    }

    pub(crate) fn static_member_id(&self, instance_id: &str) -> Option<&str> {
        self.static_members.get(instance_id).map(String::as_str)
    }

    /// Kafka's `validateCurrentMember`: a given instance id must map to this member id
    /// (else FENCED_INSTANCE_ID, or UNKNOWN_MEMBER_ID if unknown), and the member must exist.
    pub(crate) fn validate_current_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), i16> {
        if let Some(instance) = instance_id {
            match self.static_member_id(instance) {
                Some(current) if current != member_id => return Err(codes::FENCED_INSTANCE_ID),
                Some(_) => {}
                None => return Err(codes::UNKNOWN_MEMBER_ID),
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(codes::UNKNOWN_MEMBER_ID)
        }
    }

    pub(crate) fn num_awaiting_join(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.is_awaiting_join())
            .count()
    }

    pub(crate) fn has_all_members_joined(&self) -> bool {
        self.members.len() == self.num_awaiting_join() && self.pending_members.is_empty()
    }

    /// The longest rebalance timeout of the members (Kafka's `rebalanceTimeoutMs`).
    pub(crate) fn rebalance_timeout_ms(&self) -> u64 {
        self.members
            .values()
            .map(|m| u64::try_from(m.rebalance_timeout_ms).unwrap_or(0))
            .max()
            .unwrap_or(0)
    }

    fn members_supporting(&self, protocol: &str) -> usize {
        self.members
            .values()
            .filter(|m| m.metadata(protocol).is_some())
            .count()
    }

    /// Kafka's `supportsProtocols`: an Empty group takes any non-empty type and protocol list;
    /// otherwise the type must match and one protocol must be supported by every member.
    pub(crate) fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.is(GroupState::Empty) {
            !protocol_type.is_empty() && !protocols.is_empty()
        } else {
            self.protocol_type.as_deref() == Some(protocol_type)
                && protocols
                    .iter()
                    .any(|p| self.members_supporting(&p.name) == self.members.len())
        }
    }

    /// Protocols every member supports.
    fn candidate_protocols(&self) -> HashSet<&str> {
        let Some(first) = self.members.values().next() else {
            return HashSet::new();
        };
        first
            .protocols
            .iter()
            .map(|p| p.name.as_str())
            .filter(|name| self.members.values().all(|m| m.metadata(name).is_some()))
            .collect()
    }

    /// Kafka's `selectProtocol`: each member votes for its most preferred candidate; the most
    /// votes win (ties go to the protocol voted for first, in member order).
    pub(crate) fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: IndexMap<&str, usize> = IndexMap::new();
        for member in self.members.values() {
            if let Some(choice) = member.vote(&candidates) {
                *votes.entry(choice).or_insert(0) += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, count) in votes {
            if best.is_none_or(|(_, c)| count > c) {
                best = Some((name, count));
            }
        }
        best.map(|(name, _)| name.to_owned())
    }

    /// Kafka's `maybeElectNewJoinedLeader`: keep the leader if it rejoined, else pick a member
    /// that did. False if there is no leader or nobody rejoined.
    pub(crate) fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader_id.clone() else {
            return false;
        };
        if self
            .members
            .get(&leader)
            .is_some_and(Member::is_awaiting_join)
        {
            return true;
        }
        match self
            .members
            .values()
            .find(|m| m.is_awaiting_join())
            .map(|m| m.member_id.clone())
        {
            Some(new_leader) => {
                self.leader_id = Some(new_leader);
                true
            }
            None => false,
        }
    }

    /// Kafka's `initNextGeneration`.
    pub(crate) fn init_next_generation(&mut self, now_ms: i64) {
        self.generation_id = self.generation_id.wrapping_add(1);
        if self.members.is_empty() {
            self.protocol_name = None;
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition_to(GroupState::Empty, now_ms);
        } else {
            self.protocol_name = self.select_protocol();
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition_to(GroupState::CompletingRebalance, now_ms);
        }
        self.pending_sync_members.clear();
        self.sync_timer = None;
    }

    /// The members with their metadata for the chosen protocol: the leader's JoinGroup answer.
    pub(crate) fn current_member_metadata(&self) -> Vec<JoinedMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or_default();
        self.members
            .values()
            .map(|m| JoinedMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata(protocol).cloned().unwrap_or_default(),
            })
            .collect()
    }

    /// Kafka's `computeSubscribedTopics`: the union of the members' subscribed topics for a
    /// consumer group with a chosen protocol; `None` when unknown or not parseable.
    pub(crate) fn compute_subscribed_topics(&self) -> Option<HashSet<String>> {
        if self.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return None;
        }
        if self.members.is_empty() {
            return Some(HashSet::new());
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = HashSet::new();
        for member in self.members.values() {
            topics.extend(subscription_topics(member.metadata(protocol)?)?);
        }
        Some(topics)
    }

    /// True when the group's members subscribe to the topic, or when that is not known.
    pub(crate) fn is_subscribed_to_topic(&self, topic: &str) -> bool {
        if let Some(c) = &self.consumer {
            return c.is_subscribed_to(topic);
        }
        match &self.subscribed_topics {
            Some(topics) => topics.contains(topic),
            None => true,
        }
    }

    /// The GroupMetadataValue of this group, with `assignments` (or each member's current
    /// assignment when `None`).
    pub(crate) fn metadata_value(
        &self,
        assignments: Option<&HashMap<String, Bytes>>,
    ) -> GroupValue {
        let protocol = self.protocol_name.as_deref();
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation_id,
            protocol: self.protocol_name.clone(),
            leader: self.leader_id.clone(),
            current_state_timestamp: self.state_timestamp_ms.unwrap_or(-1),
            members: self
                .members
                .values()
                .map(|m| MemberValue {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout: m.rebalance_timeout_ms,
                    session_timeout: m.session_timeout_ms,
                    subscription: protocol
                        .and_then(|p| m.metadata(p))
                        .map(|b| b.to_vec())
                        .unwrap_or_default(),
                    assignment: match assignments {
                        Some(map) => map
                            .get(&m.member_id)
                            .map(|b| b.to_vec())
                            .unwrap_or_default(),
                        None => m.assignment.to_vec(),
                    },
                })
                .collect(),
        }
    }

    /// Kafka's `removeExpiredOffsets`: removes and returns the offsets past retention.
    pub(crate) fn remove_expired_offsets(
        &mut self,
        now_ms: i64,
        retention_ms: i64,
    ) -> Vec<(String, i32)> {
        let expired = |o: &OffsetValue, base: i64| match o.expire_timestamp {
            Some(expire) => now_ms >= expire,
            None => now_ms.saturating_sub(base) >= retention_ms,
        };
        let victims: Vec<(String, i32)> = match (&self.protocol_type, self.state) {
            // No member left: offsets expire `retention` after the group became Empty (or,
            // without that timestamp, after their commit).
            (Some(_), GroupState::Empty) if self.is_empty() => self
                .offsets
                .iter()
                .filter(|(_, o)| expired(o, self.state_timestamp_ms.unwrap_or(o.commit_timestamp)))
                .map(|(k, _)| k.clone())
                .collect(),
            // A stable consumer group: offsets of topics nobody subscribes to any more.
            (Some(t), GroupState::Stable)
                if t == CONSUMER_PROTOCOL_TYPE && self.subscribed_topics.is_some() =>
            {
                let subscribed = self.subscribed_topics.as_ref();
                self.offsets
                    .iter()
                    .filter(|((topic, _), o)| {
                        !subscribed.is_some_and(|s| s.contains(topic))
                            && expired(o, o.commit_timestamp)
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            }
            // Only ever used to store offsets (simple consumers).
            (None, _) => self
                .offsets
                .iter()
                .filter(|(_, o)| expired(o, o.commit_timestamp))
                .map(|(k, _)| k.clone())
                .collect(),
            _ => Vec::new(),
        };
        for key in &victims {
            self.offsets.remove(key);
        }
        victims
    }

    /// The earliest timer this group waits for.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let join = if self.is(GroupState::PreparingRebalance) {
            self.join_timer.map(|t| t.deadline())
        } else {
            None
        };
        let sync = self.sync_timer.map(|(d, _)| d);
        let members = self.members.values().filter_map(|m| m.heartbeat_deadline);
        let pending = self.pending_members.values().copied();
        let consumers = self
            .consumer
            .iter()
            .flat_map(|c| c.members.values().map(|m| m.next_deadline()));
        join.into_iter()
            .chain(sync)
            .chain(members)
            .chain(pending)
            .chain(consumers)
            .min()
    }
}

/// The topics of a consumer protocol subscription (`ConsumerProtocolSubscription`, any
/// version: the topic list is the first field of all of them), or `None` if unreadable.
pub(crate) fn subscription_topics(metadata: &Bytes) -> Option<Vec<String>> {
    let mut buf = metadata.clone();
    if buf.len() < 2 || bytes::Buf::get_i16(&mut buf) < 0 {
        return None;
    }
    let subscription = ConsumerProtocolSubscription::decode(&mut buf, 0).ok()?;
    Some(
        subscription
            .topics
            .into_iter()
            .map(|t| t.as_str().to_owned())
            .collect(),
    )
}
