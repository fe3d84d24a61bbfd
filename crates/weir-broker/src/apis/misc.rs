//! InitProducerId for idempotent producers (transactional ones go to `txns`), and
//! DescribeCluster.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;

use crate::apis::metadata::cluster_operations;
use crate::broker::Broker;
use crate::request::RequestContext;
use weir_kafka::acl::{Operation, ResourceType};

pub async fn init_producer_id(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    if let Some(txn) = &req.transactional_id {
        return super::txns::init_transactional_producer(broker, ctx, &req, &txn.0).await;
    }
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    // An idempotent producer needs IDEMPOTENT_WRITE on the cluster or, since KIP-679,
    // WRITE on some topic.
    let may_write = broker.allowed_on_cluster(ctx, Operation::IdempotentWrite)
        || broker.authorizer.as_ref().is_none_or(|a| {
            a.authorize_any(
                &ctx.principal,
                &ctx.host,
                Operation::Write,
                ResourceType::Topic,
            )
        });
    if !may_write {
        resp.error_code = E::ClusterAuthorizationFailed.code();
        return resp;
    }
    // KIP-360: an idempotent producer may ask to bump its epoch after an error; a new id
    // comes when the epoch would overflow.
    if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
        resp.producer_id = req.producer_id;
        resp.producer_epoch = req.producer_epoch + 1;
        return resp;
    }
    match broker.allocate_producer_id() {
        Ok(id) => {
            resp.producer_id = ProducerId(id);
            resp.producer_epoch = 0;
        }
        Err(e) => {
            tracing::error!("allocating a producer id: {}", e.message);
            resp.error_code = e.code;
        }
    }
    resp
}

pub fn describe_cluster(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let mut resp = DescribeClusterResponse::default();
    resp.brokers = broker
        .live_brokers(&ctx.listener)
        .into_iter()
        .map(|n| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = BrokerId(n.id);
            b.host = StrBytes::from_string(n.host);
            b.port = n.port as i32;
            b.rack = n.rack.map(StrBytes::from_string);
            b
        })
        .collect();
    resp.cluster_id = StrBytes::from_string(broker.cluster_id().to_string());
    resp.controller_id = BrokerId(broker.controller_id());
    if req.include_cluster_authorized_operations {
        resp.cluster_authorized_operations = cluster_operations(broker, ctx);
    }
    resp
}
