//! ElectLeaders (KIP-460): make each partition's preferred replica its leader again
//! (election type 0), or give a leaderless partition any live replica as leader (type 1,
//! unclean: records only its old leader had may be lost). Needs ALTER on the cluster. The
//! answer for each partition is Kafka's: ELECTION_NOT_NEEDED when it already has the
//! leader asked for, PREFERRED_LEADER_NOT_AVAILABLE or ELIGIBLE_LEADERS_NOT_AVAILABLE when
//! no replica can take over, REQUEST_TIMED_OUT when the controller did not elect within
//! the request's timeout. One broker leads every partition it has: nothing is ever needed.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use weir_cluster::records::PartitionName;
use weir_kafka::acl::Operation;

use crate::broker::Broker;
use crate::request::RequestContext;

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// One partition's outcome: decided now, or waiting for the controller.
enum Outcome {
    Done(i16, Option<String>),
    Elect,
}

pub fn elect_leaders(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: ElectLeadersRequest,
) -> ElectLeadersResponse {
    let v = ctx.version;
    let mut resp = ElectLeadersResponse::default();
    // Every partition asked for, or (null) every partition there is.
    let asked: Vec<(String, Vec<i32>)> = match &req.topic_partitions {
        Some(list) => list
            .iter()
            .map(|t| (t.topic.to_string(), t.partitions.clone()))
            .collect(),
        None => broker
            .all_topics()
            .iter()
            .map(|t| (t.name.clone(), (0..t.partitions.len() as i32).collect()))
            .collect(),
    };
    let allowed = broker.allowed_on_cluster(ctx, Operation::Alter);
    let kind = if v >= 1 { req.election_type } else { PREFERRED };
    let mut outcomes: Vec<(String, Vec<(i32, Outcome)>)> = Vec::new();
    for (topic, partitions) in asked {
        let t = broker.topic(&topic);
        let mut out = Vec::new();
        for p in partitions {
            let o = if !allowed {
                Outcome::Done(E::ClusterAuthorizationFailed.code(), None)
            } else if kind != PREFERRED && kind != UNCLEAN {
                Outcome::Done(
                    E::InvalidRequest.code(),
                    Some(format!("unknown election type {kind}")),
                )
            } else {
                match t.as_ref().and_then(|t| t.partition(p)) {
                    None => Outcome::Done(
                        E::UnknownTopicOrPartition.code(),
                        Some(format!("{topic}-{p} does not exist")),
                    ),
                    Some(view) => decide(broker, kind, view),
                }
            };
            out.push((p, o));
        }
        outcomes.push((topic, out));
    }
    if !allowed && v >= 1 {
        resp.error_code = E::ClusterAuthorizationFailed.code();
    }
    let wanted = |o: &Outcome| matches!(o, Outcome::Elect);
    let elect: Vec<PartitionName> = outcomes
        .iter()
        .flat_map(|(t, ps)| {
            ps.iter()
                .filter(|(_, o)| wanted(o))
                .map(|(p, _)| PartitionName {
                    topic: t.clone(),
                    partition: *p,
                })
        })
        .collect();
    // What the controller elected within the timeout.
    let mut elected: std::collections::BTreeSet<PartitionName> = Default::default();
    if let (Some(m), false) = (&broker.cluster, elect.is_empty()) {
        let (preferred, unclean) = if kind == PREFERRED {
            (elect.clone(), Vec::new())
        } else {
            (Vec::new(), elect.clone())
        };
        let session = m.session.clone();
        let asked = super::off_worker(|| {
            m.session
                .block_on(async move { session.request_election(preferred, unclean).await })
        });
        if let Err(e) = asked {
            let msg = e.to_string();
            return answer(resp, outcomes, |_| {
                (E::RequestTimedOut.code(), Some(msg.clone()))
            });
        }
        let timeout = Duration::from_millis(req.timeout_ms.max(0) as u64);
        let done = |n: &PartitionName| {
            broker
                .topic(&n.topic)
                .and_then(|t| t.partition(n.partition).cloned())
                .is_some_and(|v| match v.leader() {
                    Some(l) if kind == PREFERRED => v.replicas.first() == Some(&l),
                    Some(l) => broker.is_live(l),
                    None => false,
                })
        };
        super::off_worker(|| m.wait_until(timeout, || elect.iter().all(done)));
        elected = elect.iter().filter(|n| done(n)).cloned().collect();
    }
    answer(resp, outcomes, |n| {
        if elected.contains(n) {
            (0, None)
        } else {
            (
                E::RequestTimedOut.code(),
                Some("the controller did not elect within the request's timeout".into()),
            )
        }
    })
}

/// What an election of `kind` needs for one partition.
fn decide(broker: &Broker, kind: i8, view: &crate::topics::PartitionView) -> Outcome {
    let leader = view.leader().filter(|l| broker.is_live(*l));
    let in_sync = |b: i32| view.leadership.as_ref().is_some_and(|l| l.isr.contains(&b));
    if kind == PREFERRED {
        let Some(&want) = view.replicas.first() else {
            return Outcome::Done(E::PreferredLeaderNotAvailable.code(), None);
        };
        if leader == Some(want) {
            return Outcome::Done(E::ElectionNotNeeded.code(), None);
        }
        if !broker.is_live(want) || !in_sync(want) {
            return Outcome::Done(
                E::PreferredLeaderNotAvailable.code(),
                Some(format!(
                    "the preferred replica, broker {want}, is not live or not in sync"
                )),
            );
        }
        return Outcome::Elect;
    }
    if leader.is_some() {
        return Outcome::Done(E::ElectionNotNeeded.code(), None);
    }
    if !view.replicas.iter().any(|b| broker.is_live(*b)) {
        return Outcome::Done(
            E::EligibleLeadersNotAvailable.code(),
            Some("no replica's broker is live".into()),
        );
    }
    Outcome::Elect
}

fn answer(
    mut resp: ElectLeadersResponse,
    outcomes: Vec<(String, Vec<(i32, Outcome)>)>,
    elected: impl Fn(&PartitionName) -> (i16, Option<String>),
) -> ElectLeadersResponse {
    for (topic, parts) in outcomes {
        let mut r = ReplicaElectionResult::default();
        r.topic = TopicName(StrBytes::from_string(topic.clone()));
        for (p, o) in parts {
            let (code, msg) = match o {
                Outcome::Done(code, msg) => (code, msg),
                Outcome::Elect => elected(&PartitionName {
                    topic: topic.clone(),
                    partition: p,
                }),
            };
            let mut pr = PartitionResult::default();
            pr.partition_id = p;
            pr.error_code = code;
            pr.error_message = msg.map(StrBytes::from_string);
            r.partition_result.push(pr);
        }
        resp.replica_election_results.push(r);
    }
    resp
}
