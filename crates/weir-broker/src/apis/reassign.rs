//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455): move a
//! partition's replicas to other brokers, cancel a move, and see the moves under way. A
//! move adds the target replicas, lets them catch up into the ISR, hands leadership to one
//! of them, then drops the replicas left (see `cluster::reassign` and the controller's
//! `moves_done`). Needs ALTER on the cluster to move, DESCRIBE to list, as in Kafka. A
//! broker without `etcd.connect` holds the only replica of everything: it has nowhere to
//! move one to.

use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use weir_kafka::acl::Operation;
use weir_kafka::ApiError;

use crate::broker::Broker;
use crate::request::RequestContext;

fn partition_answer(p: i32, result: Result<(), ApiError>) -> ReassignablePartitionResponse {
    let mut r = ReassignablePartitionResponse::default();
    r.partition_index = p;
    if let Err(e) = result {
        r.error_code = e.code;
        r.error_message = Some(StrBytes::from_string(e.message));
    }
    r
}

pub fn alter_partition_reassignments(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let mut resp = AlterPartitionReassignmentsResponse::default();
    if ctx.version >= 1 {
        resp.allow_replication_factor_change = req.allow_replication_factor_change;
    }
    if !broker.allowed_on_cluster(ctx, Operation::Alter) {
        resp.error_code = E::ClusterAuthorizationFailed.code();
        resp.error_message = Some(StrBytes::from_static_str(
            "moving replicas needs ALTER on the cluster",
        ));
        return resp;
    }
    // v0 knows nothing of KIP-860: its moves may change the replication factor.
    let allow_rf_change = ctx.version == 0 || req.allow_replication_factor_change;
    for t in req.topics {
        let name = t.name.to_string();
        let asks: Vec<crate::cluster::MoveAsk> = t
            .partitions
            .iter()
            .map(|p| {
                (
                    p.partition_index,
                    p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
                )
            })
            .collect();
        let results: Vec<crate::cluster::MoveAnswer> = match &broker.cluster {
            Some(m) => {
                match crate::apis::off_worker(|| {
                    crate::cluster::reassign(m, &name, &asks, allow_rf_change)
                }) {
                    Ok(r) => r,
                    Err(e) => asks.iter().map(|(p, _)| (*p, Err(e.clone()))).collect(),
                }
            }
            None => asks
                .iter()
                .map(|(p, target)| {
                    let me = broker.config.node_id;
                    let result = match (broker.partition(&name, *p), target) {
                        (None, _) => Err(ApiError::new(
                            E::UnknownTopicOrPartition,
                            format!("{name}-{p} does not exist"),
                        )),
                        (Some(_), Some(t)) if *t == [me] => Ok(()),
                        (Some(_), None) => Err(ApiError::new(
                            E::NoReassignmentInProgress,
                            format!("{name}-{p} is not being moved"),
                        )),
                        (Some(_), Some(_)) => Err(ApiError::new(
                            E::InvalidReplicaAssignment,
                            format!(
                                "a broker without etcd.connect holds the only replica of \
                                 {name}-{p}; there is no other broker to move it to"
                            ),
                        )),
                    };
                    (*p, result)
                })
                .collect(),
        };
        let mut tr = ReassignableTopicResponse::default();
        tr.name = t.name;
        tr.partitions = results
            .into_iter()
            .map(|(p, r)| partition_answer(p, r))
            .collect();
        resp.responses.push(tr);
    }
    resp
}

pub fn list_partition_reassignments(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let mut resp = ListPartitionReassignmentsResponse::default();
    if !broker.allowed_on_cluster(ctx, Operation::Describe) {
        resp.error_code = E::ClusterAuthorizationFailed.code();
        resp.error_message = Some(StrBytes::from_static_str(
            "listing moves needs DESCRIBE on the cluster",
        ));
        return resp;
    }
    let Some(m) = &broker.cluster else {
        return resp; // nothing ever moves on one broker
    };
    let only: Option<Vec<(String, Vec<i32>)>> = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.to_string(), t.partition_indexes))
            .collect()
    });
    let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect::<Vec<_>>();
    let mut by_topic: std::collections::BTreeMap<String, Vec<OngoingPartitionReassignment>> =
        Default::default();
    for moving in crate::cluster::reassignments(m, only.as_deref()) {
        let mut o = OngoingPartitionReassignment::default();
        o.partition_index = moving.partition;
        o.replicas = ids(moving.replicas);
        o.adding_replicas = ids(moving.adding);
        o.removing_replicas = ids(moving.removing);
        by_topic.entry(moving.topic).or_default().push(o);
    }
    resp.topics = by_topic
        .into_iter()
        .map(|(name, partitions)| {
            let mut t = OngoingTopicReassignment::default();
            t.name = TopicName(StrBytes::from_string(name));
            t.partitions = partitions;
            t
        })
        .collect();
    resp
}
