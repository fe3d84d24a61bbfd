//! Offsets committed inside a transaction (KIP-98's TxnOffsetCommit, KIP-447's member
//! checks): written to `__consumer_offsets` as a transactional batch of the producer, held
//! aside per producer id, and the group's only once that producer's COMMIT marker is on the
//! group's offsets partition (an ABORT drops them). Until then OffsetFetch with
//! `require_stable` answers UNSTABLE_OFFSET_COMMIT for them.

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use tracing::{debug, warn};

use super::codes;
use super::consumer::validate_member_offsets;
use super::coordinator::{lock, GroupCoordinator};
use super::metadata::{Group, GroupState};
use super::records::{self, fits_string, OffsetValue};

impl GroupCoordinator {
    /// Kafka's `handleTxnCommitOffsets`: validates the committer, writes the offsets as the
    /// producer's transactional records, and holds them until the transaction ends.
    pub fn txn_offset_commit(
        &self,
        req: TxnOffsetCommitRequest,
        version: i16,
        partition_exists: &dyn Fn(&str, i32) -> bool,
    ) -> TxnOffsetCommitResponse {
        let now_ms = self.now_ms();
        let group_id = req.group_id.0.as_str();
        let mut errors: Vec<Vec<i16>> = Vec::with_capacity(req.topics.len());
        let mut to_commit: Vec<(usize, usize, String, i32, OffsetValue)> = Vec::new();
        for (ti, topic) in req.topics.iter().enumerate() {
            let name = topic.name.0.as_str();
            let mut row = Vec::with_capacity(topic.partitions.len());
            for (pi, p) in topic.partitions.iter().enumerate() {
                if !partition_exists(name, p.partition_index) {
                    row.push(codes::UNKNOWN_TOPIC_OR_PARTITION);
                    continue;
                }
                row.push(codes::NONE);
                to_commit.push((
                    ti,
                    pi,
                    name.to_owned(),
                    p.partition_index,
                    OffsetValue {
                        offset: p.committed_offset,
                        leader_epoch: if version >= 2 {
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
                        expire_timestamp: None,
                    },
                ));
            }
            errors.push(row);
        }
        if !to_commit.is_empty() {
            let (generation, member, instance) = if version >= 3 {
                (
                    req.generation_id,
                    req.member_id.as_str(),
                    req.group_instance_id.as_ref().map(|s| s.as_str()),
                )
            } else {
                (-1, "", None)
            };
            let result = self.commit_txn_offsets(
                group_id,
                (generation, member, instance),
                (req.producer_id.0, req.producer_epoch),
                &to_commit,
                now_ms,
            );
            for (i, (ti, pi, ..)) in to_commit.iter().enumerate() {
                errors[*ti][*pi] = match &result {
                    Err(code) => *code,
                    Ok(per_partition) => per_partition[i],
                };
            }
        }
        let mut resp = TxnOffsetCommitResponse::default();
        resp.topics = req
            .topics
            .into_iter()
            .zip(errors)
            .map(|(topic, row)| {
                let mut t = TxnOffsetCommitResponseTopic::default();
                t.name = topic.name;
                t.partitions = topic
                    .partitions
                    .iter()
                    .zip(row)
                    .map(|(p, error)| {
                        let mut out = TxnOffsetCommitResponsePartition::default();
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

    /// `Err` applies to every partition; else each partition's outcome.
    fn commit_txn_offsets(
        &self,
        group_id: &str,
        (generation, member_id, instance): (i32, &str, Option<&str>),
        (producer_id, producer_epoch): (i64, i16),
        offsets: &[(usize, usize, String, i32, OffsetValue)],
        now_ms: i64,
    ) -> Result<Vec<i16>, i16> {
        if !fits_string(group_id) {
            return Err(codes::INVALID_GROUP_ID);
        }
        // A transactional commit for a group nobody made yet makes it, as in Kafka.
        let group = self.get_or_create_group(group_id);
        let mut g = lock(&group);
        validate_txn_commit(&g, generation, member_id, instance)?;
        let mut results = vec![codes::NONE; offsets.len()];
        let mut records = Vec::with_capacity(offsets.len());
        let mut written = Vec::with_capacity(offsets.len());
        for (i, (_, _, topic, partition, value)) in offsets.iter().enumerate() {
            if value.metadata.encode_utf16().count() > self.config.offset_metadata_max_bytes {
                results[i] = codes::OFFSET_METADATA_TOO_LARGE;
                continue;
            }
            match (
                records::encode_offset_key(&g.group_id, topic, *partition),
                records::encode_offset_value(value),
            ) {
                (Ok(key), Ok(val)) => {
                    records.push((key, Some(val)));
                    written.push(i);
                }
                _ => results[i] = codes::OFFSET_METADATA_TOO_LARGE,
            }
        }
        if records.is_empty() {
            return Ok(results);
        }
        let partition = self.partition_for(&g.group_id);
        match self.store.append_transactional(
            partition,
            (producer_id, producer_epoch),
            records,
            now_ms,
        ) {
            Ok(()) => {
                let pending = g.pending_txn_offsets.entry(producer_id).or_default();
                for i in written {
                    let (_, _, topic, p, value) = &offsets[i];
                    pending.insert((topic.clone(), *p), value.clone());
                }
            }
            Err(code) => {
                warn!(group = %g.group_id, producer_id, code, "failed to store transactional offsets");
                let code = codes::for_offset_store(code);
                for i in written {
                    results[i] = code;
                }
            }
        }
        Ok(results)
    }

    /// A COMMIT (`commit`) or ABORT marker of `producer_id` is on offsets partition
    /// `partition`: the offsets its transaction committed for the groups there become
    /// theirs, or are dropped.
    pub fn complete_txn(&self, partition: i32, producer_id: i64, commit: bool) {
        for (group_id, group) in self.snapshot_groups() {
            if self.partition_for(&group_id) != partition {
                continue;
            }
            let mut g = lock(&group);
            let Some(pending) = g.pending_txn_offsets.remove(&producer_id) else {
                continue;
            };
            debug!(
                group = %group_id,
                producer_id,
                offsets = pending.len(),
                commit,
                "transactional offsets settled"
            );
            if commit {
                g.offsets.extend(pending);
            }
        }
    }
}

/// Kafka's `validateOffsetCommit` for a transactional commit: a producer outside group
/// management (no generation, member or instance) may always commit; a member must be the
/// current one, at the group's generation (or member epoch, for a KIP-848 group).
fn validate_txn_commit(
    g: &Group,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
) -> Result<(), i16> {
    if g.is(GroupState::Dead) {
        return Err(codes::COORDINATOR_NOT_AVAILABLE);
    }
    if generation < 0 && member_id.is_empty() && instance.is_none() {
        return Ok(());
    }
    if let Some(consumer) = &g.consumer {
        return validate_member_offsets(consumer, member_id, generation, None);
    }
    g.validate_current_member(member_id, instance)?;
    if generation != g.generation_id {
        return Err(codes::ILLEGAL_GENERATION);
    }
    Ok(())
}
