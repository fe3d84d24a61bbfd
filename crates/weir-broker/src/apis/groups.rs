//! The broker's side of the group APIs: FindCoordinator (this broker is every group's
//! coordinator), and OffsetCommit / OffsetFetch handed to the group coordinator with what
//! only the broker knows (which partitions exist). The rest goes to the coordinator as is.

use std::sync::Arc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;

use crate::broker::Broker;
use crate::connection::RequestContext;

const KEY_TYPE_GROUP: i8 = 0;

pub fn find_coordinator(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let v = ctx.version;
    let adv = broker.config.advertised(&ctx.listener);
    let node = BrokerId(broker.config.node_id);
    // The offsets topic must exist before the coordinator is usable.
    let ready = if req.key_type == KEY_TYPE_GROUP {
        broker
            .ensure_offsets_topic()
            .map(|_| ())
            .map_err(|e| (e.code, e.message))
    } else {
        Err((
            E::CoordinatorNotAvailable.code(),
            "Weir does not support transactions".to_string(),
        ))
    };
    let mut resp = FindCoordinatorResponse::default();
    if v >= 4 {
        resp.coordinators = req
            .coordinator_keys
            .iter()
            .map(|k| {
                let mut c = Coordinator::default();
                c.key = k.clone();
                match &ready {
                    Ok(()) => {
                        c.node_id = node;
                        c.host = StrBytes::from_string(adv.host.clone());
                        c.port = adv.port as i32;
                    }
                    Err((code, msg)) => {
                        c.node_id = BrokerId(-1);
                        c.port = -1;
                        c.error_code = *code;
                        c.error_message = Some(StrBytes::from_string(msg.clone()));
                    }
                }
                c
            })
            .collect();
    } else {
        match ready {
            Ok(()) => {
                resp.node_id = node;
                resp.host = StrBytes::from_string(adv.host.clone());
                resp.port = adv.port as i32;
            }
            Err((code, msg)) => {
                resp.node_id = BrokerId(-1);
                resp.port = -1;
                resp.error_code = code;
                if v >= 1 {
                    resp.error_message = Some(StrBytes::from_string(msg));
                }
            }
        }
    }
    resp
}

pub fn offset_commit(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let exists = |topic: &str, partition: i32| broker.partition(topic, partition).is_some();
    broker.groups.offset_commit(req, ctx.version, &exists)
}

pub fn offset_fetch(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: OffsetFetchRequest,
) -> OffsetFetchResponse {
    broker.groups.offset_fetch(req, ctx.version)
}
