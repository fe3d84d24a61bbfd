//! The Kafka APIs Weir serves and the versions of each: this table is exactly what
//! ApiVersions advertises, and anything outside it is refused. `handle` routes a decoded
//! request to the module of its API family.

use std::sync::Arc;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, RequestKind, ResponseKind};

use crate::broker::Broker;
use crate::connection::{encode, RequestContext};
use crate::outgoing::Outgoing;

mod acls;
mod admin;
mod fetch;
mod groups;
mod metadata;
mod misc;
mod offsets;
mod produce;
mod quotas;
pub mod sasl;

/// (API, lowest, highest version) served. The ranges cover what current clients send
/// (see shared/reference/kafka-clients.md) within what the kafka-protocol crate decodes.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeCluster, 0, 1),
    // After a v0 handshake the SASL tokens go as bare frames; v1 wraps them in
    // SaslAuthenticate. librdkafka asks for v0 in the range before it uses v1.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
];

pub fn is_supported(api: ApiKey, version: i16) -> bool {
    SUPPORTED
        .iter()
        .any(|(k, lo, hi)| *k == api && (*lo..=*hi).contains(&version))
}

/// The ApiVersions answer: every API in `SUPPORTED`.
pub fn api_versions_response() -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.api_keys = SUPPORTED
        .iter()
        .map(|(k, lo, hi)| {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = *lo;
            v.max_version = *hi;
            v
        })
        .collect();
    r
}

/// Routes a request and encodes its response. `Ok(None)` means no response is due (acks=0
/// produce); `Err` closes the connection (only for requests that break the protocol
/// itself).
pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: RequestKind,
) -> Result<Option<Outgoing>, String> {
    let v = ctx.version;
    let response = match request {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(api_versions_response()),
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::metadata(broker, ctx, r)),
        RequestKind::Produce(r) => match produce::produce(broker, ctx, r).await {
            Some(r) => ResponseKind::Produce(r),
            None => return Ok(None),
        },
        RequestKind::Fetch(r) => {
            let reply = fetch::fetch(broker, ctx, r).await;
            return fetch::encode(reply, v, ctx.correlation_id).map(Some);
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(offsets::list_offsets(broker, ctx, r))
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offsets::offset_for_leader_epoch(broker, ctx, r))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(offsets::delete_records(broker, ctx, r))
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(admin::create_topics(broker, ctx, r))
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(admin::delete_topics(broker, ctx, r))
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(admin::create_partitions(broker, ctx, r))
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(admin::describe_configs(broker, ctx, r))
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(admin::alter_configs(broker, ctx, r))
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            ResponseKind::IncrementalAlterConfigs(admin::incremental_alter_configs(broker, ctx, r))
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(misc::init_producer_id(broker, ctx, r))
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(misc::describe_cluster(broker, ctx, r))
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(groups::find_coordinator(broker, ctx, r))
        }
        RequestKind::JoinGroup(r) => {
            ResponseKind::JoinGroup(groups::join_group(broker, ctx, r).await)
        }
        RequestKind::SyncGroup(r) => {
            ResponseKind::SyncGroup(groups::sync_group(broker, ctx, r).await)
        }
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(groups::heartbeat(broker, ctx, r)),
        RequestKind::LeaveGroup(r) => ResponseKind::LeaveGroup(groups::leave_group(broker, ctx, r)),
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(groups::offset_commit(broker, ctx, r))
        }
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(groups::offset_fetch(broker, ctx, r))
        }
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(groups::list_groups(broker, ctx, r)),
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(groups::describe_groups(broker, ctx, r))
        }
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(groups::delete_groups(broker, ctx, r))
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(groups::offset_delete(broker, ctx, r))
        }
        RequestKind::CreateAcls(r) => ResponseKind::CreateAcls(acls::create_acls(broker, ctx, r)),
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(acls::describe_acls(broker, ctx, r))
        }
        RequestKind::DeleteAcls(r) => ResponseKind::DeleteAcls(acls::delete_acls(broker, ctx, r)),
        RequestKind::DescribeClientQuotas(r) => {
            ResponseKind::DescribeClientQuotas(quotas::describe_client_quotas(broker, ctx, r))
        }
        RequestKind::AlterClientQuotas(r) => {
            ResponseKind::AlterClientQuotas(quotas::alter_client_quotas(broker, ctx, r))
        }
        RequestKind::DescribeUserScramCredentials(r) => {
            ResponseKind::DescribeUserScramCredentials(sasl::describe_credentials(broker, ctx, r))
        }
        RequestKind::AlterUserScramCredentials(r) => {
            ResponseKind::AlterUserScramCredentials(sasl::alter_credentials(broker, ctx, r))
        }
        other => {
            return Err(format!(
                "no handler for {:?}",
                std::mem::discriminant(&other)
            ))
        }
    };
    encode(ctx.api_key, v, ctx.correlation_id, &response).map(|b| Some(Outgoing::Frame(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_range_is_one_the_codec_supports() {
        for (k, lo, hi) in SUPPORTED {
            let r = k.valid_versions();
            assert!(
                r.min <= *lo && *hi <= r.max,
                "{k:?} {lo}..={hi} outside {}..={}",
                r.min,
                r.max
            );
        }
    }
}
