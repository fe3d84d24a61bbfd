//! Offsets and administration (Kafka's `GroupMetadataManager`): OffsetCommit/Fetch/Delete,
//! List/Describe/DeleteGroups, loading `__consumer_offsets`, expiry. Must not change membership,
//! and must update the offsets cache only after the store accepted the records.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, info, warn};

use super::codes;
use super::consumer::validate_member_offsets;
use super::coordinator::{lock, GroupCoordinator};
use super::metadata::{Group, GroupState, JoinOutcome, SyncOutcome, CONSUMER_PROTOCOL_TYPE};
use super::records::{self, fits_string, GroupValue, OffsetValue, RecordKey};
use super::Stored;

/// The operations a group resource supports (READ, DELETE, DESCRIBE), as the bit field
/// DescribeGroups reports when asked; Weir has no authorizer, so all are allowed.
const GROUP_AUTHORIZED_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// A record as stored: key, value (`None`: a tombstone).
type StoredPair = (Vec<u8>, Option<Vec<u8>>);

/// Offsets asked for: `None` means every committed partition.
type TopicsQuery = Option<Vec<(String, Vec<i32>)>>;
/// Offsets found, per topic, per partition (`None`: nothing committed).
type TopicsAnswer = Vec<(String, Vec<(i32, Option<OffsetValue>)>)>;

impl GroupCoordinator {
    // -----------------------------------------------------------------------------------------
    // OffsetCommit.

    /// Kafka's `handleCommitOffsets`. `partition_exists(topic, partition)` tells whether the
    /// broker hosts that partition.
    pub fn offset_commit(
        &self,
        req: OffsetCommitRequest,
        version: i16,
        partition_exists: &dyn Fn(&str, i32) -> bool,
    ) -> OffsetCommitResponse {
        let now_ms = self.now_ms();
        let expire_timestamp = if version <= 4 && req.retention_time_ms != -1 {
            Some(now_ms.saturating_add(req.retention_time_ms))
        } else {
            None
        };
        // errors[t][p], filled as we go; UNKNOWN_SERVER_ERROR never survives.
        let mut errors: Vec<Vec<i16>> = Vec::with_capacity(req.topics.len());
        let mut to_commit: Vec<(usize, usize, String, i32, OffsetValue)> = Vec::new();
        for (ti, topic) in req.topics.iter().enumerate() {
            let name = topic.name.0.as_str();
            let mut row = Vec::with_capacity(topic.partitions.len());
            for (pi, p) in topic.partitions.iter().enumerate() {
                if partition_exists(name, p.partition_index) {
                    row.push(codes::UNKNOWN_SERVER_ERROR);
                    to_commit.push((
                        ti,
                        pi,
                        name.to_owned(),
                        p.partition_index,
                        OffsetValue {
                            offset: p.committed_offset,
                            leader_epoch: if version >= 6 {
                                p.committed_leader_epoch
                            } else {
                                -1
                            },
                            metadata: p
                                .committed_metadata
                                .as_ref()
                                .map(|m| m.as_str().to_owned())
                                .unwrap_or_default(),
                            commit_timestamp: now_ms,
                            expire_timestamp,
                        },
                    ));
                } else {
                    row.push(codes::UNKNOWN_TOPIC_OR_PARTITION);
                }
            }
            errors.push(row);
        }

        if !to_commit.is_empty() {
            let group_id = req.group_id.0.as_str();
            let member_id = req.member_id.as_str();
            let instance = if version >= 7 {
                req.group_instance_id.as_ref().map(|s| s.as_str())
            } else {
                None
            };
            let generation = req.generation_id_or_member_epoch;
            let result = self.commit_offsets(
                version,
                group_id,
                member_id,
                instance,
                generation,
                &mut to_commit,
                now_ms,
            );
            for (i, (ti, pi, ..)) in to_commit.iter().enumerate() {
                errors[*ti][*pi] = match &result {
                    Err(code) => *code,
                    Ok(per_partition) => per_partition[i],
                };
            }
        }

        let mut resp = OffsetCommitResponse::default();
        resp.throttle_time_ms = 0;
        resp.topics = req
            .topics
            .into_iter()
            .zip(errors)
            .map(|(topic, row)| {
                let mut t = OffsetCommitResponseTopic::default();
                t.name = topic.name;
                t.partitions = topic
                    .partitions
                    .iter()
                    .zip(row)
                    .map(|(p, error)| {
                        let mut out = OffsetCommitResponsePartition::default();
                        out.partition_index = p.partition_index;
                        out.error_code = error;
                        out
                    })
                    .collect();
                t
            })
            .collect();
        resp
    }

    /// Validates the committer and stores the offsets; `Err` applies to every partition.
    #[allow(clippy::too_many_arguments)]
    fn commit_offsets(
        &self,
        version: i16,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
        offsets: &mut [(usize, usize, String, i32, OffsetValue)],
        now_ms: i64,
    ) -> Result<Vec<i16>, i16> {
        if !fits_string(group_id) {
            return Err(codes::INVALID_GROUP_ID);
        }
        let group = match self.get_group(group_id) {
            Some(group) => group,
            // Offsets for an unknown group: only from a committer outside group management.
            None if generation < 0 => {
                info!(group = %group_id, "creating a simple consumer group by offset commit");
                self.get_or_create_group(group_id)
            }
            None => return Err(codes::ILLEGAL_GENERATION),
        };
        let mut g = lock(&group);
        validate_offset_commit(&g, version, generation, member_id, instance)?;
        if matches!(g.state, GroupState::Stable | GroupState::PreparingRebalance) {
            // A commit from a member counts as a heartbeat.
            self.heartbeat_member(&mut g, member_id);
        }
        Ok(self.store_offsets(&mut g, offsets, now_ms))
    }

    /// Kafka's `storeOffsets`: one append for the request's partitions, then the cache.
    fn store_offsets(
        &self,
        g: &mut Group,
        offsets: &mut [(usize, usize, String, i32, OffsetValue)],
        now_ms: i64,
    ) -> Vec<i16> {
        let mut results = vec![codes::NONE; offsets.len()];
        let mut records = Vec::with_capacity(offsets.len());
        let mut written = Vec::with_capacity(offsets.len());
        for (i, (_, _, topic, partition, value)) in offsets.iter().enumerate() {
            let too_large =
                value.metadata.encode_utf16().count() > self.config.offset_metadata_max_bytes;
            if too_large {
                results[i] = codes::OFFSET_METADATA_TOO_LARGE;
                continue;
            }
            let key = records::encode_offset_key(&g.group_id, topic, *partition);
            let val = records::encode_offset_value(value);
            match (key, val) {
                (Ok(key), Ok(val)) => {
                    records.push((key, Some(val)));
                    written.push(i);
                }
                _ => results[i] = codes::OFFSET_METADATA_TOO_LARGE,
            }
        }
        if records.is_empty() {
            return results;
        }
        let partition = self.partition_for(&g.group_id);
        match self.store.append(partition, records, now_ms) {
            Ok(()) => {
                for i in written {
                    let (_, _, topic, p, value) = &offsets[i];
                    g.offsets.insert((topic.clone(), *p), value.clone());
                }
            }
            Err(code) => {
                warn!(group = %g.group_id, code, "failed to store committed offsets");
                let code = codes::for_offset_store(code);
                for i in written {
                    results[i] = code;
                }
            }
        }
        results
    }

    // -----------------------------------------------------------------------------------------
    // OffsetFetch.

    /// Kafka's `handleFetchOffsets`: committed offsets (-1 where none), for v1–7 one group,
    /// for v8+ the `groups` array. An unknown group is not an error.
    pub fn offset_fetch(&self, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
        let mut resp = OffsetFetchResponse::default();
        resp.throttle_time_ms = 0;
        if version >= 8 {
            resp.groups = req
                .groups
                .into_iter()
                .map(|group| {
                    let query: TopicsQuery = group.topics.map(|topics| {
                        topics
                            .into_iter()
                            .map(|t| (t.name.0.as_str().to_owned(), t.partition_indexes))
                            .collect()
                    });
                    let member = if version >= 9 {
                        group
                            .member_id
                            .as_ref()
                            .map(|m| (m.as_str(), group.member_epoch))
                    } else {
                        None
                    };
                    if let Err(code) = self.validate_fetch_member(group.group_id.0.as_str(), member)
                    {
                        let mut out = OffsetFetchResponseGroup::default();
                        out.group_id = group.group_id;
                        out.error_code = code;
                        return out;
                    }
                    let answer = self.fetch_offsets(group.group_id.0.as_str(), query);
                    let unstable = if req.require_stable {
                        self.unstable_offsets(group.group_id.0.as_str())
                    } else {
                        HashSet::new()
                    };
                    let mut out = OffsetFetchResponseGroup::default();
                    out.group_id = group.group_id;
                    out.error_code = codes::NONE;
                    out.topics = answer
                        .into_iter()
                        .map(|(topic, partitions)| {
                            let mut t = OffsetFetchResponseTopics::default();
                            t.partitions = partitions
                                .into_iter()
                                .map(|(partition, found)| {
                                    let mut p = OffsetFetchResponsePartitions::default();
                                    p.partition_index = partition;
                                    if unstable.contains(&(topic.clone(), partition)) {
                                        p.committed_offset = -1;
                                        p.committed_leader_epoch = -1;
                                        p.error_code = codes::UNSTABLE_OFFSET_COMMIT;
                                        return p;
                                    }
                                    p.committed_offset = found.as_ref().map_or(-1, |o| o.offset);
                                    p.committed_leader_epoch =
                                        found.as_ref().map_or(-1, |o| o.leader_epoch);
                                    p.metadata =
                                        Some(sb(found.map(|o| o.metadata).unwrap_or_default()));
                                    p.error_code = codes::NONE;
                                    p
                                })
                                .collect();
                            t.name = TopicName(sb(topic));
                            t
                        })
                        .collect();
                    out
                })
                .collect();
        } else {
            let query: TopicsQuery = req.topics.map(|topics| {
                topics
                    .into_iter()
                    .map(|t| (t.name.0.as_str().to_owned(), t.partition_indexes))
                    .collect()
            });
            let answer = self.fetch_offsets(req.group_id.0.as_str(), query);
            let unstable = if version >= 7 && req.require_stable {
                self.unstable_offsets(req.group_id.0.as_str())
            } else {
                HashSet::new()
            };
            resp.topics = answer
                .into_iter()
                .map(|(topic, partitions)| {
                    let mut t = OffsetFetchResponseTopic::default();
                    t.partitions = partitions
                        .into_iter()
                        .map(|(partition, found)| {
                            let mut p = OffsetFetchResponsePartition::default();
                            p.partition_index = partition;
                            if unstable.contains(&(topic.clone(), partition)) {
                                p.committed_offset = -1;
                                p.committed_leader_epoch = -1;
                                p.error_code = codes::UNSTABLE_OFFSET_COMMIT;
                                return p;
                            }
                            p.committed_offset = found.as_ref().map_or(-1, |o| o.offset);
                            if version >= 5 {
                                p.committed_leader_epoch =
                                    found.as_ref().map_or(-1, |o| o.leader_epoch);
                            }
                            p.metadata = Some(sb(found.map(|o| o.metadata).unwrap_or_default()));
                            p.error_code = codes::NONE;
                            p
                        })
                        .collect();
                    t.name = TopicName(sb(topic));
                    t
                })
                .collect();
            resp.error_code = codes::NONE;
        }
        resp
    }

    /// Kafka's `validateOffsetFetch` for a consumer-protocol group: a member id (OffsetFetch
    /// v9) must be a member at that epoch. Classic groups and anonymous fetches pass.
    fn validate_fetch_member(
        &self,
        group_id: &str,
        member: Option<(&str, i32)>,
    ) -> Result<(), i16> {
        let Some((member_id, epoch)) = member else {
            return Ok(());
        };
        let Some(group) = self.get_group(group_id) else {
            return Ok(());
        };
        let g = lock(&group);
        match &g.consumer {
            Some(cg) if !g.is(GroupState::Dead) => {
                validate_member_offsets(cg, member_id, epoch, None).map_err(|code| {
                    // Fetching at an older epoch is only ever stale, never fenced.
                    if code == codes::FENCED_MEMBER_EPOCH {
                        codes::STALE_MEMBER_EPOCH
                    } else {
                        code
                    }
                })
            }
            _ => Ok(()),
        }
    }

    /// The partitions of `group_id` with a transactional offset not settled yet.
    fn unstable_offsets(&self, group_id: &str) -> HashSet<(String, i32)> {
        let Some(group) = self.get_group(group_id) else {
            return HashSet::new();
        };
        let g = lock(&group);
        g.pending_txn_offsets
            .values()
            .flat_map(|p| p.keys().cloned())
            .collect()
    }

    fn fetch_offsets(&self, group_id: &str, query: TopicsQuery) -> TopicsAnswer {
        let group = self.get_group(group_id);
        let g = group.as_ref().map(|g| lock(g));
        let offsets = g
            .as_ref()
            .filter(|g| !g.is(GroupState::Dead))
            .map(|g| &g.offsets);
        match query {
            Some(topics) => topics
                .into_iter()
                .map(|(topic, partitions)| {
                    let found = partitions
                        .into_iter()
                        .map(|p| {
                            let value = offsets.and_then(|o| o.get(&(topic.clone(), p)).cloned());
                            (p, value)
                        })
                        .collect();
                    (topic, found)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, Option<OffsetValue>)>> =
                    BTreeMap::new();
                for ((topic, p), value) in offsets.into_iter().flatten() {
                    by_topic
                        .entry(topic.clone())
                        .or_default()
                        .push((*p, Some(value.clone())));
                }
                by_topic.into_iter().collect()
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // OffsetDelete.

    /// Kafka's `handleDeleteOffsets`: an Empty group loses the offsets; a consumer group with
    /// members keeps those of topics it subscribes to (GROUP_SUBSCRIBED_TO_TOPIC).
    pub fn offset_delete(&self, req: OffsetDeleteRequest, _version: i16) -> OffsetDeleteResponse {
        let mut resp = OffsetDeleteResponse::default();
        resp.throttle_time_ms = 0;
        let group_id = req.group_id.0.as_str();
        if group_id.is_empty() {
            resp.error_code = codes::INVALID_GROUP_ID;
            return resp;
        }
        let Some(group) = self.get_group(group_id) else {
            resp.error_code = codes::GROUP_ID_NOT_FOUND;
            return resp;
        };
        let mut g = lock(&group);
        let subscribed_check = if g.is(GroupState::Dead) {
            resp.error_code = codes::GROUP_ID_NOT_FOUND;
            return resp;
        } else if g.is_empty() {
            false
        } else if g.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE) {
            true
        } else {
            resp.error_code = codes::NON_EMPTY_GROUP;
            return resp;
        };
        let mut removed = Vec::new();
        resp.topics = req
            .topics
            .into_iter()
            .map(|topic| {
                let name = topic.name.0.as_str().to_owned();
                let subscribed = subscribed_check && g.is_subscribed_to_topic(&name);
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut out = OffsetDeleteResponsePartition::default();
                        out.partition_index = p.partition_index;
                        out.error_code = if subscribed {
                            codes::GROUP_SUBSCRIBED_TO_TOPIC
                        } else {
                            let key = (name.clone(), p.partition_index);
                            if g.offsets.remove(&key).is_some() {
                                removed.push(key);
                            }
                            codes::NONE
                        };
                        out
                    })
                    .collect();
                let mut t = OffsetDeleteResponseTopic::default();
                t.name = topic.name;
                t.partitions = partitions;
                t
            })
            .collect();
        resp.error_code = codes::NONE;
        // The group stays, Empty, even with no offset left: Kafka 4's coordinator removes it
        // only by DeleteGroups or at the next offsets-retention check.
        self.write_offset_tombstones(&g, removed);
        resp
    }

    // -----------------------------------------------------------------------------------------
    // ListGroups, DescribeGroups, DeleteGroups.

    /// Kafka's `handleListGroups` (v4+ filter by state, v5+ by type).
    pub fn list_groups(&self, req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
        let states: HashSet<String> = if version >= 4 {
            req.states_filter
                .iter()
                .map(|s| s.as_str().to_lowercase())
                .collect()
        } else {
            HashSet::new()
        };
        let types: HashSet<String> = if version >= 5 {
            req.types_filter
                .iter()
                .map(|t| t.as_str().to_lowercase())
                .collect()
        } else {
            HashSet::new()
        };
        let mut listed = Vec::new();
        for (group_id, group) in self.snapshot_groups() {
            let g = lock(&group);
            if g.is(GroupState::Dead) {
                continue;
            }
            if !states.is_empty() && !states.contains(&g.state_name().to_lowercase()) {
                continue;
            }
            if !types.is_empty() && !types.contains(g.type_name()) {
                continue;
            }
            let mut out = ListedGroup::default();
            out.group_id = GroupId(sb(group_id));
            out.protocol_type = sb(g.protocol_type.clone().unwrap_or_default());
            if version >= 4 {
                out.group_state = sb(g.state_name());
            }
            if version >= 5 {
                out.group_type = sb(g.type_name());
            }
            listed.push(out);
        }
        listed.sort_by(|a, b| a.group_id.0.as_str().cmp(b.group_id.0.as_str()));
        let mut resp = ListGroupsResponse::default();
        resp.throttle_time_ms = 0;
        resp.error_code = codes::NONE;
        resp.groups = listed;
        resp
    }

    /// Kafka's `handleDescribeGroup`, for each group asked for.
    pub fn describe_groups(
        &self,
        req: DescribeGroupsRequest,
        version: i16,
    ) -> DescribeGroupsResponse {
        let authorized_operations = if version >= 3 && req.include_authorized_operations {
            GROUP_AUTHORIZED_OPERATIONS
        } else {
            i32::MIN
        };
        let mut resp = DescribeGroupsResponse::default();
        resp.throttle_time_ms = 0;
        resp.groups = req
            .groups
            .into_iter()
            .map(|group_id| {
                let mut out = DescribedGroup::default();
                out.authorized_operations = authorized_operations;
                out.error_code = codes::NONE;
                let group = self.get_group(group_id.0.as_str());
                let g = group.as_ref().map(|g| lock(g));
                // A consumer-protocol group is not one DescribeGroups describes: Kafka answers
                // Dead (v0–5) or GROUP_ID_NOT_FOUND (v6+); ConsumerGroupDescribe does.
                match g
                    .as_deref()
                    .filter(|g| !g.is(GroupState::Dead) && g.consumer.is_none())
                {
                    None => {
                        if version >= 6 {
                            out.error_code = codes::GROUP_ID_NOT_FOUND;
                            out.error_message =
                                Some(sb(format!("Group {} not found.", group_id.0.as_str())));
                        }
                        out.group_state = sb(GroupState::Dead.name());
                    }
                    Some(g) => {
                        let stable = g.is(GroupState::Stable);
                        out.group_state = sb(g.state.name());
                        out.protocol_type = sb(g.protocol_type.clone().unwrap_or_default());
                        out.protocol_data = sb(if stable {
                            g.protocol_name.clone().unwrap_or_default()
                        } else {
                            String::new()
                        });
                        let protocol = g.protocol_name.as_deref().unwrap_or_default();
                        out.members = g
                            .members
                            .values()
                            .map(|m| {
                                let mut d = DescribedGroupMember::default();
                                d.member_id = sb(m.member_id.clone());
                                d.group_instance_id = if version >= 4 {
                                    m.group_instance_id.clone().map(sb)
                                } else {
                                    None
                                };
                                d.client_id = sb(m.client_id.clone());
                                d.client_host = sb(m.client_host.clone());
                                if stable {
                                    d.member_metadata =
                                        m.metadata(protocol).cloned().unwrap_or_default();
                                    d.member_assignment = m.assignment.clone();
                                }
                                d
                            })
                            .collect();
                    }
                }
                out.group_id = group_id;
                out
            })
            .collect();
        resp
    }

    /// Kafka's `handleDeleteGroups`: Empty groups go, with tombstones for their offsets and
    /// metadata; others answer NON_EMPTY_GROUP, unknown ones GROUP_ID_NOT_FOUND.
    pub fn delete_groups(&self, req: DeleteGroupsRequest, _version: i16) -> DeleteGroupsResponse {
        let mut seen = HashSet::new();
        let mut results = Vec::new();
        for group_id in req.groups_names {
            if !seen.insert(group_id.0.as_str().to_owned()) {
                continue;
            }
            let error = self.delete_group(group_id.0.as_str());
            let mut r = DeletableGroupResult::default();
            r.group_id = group_id;
            r.error_code = error;
            results.push(r);
        }
        let mut resp = DeleteGroupsResponse::default();
        resp.throttle_time_ms = 0;
        resp.results = results;
        resp
    }

    fn delete_group(&self, group_id: &str) -> i16 {
        let Some(group) = self.get_group(group_id) else {
            return codes::GROUP_ID_NOT_FOUND;
        };
        let mut g = lock(&group);
        match g.state {
            GroupState::Dead => codes::GROUP_ID_NOT_FOUND,
            // Offsets a transaction has not settled yet keep the group, as in Kafka.
            GroupState::Empty if g.is_empty() && g.pending_txn_offsets.is_empty() => {
                let removed: Vec<(String, i32)> =
                    std::mem::take(&mut g.offsets).into_keys().collect();
                let dead = self.cleanup_group(&mut g, removed);
                debug_assert!(dead);
                drop(g);
                self.forget_group(group_id, &group);
                info!(group = %group_id, "group deleted");
                codes::NONE
            }
            _ => codes::NON_EMPTY_GROUP,
        }
    }

    // -----------------------------------------------------------------------------------------
    // Cleanup: deleted topics, expired offsets, dead groups.

    /// Forgets the committed offsets of a deleted topic (and writes their tombstones).
    pub fn on_topic_deleted(&self, topic: &str) {
        let mut total = 0;
        for (group_id, group) in self.snapshot_groups() {
            let mut g = lock(&group);
            if g.is(GroupState::Dead) {
                continue;
            }
            let removed: Vec<(String, i32)> = g
                .offsets
                .keys()
                .filter(|(t, _)| t == topic)
                .cloned()
                .collect();
            if removed.is_empty() {
                continue;
            }
            for key in &removed {
                g.offsets.remove(key);
            }
            total += removed.len();
            let dead = self.cleanup_group(&mut g, removed);
            drop(g);
            if dead {
                self.forget_group(&group_id, &group);
            }
        }
        info!(%topic, offsets = total, "removed offsets of a deleted topic");
    }

    /// Forgets every group of `__consumer_offsets` partition `partition`: this broker
    /// stopped leading it, so another coordinates them now (Kafka's
    /// `removeGroupsForPartition`). Parked JoinGroup and SyncGroup calls are answered
    /// NOT_COORDINATOR, which sends their clients to look the coordinator up again. Nothing
    /// is written: the groups' records stay in the partition for the next coordinator.
    /// Returns how many groups were unloaded.
    pub fn unload_partition(&self, partition: i32) -> usize {
        let mut unloaded = 0;
        for (group_id, group) in self.snapshot_groups() {
            if self.partition_for(&group_id) != partition {
                continue;
            }
            {
                let mut g = lock(&group);
                let ids: Vec<String> = g.members.keys().cloned().collect();
                for id in ids {
                    if let Some(mut m) = g.remove_member(&id) {
                        m.answer_join(JoinOutcome::error("", codes::NOT_COORDINATOR));
                        m.answer_sync(SyncOutcome::error(codes::NOT_COORDINATOR));
                    }
                }
                g.transition_to(GroupState::Dead, self.now_ms());
            }
            self.forget_group(&group_id, &group);
            unloaded += 1;
        }
        if unloaded > 0 {
            info!(
                partition,
                groups = unloaded,
                "unloaded the groups of an offsets partition this broker no longer leads"
            );
        }
        unloaded
    }

    /// Kafka's `cleanupGroupMetadata` with `removeExpiredOffsets`: run every
    /// `offsets.retention.check.interval.ms`.
    pub(super) fn cleanup_expired_offsets(&self) {
        let now_ms = self.now_ms();
        let mut total = 0;
        for (group_id, group) in self.snapshot_groups() {
            let mut g = lock(&group);
            if g.is(GroupState::Dead) {
                continue;
            }
            let removed = g.remove_expired_offsets(now_ms, self.config.offsets_retention_ms);
            total += removed.len();
            let dead = self.cleanup_group(&mut g, removed);
            drop(g);
            if dead {
                self.forget_group(&group_id, &group);
            }
        }
        if total > 0 {
            info!(offsets = total, "expired committed offsets");
        }
    }

    /// After offsets were removed from `g`: an Empty group without offsets dies. Writes the
    /// tombstones (offsets, and the group's metadata if it ever had any: generation > 0).
    /// Returns whether the group is now Dead (the caller then drops it from the map).
    fn cleanup_group(&self, g: &mut Group, removed: Vec<(String, i32)>) -> bool {
        let mut tombstones = Self::offset_tombstones(g, &removed);
        let dead = g.is_empty() && g.offsets.is_empty() && g.pending_txn_offsets.is_empty();
        if dead {
            let now_ms = self.now_ms();
            g.transition_to(GroupState::Dead, now_ms);
            g.join_timer = None;
            g.sync_timer = None;
            g.pending_members.clear();
            if g.generation_id > 0 {
                match records::encode_group_key(&g.group_id) {
                    Ok(key) => tombstones.push((key, None)),
                    Err(e) => warn!(group = %g.group_id, "cannot encode group key: {e}"),
                }
            }
            info!(group = %g.group_id, generation = g.generation_id, "group is dead");
        }
        self.write_tombstones(g, tombstones);
        dead
    }

    /// The tombstones of `removed` offsets of `g`.
    fn offset_tombstones(g: &Group, removed: &[(String, i32)]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut tombstones = Vec::with_capacity(removed.len() + 1);
        for (topic, partition) in removed {
            match records::encode_offset_key(&g.group_id, topic, *partition) {
                Ok(key) => tombstones.push((key, None)),
                Err(e) => warn!(group = %g.group_id, "cannot encode offset key: {e}"),
            }
        }
        tombstones
    }

    /// Writes the tombstones of `removed` offsets of `g`, and nothing else.
    fn write_offset_tombstones(&self, g: &Group, removed: Vec<(String, i32)>) {
        self.write_tombstones(g, Self::offset_tombstones(g, &removed));
    }

    fn write_tombstones(&self, g: &Group, tombstones: Vec<(Vec<u8>, Option<Vec<u8>>)>) {
        if tombstones.is_empty() {
            return;
        }
        let partition = self.partition_for(&g.group_id);
        if let Err(code) = self.store.append(partition, tombstones, self.now_ms()) {
            // Lost tombstones only mean the records come back at the next load, where
            // expiry removes them again.
            warn!(group = %g.group_id, code, "failed to write tombstones");
        }
    }

    // -----------------------------------------------------------------------------------------
    // Loading.

    /// Start-up: replays the stored records of `__consumer_offsets` (each partition in offset
    /// order; key, value — value `None` = tombstone). Groups come back Empty (members are not
    /// restored; they rejoin) but keep their generation id, protocol type and committed
    /// offsets. Unreadable records and unknown key versions are skipped with a warning.
    pub fn load(&self, records: impl IntoIterator<Item = (Vec<u8>, Option<Vec<u8>>)>) {
        self.load_stored(records.into_iter().map(|(key, value)| Stored::Record {
            key,
            value,
            txn_producer: None,
        }))
    }

    /// `load`, with transactions: a transactional batch's records count once their
    /// producer's COMMIT marker follows, are dropped at its ABORT, and are held as the
    /// group's pending transactional offsets while neither has come.
    pub fn load_stored(&self, stored: impl IntoIterator<Item = Stored>) {
        let mut offsets: HashMap<(String, String, i32), OffsetValue> = HashMap::new();
        let mut metadata: HashMap<String, GroupValue> = HashMap::new();
        let mut skipped_versions: BTreeMap<i16, usize> = BTreeMap::new();
        let mut unreadable = 0usize;
        let mut open_txns: BTreeMap<i64, Vec<StoredPair>> = BTreeMap::new();
        let mut settled: Vec<StoredPair> = Vec::new();
        let mut records = Vec::new();
        for item in stored {
            match item {
                Stored::Record {
                    key,
                    value,
                    txn_producer: Some(pid),
                } => open_txns.entry(pid).or_default().push((key, value)),
                Stored::Record { key, value, .. } => records.push((key, value)),
                Stored::Marker {
                    producer_id,
                    commit,
                } => {
                    if let Some(rs) = open_txns.remove(&producer_id) {
                        if commit {
                            records.extend(rs);
                        }
                    }
                }
            }
        }
        // What is left belongs to transactions still open.
        let mut pending: Vec<(i64, String, String, i32, OffsetValue)> = Vec::new();
        for (pid, rs) in &open_txns {
            for (key, value) in rs {
                if let (
                    Ok(RecordKey::Offset {
                        group,
                        topic,
                        partition,
                    }),
                    Some(v),
                ) = (records::decode_key(key), value)
                {
                    if let Ok(v) = records::decode_offset_value(v) {
                        pending.push((*pid, group, topic, partition, v));
                    }
                }
            }
        }
        settled.append(&mut records);
        for (key, value) in settled {
            match records::decode_key(&key) {
                Ok(RecordKey::Offset {
                    group,
                    topic,
                    partition,
                }) => match value {
                    None => {
                        offsets.remove(&(group, topic, partition));
                    }
                    Some(value) => match records::decode_offset_value(&value) {
                        Ok(v) => {
                            offsets.insert((group, topic, partition), v);
                        }
                        Err(e) => {
                            unreadable += 1;
                            warn!(%group, %topic, partition, "skipping unreadable offset commit: {e}");
                        }
                    },
                },
                Ok(RecordKey::Group { group }) => match value {
                    None => {
                        metadata.remove(&group);
                    }
                    Some(value) => match records::decode_group_value(&value) {
                        Ok(v) => {
                            metadata.insert(group, v);
                        }
                        Err(e) => {
                            unreadable += 1;
                            warn!(%group, "skipping unreadable group metadata: {e}");
                        }
                    },
                },
                Ok(RecordKey::Other(version)) => *skipped_versions.entry(version).or_default() += 1,
                Err(e) => {
                    unreadable += 1;
                    warn!("skipping __consumer_offsets record with an unreadable key: {e}");
                }
            }
        }
        for (version, count) in &skipped_versions {
            warn!(
                version,
                count, "skipped __consumer_offsets records of an unknown key version"
            );
        }

        let now_ms = self.now_ms();
        let mut loaded: HashMap<String, Group> = HashMap::new();
        for (group_id, value) in metadata {
            let mut g = Group::new(group_id.clone(), now_ms);
            g.generation_id = value.generation;
            g.protocol_type = Some(value.protocol_type).filter(|t| !t.is_empty());
            // A group written with members comes back Empty now; one written Empty keeps the
            // time it became Empty (for offset expiry), if the record carried it.
            g.state_timestamp_ms = if !value.members.is_empty() {
                Some(now_ms)
            } else if value.current_state_timestamp >= 0 {
                Some(value.current_state_timestamp)
            } else {
                None
            };
            g.subscribed_topics = g.compute_subscribed_topics();
            loaded.insert(group_id, g);
        }
        let offset_count = offsets.len();
        for ((group_id, topic, partition), value) in offsets {
            loaded
                .entry(group_id.clone())
                .or_insert_with(|| Group::new(group_id, now_ms))
                .offsets
                .insert((topic, partition), value);
        }
        for (pid, group_id, topic, partition, value) in pending {
            loaded
                .entry(group_id.clone())
                .or_insert_with(|| Group::new(group_id, now_ms))
                .pending_txn_offsets
                .entry(pid)
                .or_default()
                .insert((topic, partition), value);
        }
        let group_count = loaded.len();
        {
            let mut groups = lock(&self.groups);
            for (group_id, g) in loaded {
                groups.insert(group_id, Arc::new(Mutex::new(g)));
            }
        }
        info!(
            groups = group_count,
            offsets = offset_count,
            unreadable,
            "loaded __consumer_offsets"
        );
        debug!("group load complete");
    }
}

/// Kafka's `validateOffsetCommit` (non-transactional).
fn validate_offset_commit(
    g: &Group,
    version: i16,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
) -> Result<(), i16> {
    if g.is(GroupState::Dead) {
        return Err(codes::COORDINATOR_NOT_AVAILABLE);
    }
    if let Some(consumer) = &g.consumer {
        return validate_member_offsets(consumer, member_id, generation, Some(version));
    }
    if generation < 0 && g.is(GroupState::Empty) {
        // The admin client, or a consumer using assign(): allowed while nobody is a member.
        return Ok(());
    }
    if generation >= 0 || !member_id.is_empty() || instance.is_some() {
        g.validate_current_member(member_id, instance)?;
        if generation != g.generation_id {
            return Err(codes::ILLEGAL_GENERATION);
        }
    } else if !g.is(GroupState::Empty) {
        // Without member id and generation, only an Empty group takes commits.
        return Err(codes::UNKNOWN_MEMBER_ID);
    }
    if g.is(GroupState::CompletingRebalance) {
        // The member has its new generation but not its assignment yet.
        return Err(codes::REBALANCE_IN_PROGRESS);
    }
    Ok(())
}
