//! The request handlers, one module per API family. `handle` routes a decoded request to
//! its family; each handler takes the broker, the request's context and the request, and
//! answers with a value (`Response`). Handlers never see frames, sockets or sessions:
//! SASL's two APIs, which change the connection's session, are routed by the connection.

use std::sync::Arc;

use kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::broker::Broker;
use crate::mutation_quota::Limit;
use crate::request::{RequestContext, Response};
use crate::versions::api_versions_response;
use weir_kafka::quota::CONTROLLER_MUTATION_RATE;

mod acls;
mod admin;
mod elections;
mod fetch;
mod groups;
mod log_dirs;
mod metadata;
mod misc;
mod offsets;
mod produce;
mod quotas;
mod reassign;
pub mod sasl;
mod txns;

/// Runs blocking work (making files, syncing them) from a handler without holding up the
/// other connections this worker thread serves: on a multi-threaded runtime the worker's
/// other tasks move to another thread meanwhile.
pub(crate) fn off_worker<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// The controller mutation limit (KIP-599) of a request's client: the
/// `controller_mutation_rate` client quota that applies to it, else the broker's
/// `controller.mutation.rate` for its principal.
pub(crate) fn mutation_limit(broker: &Broker, ctx: &RequestContext) -> Limit {
    let quota = broker
        .quotas
        .limit(CONTROLLER_MUTATION_RATE, ctx.user(), &ctx.client_id);
    broker.mutations.limit(&ctx.principal, quota)
}

/// Why `what` was refused by `limit`'s quota, in words that say which setting to raise.
pub(crate) fn over_mutation_quota(
    broker: &Broker,
    what: &str,
    ctx: &RequestContext,
    limit: &Limit,
) -> String {
    let setting = if limit.key == ctx.principal {
        "controller.mutation.rate"
    } else {
        "its controller_mutation_rate client quota"
    };
    format!(
        "{what}: {} (client id '{}') is over its controller mutation quota ({} partitions a \
         second, {} at once; {setting})",
        ctx.principal,
        ctx.client_id,
        limit.rate,
        broker.mutations.burst(limit.rate)
    )
}

/// Routes a request to its handler. `Err` closes the connection (only for requests that
/// break the protocol itself).
pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: RequestKind,
) -> Result<Response, String> {
    let response = match request {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(api_versions_response()),
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::metadata(broker, ctx, r)),
        RequestKind::Produce(r) => match produce::produce(broker, ctx, r).await {
            Some(r) => ResponseKind::Produce(r),
            None => return Ok(Response::None),
        },
        RequestKind::Fetch(r) => return Ok(Response::Fetch(fetch::fetch(broker, ctx, r).await)),
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
            ResponseKind::CreateTopics(admin::create_topics(broker, ctx, r).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(admin::delete_topics(broker, ctx, r).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(admin::create_partitions(broker, ctx, r).await)
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
            ResponseKind::InitProducerId(misc::init_producer_id(broker, ctx, r).await)
        }
        RequestKind::AddPartitionsToTxn(r) => {
            ResponseKind::AddPartitionsToTxn(txns::add_partitions_to_txn(broker, ctx, r).await)
        }
        RequestKind::AddOffsetsToTxn(r) => {
            ResponseKind::AddOffsetsToTxn(txns::add_offsets_to_txn(broker, ctx, r).await)
        }
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(txns::end_txn(broker, ctx, r).await),
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(groups::txn_offset_commit(broker, ctx, r).await)
        }
        RequestKind::WriteTxnMarkers(r) => {
            ResponseKind::WriteTxnMarkers(txns::write_txn_markers(broker, ctx, r).await)
        }
        RequestKind::ListTransactions(r) => {
            ResponseKind::ListTransactions(txns::list_transactions(broker, ctx, r))
        }
        RequestKind::DescribeTransactions(r) => {
            ResponseKind::DescribeTransactions(txns::describe_transactions(broker, ctx, r))
        }
        RequestKind::DescribeProducers(r) => {
            ResponseKind::DescribeProducers(txns::describe_producers(broker, ctx, r))
        }
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            reassign::alter_partition_reassignments(broker, ctx, r),
        ),
        RequestKind::ListPartitionReassignments(r) => ResponseKind::ListPartitionReassignments(
            reassign::list_partition_reassignments(broker, ctx, r),
        ),
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(elections::elect_leaders(broker, ctx, r))
        }
        RequestKind::DescribeLogDirs(r) => {
            ResponseKind::DescribeLogDirs(log_dirs::describe_log_dirs(broker, ctx, r))
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
        RequestKind::ConsumerGroupHeartbeat(r) => {
            ResponseKind::ConsumerGroupHeartbeat(groups::consumer_group_heartbeat(broker, ctx, r))
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            ResponseKind::ConsumerGroupDescribe(groups::consumer_group_describe(broker, ctx, r))
        }
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(groups::offset_commit(broker, ctx, r).await)
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
    Ok(Response::Message(response))
}
