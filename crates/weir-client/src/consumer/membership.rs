//! Group membership over KIP-848's consumer protocol (`group.protocol=consumer`; the client
//! half of Kafka's `ConsumerMembershipManager` and its heartbeat manager). One API,
//! ConsumerGroupHeartbeat, does everything: it joins (member epoch 0), keeps the member
//! alive, carries its subscription and the partitions it owns, brings back the
//! coordinator's assignment, and leaves (epoch -1, or -2 for a static member, whose place
//! then waits for it until its session ends). The coordinator runs the assignor; the member
//! only reconciles: it gives up what is no longer its own, takes what is new (the
//! coordinator hands a partition out only once its previous owner has said it gave it up),
//! and says what it owns in its next heartbeat.
//!
//! This task does the talking; the consumer's coordinator (`coordinator`) reconciles, in
//! `poll`, where the rebalance listener may run. They meet in `group::BeatState`: the
//! heartbeat leaves the latest assignment there (`target`), `poll` leaves what the consumer
//! owns (`owned`) and its subscription, and a fence (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID,
//! the poll timeout) waits there until `poll` has given the partitions up as lost; only
//! then does the heartbeat join again, at epoch 0 under the same member id.
//!
//! Kafka's client sends only the fields that changed since its last acknowledged
//! heartbeat; this one sends the whole state (topics and owned partitions) every time,
//! which the protocol allows and which needs no record of what the coordinator has seen.
//! It costs a few bytes per topic per heartbeat.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::consumer_group_heartbeat_response::Assignment;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, TopicName,
};
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::group::{codes, error_name, sb, GroupShared, Phase};
use super::Event;
use crate::conn::BrokerConnection;
use crate::error::{ClientError, Result};
use weir_kafka::TopicPartition;

/// v1 (KIP-1082): the member makes up its own id, so a lost first answer cannot leave a
/// member behind that nobody knows of. v0: the coordinator hands it out.
const HEARTBEAT_VERSIONS: (i16, i16) = (0, 1);

/// The member epoch of a heartbeat that leaves the group.
const LEAVE_EPOCH: i32 = -1;
/// The member epoch of a static member leaving for now.
const LEAVE_STATIC_EPOCH: i32 = -2;

/// Until the coordinator names its own interval.
const FIRST_INTERVAL: Duration = Duration::from_secs(5);

/// A fatal error of the consumer protocol, saying what the user can do about it.
fn fatal(code: i16, message: Option<&str>, group: &str) -> ClientError {
    let hint = match code {
        codes::UNSUPPORTED_VERSION => {
            "the broker's group coordinator does not offer the consumer protocol \
             (group.coordinator.rebalance.protocols); use group.protocol=classic"
                .to_string()
        }
        codes::GROUP_ID_NOT_FOUND => format!(
            "group '{group}' is a classic group with members; consumers of both protocols \
             cannot share it"
        ),
        codes::UNSUPPORTED_ASSIGNOR => {
            "group.remote.assignor names an assignor the broker does not have".to_string()
        }
        _ => format!("ConsumerGroupHeartbeat for group '{group}'"),
    };
    let message = match message {
        Some(m) if !m.is_empty() => format!("{hint}: {m}"),
        _ => hint,
    };
    ClientError::kafka(code, Some(message))
}

/// The heartbeat task of a consumer-protocol member: runs while the consumer is subscribed.
pub(crate) async fn heartbeat_loop(shared: Arc<GroupShared>) {
    let cfg = shared.cfg.clone();
    let group = shared.group_id.clone();
    let mut interval = FIRST_INTERVAL;
    let mut next = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = shared.beat_now.notified() => {}
        }
        next = tokio::time::Instant::now() + interval;
        let (member_id, epoch, phase, topics, owned, fenced, last_poll) = {
            let s = shared.lock();
            if s.fatal.is_some() {
                return;
            }
            (
                s.member_id.clone(),
                s.generation,
                s.phase,
                s.beat.subscription.clone(),
                s.beat.owned.clone(),
                s.beat.fenced.is_some(),
                s.last_poll,
            )
        };
        if fenced || topics.is_empty() {
            // Waiting for poll() to give up the partitions, or for a subscription.
            continue;
        }
        if phase == Phase::Stable && last_poll.elapsed() > cfg.max_poll_interval {
            warn!(group = %group, member = %member_id,
                "no poll() for more than max.poll.interval.ms ({} ms): leaving the group; \
                 process records faster or raise max.poll.interval.ms / lower max.poll.records",
                cfg.max_poll_interval.as_millis());
            leave_group(&shared, "consumer poll timeout has expired").await;
            shared.fence("consumer poll timeout has expired");
            continue;
        }
        let joining = phase != Phase::Stable || epoch <= 0;
        let epoch = if joining { 0 } else { epoch };
        let (member_id, resp) = match send(&shared, &member_id, epoch, &topics, &owned).await {
            Ok(sent) => sent,
            Err(e) if e.is_retriable() => {
                debug!(group = %group, "heartbeat failed: {e}");
                shared.link.mark_unknown().await;
                next = tokio::time::Instant::now() + cfg.cluster.retry_backoff;
                continue;
            }
            Err(e) => {
                warn!(group = %group, "the consumer cannot stay in its group: {e}");
                shared.set_fatal(e);
                return;
            }
        };
        let message = resp.error_message.as_ref().map(|m| m.as_str());
        match resp.error_code {
            codes::NONE => {}
            code @ (codes::FENCED_MEMBER_EPOCH | codes::UNKNOWN_MEMBER_ID) => {
                shared.fence(&format!(
                    "{} from ConsumerGroupHeartbeat{}",
                    error_name(code),
                    message.map(|m| format!(": {m}")).unwrap_or_default()
                ));
                continue;
            }
            code @ (codes::NOT_COORDINATOR | codes::COORDINATOR_NOT_AVAILABLE) => {
                debug!(group = %group, "heartbeat: {}", error_name(code));
                shared.link.mark_unknown().await;
                next = tokio::time::Instant::now() + cfg.cluster.retry_backoff;
                continue;
            }
            code if ClientError::kafka(code, None).is_retriable() => {
                debug!(group = %group, "heartbeat: {}", error_name(code));
                next = tokio::time::Instant::now() + cfg.cluster.retry_backoff;
                continue;
            }
            code => {
                // Authorization, a bad request, an unknown assignor, a full group, an
                // instance id still in use: rejoining cannot help.
                let e = fatal(code, message, &group);
                warn!(group = %group, "the consumer cannot stay in its group: {e}");
                shared.set_fatal(e);
                return;
            }
        }
        if resp.heartbeat_interval_ms > 0 {
            interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
            next = tokio::time::Instant::now() + interval;
        }
        let target = match resp.assignment {
            Some(a) => Some(resolve(&shared, a, &topics).await),
            None => None,
        };
        let mut s = shared.lock();
        if s.member_id != member_id || s.beat.fenced.is_some() || s.fatal.is_some() {
            // It left or was fenced while this heartbeat was out.
            continue;
        }
        if let Some(id) = resp.member_id.as_ref().filter(|id| !id.is_empty()) {
            s.member_id = id.to_string();
        }
        if joining {
            info!(group = %group, member = %s.member_id, epoch = resp.member_epoch,
                "joined the group (consumer protocol)");
        }
        s.generation = resp.member_epoch;
        s.phase = Phase::Stable;
        if let Some(t) = target {
            s.beat.target = Some(t);
            drop(s);
            let _ = shared.events.send(Event::Wake);
        }
    }
}

/// The version of ConsumerGroupHeartbeat to speak; not served (a broker before Kafka 3.7,
/// or one without KIP-848) is an error that rejoining cannot help.
fn version(conn: &BrokerConnection) -> Result<i16> {
    conn.version_for(ApiKey::ConsumerGroupHeartbeat, HEARTBEAT_VERSIONS)
        .map_err(|e| {
            ClientError::Protocol(format!(
                "{e}: the broker does not offer the consumer group protocol (KIP-848); use \
                 group.protocol=classic"
            ))
        })
}

/// One ConsumerGroupHeartbeat with the whole state of the member; the member id it was sent
/// under, and the answer.
async fn send(
    shared: &GroupShared,
    member_id: &str,
    epoch: i32,
    topics: &BTreeSet<String>,
    owned: &BTreeSet<TopicPartition>,
) -> Result<(String, ConsumerGroupHeartbeatResponse)> {
    let cfg = &shared.cfg;
    let conn = shared.link.conn().await?;
    let v = version(&conn)?;
    let member_id = if member_id.is_empty() && v >= 1 {
        // Kept for the member's whole life, through fences and rejoins.
        let id = weir_kafka::topic::uuid_to_base64(Uuid::new_v4());
        shared.lock().member_id.clone_from(&id);
        id
    } else {
        member_id.to_string()
    };
    let mut req = ConsumerGroupHeartbeatRequest::default();
    req.group_id = GroupId(sb(&shared.group_id));
    req.member_id = sb(&member_id);
    req.member_epoch = epoch;
    req.instance_id = cfg.group_instance_id.clone().map(sb);
    req.rack_id = cfg.client_rack.clone().map(sb);
    req.rebalance_timeout_ms = cfg.max_poll_interval.as_millis() as i32;
    req.subscribed_topic_names = Some(topics.iter().map(|t| TopicName(sb(t))).collect());
    req.server_assignor = cfg.group_remote_assignor.clone().map(sb);
    req.topic_partitions = Some(if epoch == 0 {
        // A joining member owns nothing yet.
        Vec::new()
    } else {
        by_topic_id(shared, owned)
    });
    let resp = conn.request(&req, v).await?;
    Ok((member_id, resp))
}

/// The owned partitions by topic id, as the heartbeat names them.
fn by_topic_id(shared: &GroupShared, owned: &BTreeSet<TopicPartition>) -> Vec<TopicPartitions> {
    let meta = shared.cluster.metadata();
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in owned {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    by_topic
        .into_iter()
        .filter_map(|(topic, partitions)| {
            // An owned partition came from an assignment resolved through the metadata, so
            // its topic's id is known unless the topic has gone since.
            let id = meta.topics.get(topic)?.id;
            let mut t = TopicPartitions::default();
            t.topic_id = id;
            t.partitions = partitions;
            Some(t)
        })
        .collect()
}

/// The assignment by topic name. Topic ids the metadata does not know yet are looked up
/// once; any still unknown are left out (the coordinator sends the assignment again while
/// the member's owned partitions differ from it, so they are tried again).
async fn resolve(
    shared: &GroupShared,
    assignment: Assignment,
    topics: &BTreeSet<String>,
) -> BTreeSet<TopicPartition> {
    let names = |shared: &GroupShared| -> HashMap<Uuid, String> {
        shared
            .cluster
            .metadata()
            .topics
            .iter()
            .map(|(name, t)| (t.id, name.clone()))
            .collect()
    };
    let mut known = names(shared);
    if assignment
        .topic_partitions
        .iter()
        .any(|t| !known.contains_key(&t.topic_id))
    {
        let wanted: Vec<String> = topics.iter().cloned().collect();
        match shared
            .cluster
            .refresh(Some(&wanted), shared.cfg.allow_auto_create_topics)
            .await
        {
            Ok(_) => known = names(shared),
            Err(e) => debug!(group = %shared.group_id, "metadata refresh failed: {e}"),
        }
    }
    let mut out = BTreeSet::new();
    for t in assignment.topic_partitions {
        match known.get(&t.topic_id) {
            Some(name) => {
                out.extend(
                    t.partitions
                        .into_iter()
                        .map(|p| TopicPartition::new(name.clone(), p)),
                );
            }
            None => warn!(group = %shared.group_id, topic_id = %t.topic_id,
                "assigned partitions of a topic the metadata does not know; waiting for it"),
        }
    }
    out
}

/// Leaves the group: epoch -1, or -2 for a static member (its partitions wait for its
/// instance id until its session ends, so a restart does not move them). Errors are logged:
/// the member is leaving either way.
pub(crate) async fn leave_group(shared: &GroupShared, reason: &str) {
    let member_id = shared.lock().member_id.clone();
    // A member still joining may already be in the group (its id is its own, and its
    // epoch-0 heartbeat may have been answered without the answer arriving): it leaves too,
    // or its partitions would wait for its session to end. Never sent a heartbeat: no id.
    if member_id.is_empty() {
        return;
    }
    let leave_epoch = if shared.cfg.group_instance_id.is_some() {
        LEAVE_STATIC_EPOCH
    } else {
        LEAVE_EPOCH
    };
    let result: Result<()> = async {
        let conn = shared.link.conn().await?;
        let v = version(&conn)?;
        let mut req = ConsumerGroupHeartbeatRequest::default();
        req.group_id = GroupId(sb(&shared.group_id));
        req.member_id = sb(&member_id);
        req.member_epoch = leave_epoch;
        req.instance_id = shared.cfg.group_instance_id.clone().map(sb);
        let resp: ConsumerGroupHeartbeatResponse = conn.request(&req, v).await?;
        if resp.error_code != codes::NONE {
            return Err(ClientError::kafka(
                resp.error_code,
                resp.error_message.map(|m| m.to_string()),
            ));
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => info!(group = %shared.group_id, member = %member_id, "left the group: {reason}"),
        Err(e) => debug!(group = %shared.group_id, "leaving failed (leaving anyway): {e}"),
    }
    let mut s = shared.lock();
    s.generation = -1;
    s.phase = Phase::Unjoined;
    s.beat.target = None;
    s.beat.owned.clear();
}
