//! Topic administration: CreateTopics, DeleteTopics, CreatePartitions, and topic and broker
//! configuration (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs). Every refusal
//! carries Kafka's error code and, where the response has room, a message saying why.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncrementalResult;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use weir_kafka::acl::{Operation, ResourceType};
use weir_kafka::config::{
    AlterConfigOpType, ConfigEntry, ConfigResourceType, ConfigSource, ConfigSynonym, ConfigType,
};
use weir_kafka::ApiError;
use weir_log::LogConfig;

use crate::broker::{Broker, NewTopic};
use crate::dynamic_config::{self, Scope};
use crate::mutation_quota::Limit;
use crate::request::RequestContext;
use crate::topics::Topic;
use crate::{group_configs, kafka_configs, log_levels};

const RESOURCE_TOPIC: i8 = ConfigResourceType::Topic.code();
const RESOURCE_BROKER: i8 = ConfigResourceType::Broker.code();
const RESOURCE_BROKER_LOGGER: i8 = ConfigResourceType::BrokerLogger.code();
const RESOURCE_GROUP: i8 = ConfigResourceType::Group.code();

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// The replication factor a CreateTopics asks for (-1: `default.replication.factor`).
/// One broker holds one replica of each partition; a cluster member leaves the rest of
/// the checks to the assignment (see `cluster::create_topics`).
fn replication_check(broker: &Broker, rf: i16) -> Result<usize, ApiError> {
    let rf = if rf == -1 {
        broker.config.default_replication_factor
    } else {
        rf
    };
    match rf {
        n if n < 1 => Err(ApiError::new(
            E::InvalidReplicationFactor,
            format!("replication factor must be at least 1, got {n}"),
        )),
        n if n > 1 && broker.cluster.is_none() => Err(ApiError::new(
            E::InvalidReplicationFactor,
            format!("replication factor {n} is larger than the number of brokers: 1"),
        )),
        n => Ok(n as usize),
    }
}

/// How many replicas each partition of `topic` has (its first partition's).
fn replication_factor_of(topic: &crate::topics::Topic) -> i16 {
    topic
        .partitions
        .first()
        .map_or(1, |v| v.replicas.len().max(1) as i16)
}

/// How one request's topic changes meet the controller mutation quota (KIP-599). Versions
/// that know THROTTLING_QUOTA_EXCEEDED (CreateTopics v6, CreatePartitions v3, DeleteTopics
/// v5 and later) are refused at once and told how long to wait; older ones wait here for
/// the quota, within the request's timeout, as Kafka delays the answers of clients from
/// before KIP-219.
pub(crate) struct QuotaGate<'a> {
    broker: &'a Broker,
    ctx: &'a RequestContext,
    limit: Limit,
    strict: bool,
    deadline: Instant,
    /// The longest wait a refusal asked for.
    throttled_ms: u32,
}

impl<'a> QuotaGate<'a> {
    fn new(broker: &'a Broker, ctx: &'a RequestContext, strict: bool, timeout_ms: i32) -> Self {
        QuotaGate {
            broker,
            ctx,
            limit: super::mutation_limit(broker, ctx),
            strict,
            deadline: Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64),
            throttled_ms: 0,
        }
    }

    /// Records `partitions` mutations, or refuses them with THROTTLING_QUOTA_EXCEEDED.
    fn check(&mut self, what: &str, partitions: usize) -> Result<(), ApiError> {
        let q = &self.broker.mutations;
        q.record(&self.limit, partitions, Instant::now())
            .map_err(|ms| {
                self.throttled_ms = self.throttled_ms.max(ms);
                let why = super::over_mutation_quota(self.broker, what, self.ctx, &self.limit);
                ApiError::new(
                    E::ThrottlingQuotaExceeded,
                    format!("{why}: retry in {ms} ms"),
                )
            })
    }

    /// For the older versions: waits until the quota lets `what` go ahead, or answers
    /// REQUEST_TIMED_OUT when that is past the request's timeout.
    async fn wait(&self, what: &str) -> Result<(), ApiError> {
        if self.strict {
            return Ok(());
        }
        loop {
            let ms = self
                .broker
                .mutations
                .throttle_ms(&self.limit, Instant::now());
            if ms == 0 {
                return Ok(());
            }
            let until = Instant::now() + Duration::from_millis(ms.into());
            if until > self.deadline {
                let why = super::over_mutation_quota(self.broker, what, self.ctx, &self.limit);
                return Err(ApiError::new(
                    E::RequestTimedOut,
                    format!(
                        "{why} for another {ms} ms, longer than the request's timeout: retry \
                         later"
                    ),
                ));
            }
            crate::metrics::throttled(ms);
            tokio::time::sleep_until(until.into()).await;
        }
    }

    /// Runs `change` (a blocking topic change, given this gate) off the runtime's worker
    /// threads: once for a strict version; for an older one after waiting for the quota,
    /// and again after waiting if another request of the same principal took it first.
    async fn run<T>(
        &mut self,
        what: &str,
        mut change: impl FnMut(
            &mut dyn FnMut(&str, usize) -> Result<(), ApiError>,
        ) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        loop {
            self.wait(what).await?;
            let result = super::off_worker(|| change(&mut |w, n| self.check(w, n)));
            match result {
                Err(e) if !self.strict && e.code == E::ThrottlingQuotaExceeded.code() => continue,
                r => return r,
            }
        }
    }

    /// The throttle a strict version's response carries, and that mutes the connection.
    fn throttle(&self, ctx: &RequestContext) -> i32 {
        if self.strict && self.throttled_ms > 0 {
            ctx.throttle(self.throttled_ms);
            self.throttled_ms.min(i32::MAX as u32) as i32
        } else {
            0
        }
    }
}

pub async fn create_topics(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let v = ctx.version;
    let mut resp = CreateTopicsResponse::default();
    let mut seen = HashSet::new();
    let dupes: HashSet<String> = req
        .topics
        .iter()
        .filter(|t| !seen.insert(t.name.to_string()))
        .map(|t| t.name.to_string())
        .collect();
    // CREATE on the cluster covers every topic; else each needs CREATE on itself.
    let may_create_any = broker.allowed_on_cluster(ctx, Operation::Create);
    // Kafka bounds the partitions of the whole request first, before any other check.
    let asked = req.topics.iter().map(|t| {
        if !t.assignments.is_empty() {
            t.assignments.len() as i32
        } else if t.num_partitions == -1 {
            broker.config.num_partitions
        } else {
            t.num_partitions
        }
    });
    let too_many = crate::broker::check_request_total(asked).err();
    let mut checked: Vec<Result<NewTopic, ApiError>> = Vec::new();
    for t in &req.topics {
        let name = t.name.to_string();
        let ask = (|| {
            if let Some(e) = &too_many {
                return Err(e.clone());
            }
            if dupes.contains(&name) {
                return Err(ApiError::new(
                    E::InvalidRequest,
                    format!("topic '{name}' appears more than once in the request"),
                ));
            }
            if !may_create_any
                && !broker.allowed(ctx, Operation::Create, ResourceType::Topic, &name)
            {
                return Err(ApiError::new(
                    E::TopicAuthorizationFailed,
                    format!("{} may not create topic '{name}'", ctx.principal),
                ));
            }
            if weir_kafka::topic::is_internal(&name) {
                return Err(ApiError::new(
                    E::InvalidRequest,
                    format!("'{name}' is an internal topic, created by the broker"),
                ));
            }
            let mut replication_factor = 1;
            let mut assignment = None;
            let partitions = if t.assignments.is_empty() {
                replication_factor = replication_check(broker, t.replication_factor)?;
                if t.num_partitions == -1 {
                    broker.config.num_partitions
                } else {
                    t.num_partitions
                }
            } else {
                if t.num_partitions != -1 || t.replication_factor != -1 {
                    return Err(ApiError::new(
                        E::InvalidRequest,
                        "with replica assignments, num_partitions and replication_factor must be -1",
                    ));
                }
                let mut indexes: Vec<i32> =
                    t.assignments.iter().map(|a| a.partition_index).collect();
                indexes.sort_unstable();
                if indexes != (0..indexes.len() as i32).collect::<Vec<_>>() {
                    return Err(ApiError::new(
                        E::InvalidReplicaAssignment,
                        "assignments must cover partitions 0..n once each",
                    ));
                }
                if broker.cluster.is_none() {
                    for a in &t.assignments {
                        if a.broker_ids.len() != 1 || a.broker_ids[0].0 != broker.config.node_id {
                            return Err(ApiError::new(
                                E::InvalidReplicaAssignment,
                                format!(
                                    "every partition must be assigned to broker {} alone",
                                    broker.config.node_id
                                ),
                            ));
                        }
                    }
                }
                let mut by_index: Vec<_> = t.assignments.iter().collect();
                by_index.sort_by_key(|a| a.partition_index);
                assignment = Some(
                    by_index
                        .iter()
                        .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                        .collect(),
                );
                t.assignments.len() as i32
            };
            let mut overrides = BTreeMap::new();
            for c in &t.configs {
                match &c.value {
                    Some(val) => {
                        overrides.insert(c.name.to_string(), val.to_string());
                    }
                    None => {
                        return Err(ApiError::new(
                            E::InvalidConfig,
                            format!("config {} has a null value", c.name),
                        ))
                    }
                }
            }
            Ok(NewTopic {
                name: name.clone(),
                partitions,
                overrides,
                replication_factor,
                assignment,
            })
        })();
        checked.push(ask);
    }
    let mut gate = QuotaGate::new(broker, ctx, v >= 6, req.timeout_ms);
    // How long a cluster member waits for the new topics to be led (Kafka's CreateTopics
    // timeout); one broker makes them at once.
    let wait = Duration::from_millis(req.timeout_ms.max(0) as u64)
        .min(crate::cluster::DEFAULT_CHANGE_WAIT);
    let mut created: Vec<Option<Result<Arc<Topic>, ApiError>>> = checked
        .iter()
        .map(|c| c.as_ref().err().map(|e| Err(e.clone())))
        .collect();
    let asks: Vec<(usize, NewTopic)> = checked
        .into_iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i, c.ok()?)))
        .collect();
    if gate.strict || req.validate_only {
        // One batch: one journal write before the files are made, and one after.
        let (index, asks): (Vec<usize>, Vec<NewTopic>) = asks.into_iter().unzip();
        let results = super::off_worker(|| {
            broker.create_topics(asks, req.validate_only, wait, &mut |w, n| {
                gate.check(&format!("creating topic '{w}'"), n)
            })
        });
        for (i, r) in index.into_iter().zip(results) {
            created[i] = Some(r);
        }
    } else {
        for (i, ask) in asks {
            let what = format!("creating topic '{}'", ask.name);
            let r = gate
                .run(&what, |g| {
                    broker
                        .create_topics(vec![ask.clone()], false, wait, &mut |w, n| {
                            g(&format!("creating topic '{w}'"), n)
                        })
                        .pop()
                        .unwrap_or_else(|| Err(ApiError::new(E::UnknownServerError, "no answer")))
                })
                .await;
            created[i] = Some(r);
        }
    }
    for (t, result) in req.topics.into_iter().zip(created) {
        let name = t.name.to_string();
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        let result =
            result.unwrap_or_else(|| Err(ApiError::new(E::UnknownServerError, "no answer")));
        match result {
            Ok(topic) => {
                let partitions = topic.partitions.len() as i32;
                let partitions = if req.validate_only {
                    checked_partitions(broker, &t)
                } else {
                    partitions
                };
                if v >= 7 {
                    r.topic_id = topic.id;
                }
                if v >= 5
                    && !broker.allowed(ctx, Operation::DescribeConfigs, ResourceType::Topic, &name)
                {
                    // Created, but its settings are not the client's to see.
                    r.num_partitions = partitions;
                    r.replication_factor = replication_factor_of(&topic);
                    r.topic_config_error_code = E::TopicAuthorizationFailed.code();
                } else if v >= 5 {
                    r.num_partitions = partitions;
                    r.replication_factor = replication_factor_of(&topic);
                    r.configs = Some(
                        topic_config_entries(broker, &topic, false)
                            .into_iter()
                            .map(|e| {
                                let mut c = CreatableTopicConfigs::default();
                                c.name = s(e.name);
                                c.value = e.value.map(s);
                                c.read_only = e.read_only;
                                c.config_source = e.source.code();
                                c.is_sensitive = e.sensitive;
                                c
                            })
                            .collect(),
                    );
                }
            }
            Err(e) => {
                r.error_code = e.code;
                if v >= 1 {
                    r.error_message = Some(s(e.message));
                }
                if v >= 5 {
                    r.num_partitions = -1;
                    r.replication_factor = -1;
                }
            }
        }
        resp.topics.push(r);
    }
    resp.throttle_time_ms = gate.throttle(ctx);
    resp
}

/// The partitions a topic of the request asks for (a validate-only answer has no
/// partitions made to count).
fn checked_partitions(broker: &Broker, t: &CreatableTopic) -> i32 {
    if !t.assignments.is_empty() {
        t.assignments.len() as i32
    } else if t.num_partitions == -1 {
        broker.config.num_partitions
    } else {
        t.num_partitions
    }
}

pub async fn delete_topics(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let v = ctx.version;
    let mut resp = DeleteTopicsResponse::default();
    let mut gate = QuotaGate::new(broker, ctx, v >= 5, req.timeout_ms);
    let wanted: Vec<(Option<String>, uuid::Uuid)> = if v >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    for (name, id) in wanted {
        let mut r = DeletableTopicResult::default();
        let denied = |n: &str| {
            ApiError::new(
                E::TopicAuthorizationFailed,
                format!("{} may not delete topic '{n}'", ctx.principal),
            )
        };
        let may_delete = |n: &str| broker.allowed(ctx, Operation::Delete, ResourceType::Topic, n);
        let resolved = match (&name, id.is_nil()) {
            // Authorization before existence, so a denied client learns nothing.
            (Some(n), _) if !may_delete(n) => Err(denied(n)),
            (Some(n), _) => broker.topic(n).map(|t| t.name.clone()).ok_or(ApiError::new(
                E::UnknownTopicOrPartition,
                format!("topic '{n}' does not exist"),
            )),
            // By id: a topic the client may not describe is as unknown as a missing one.
            (None, false) => match broker
                .topic_by_id(id)
                .map(|t| t.name.clone())
                .filter(|n| broker.allowed(ctx, Operation::Describe, ResourceType::Topic, n))
            {
                None => Err(ApiError::new(
                    E::UnknownTopicId,
                    format!("no topic has id {id}"),
                )),
                Some(n) if !may_delete(&n) => Err(denied(&n)),
                Some(n) => Ok(n),
            },
            (None, true) => Err(ApiError::new(
                E::InvalidRequest,
                "a topic to delete needs a name or an id",
            )),
        };
        let resolved = resolved.and_then(|n| {
            if weir_kafka::topic::is_internal(&n) {
                return Err(ApiError::new(
                    E::InvalidTopicException,
                    format!("the internal topic '{n}' cannot be deleted"),
                ));
            }
            Ok(n)
        });
        let result = match resolved {
            Ok(n) => gate
                .run(&format!("deleting topic '{n}'"), |g| {
                    broker.delete_topic(&n, &mut |w, k| g(&format!("deleting topic '{w}'"), k))
                })
                .await
                .map(|id| (n, id)),
            Err(e) => Err(e),
        };
        r.name = name.clone().map(|n| TopicName(s(n)));
        match result {
            Ok((n, id)) => {
                r.name = Some(TopicName(s(n)));
                if v >= 6 {
                    r.topic_id = id;
                }
            }
            Err(e) => {
                r.error_code = e.code;
                if v >= 6 {
                    r.topic_id = id;
                }
                if v >= 5 {
                    r.error_message = Some(s(e.message));
                }
            }
        }
        resp.responses.push(r);
    }
    resp.throttle_time_ms = gate.throttle(ctx);
    resp
}

pub async fn create_partitions(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut resp = CreatePartitionsResponse::default();
    let mut gate = QuotaGate::new(broker, ctx, ctx.version >= 3, req.timeout_ms);
    // Kafka's bound on one request, over all its topics: the partitions each would add.
    let added = req.topics.iter().map(|t| {
        let now = broker
            .topic(&t.name)
            .map_or(0, |x| x.partitions.len() as i32);
        t.count.saturating_sub(now)
    });
    let too_many = crate::broker::check_request_total(added).err();
    for t in req.topics {
        let name = t.name.to_string();
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        let checked = (|| {
            if !broker.allowed(ctx, Operation::Alter, ResourceType::Topic, &name) {
                return Err(ApiError::new(
                    E::TopicAuthorizationFailed,
                    format!("{} may not add partitions to topic '{name}'", ctx.principal),
                ));
            }
            if let Some(e) = &too_many {
                return Err(e.clone());
            }
            if let Some(assignments) = &t.assignments {
                if assignments
                    .iter()
                    .any(|a| a.broker_ids.iter().any(|b| b.0 != broker.config.node_id))
                {
                    return Err(ApiError::new(
                        E::InvalidReplicaAssignment,
                        format!(
                            "new partitions can only be placed on broker {}",
                            broker.config.node_id
                        ),
                    ));
                }
            }
            if weir_kafka::topic::is_internal(&name) {
                return Err(ApiError::new(
                    E::InvalidTopicException,
                    format!("'{name}' is an internal topic"),
                ));
            }
            Ok(())
        })();
        let result = match checked {
            Ok(()) if req.validate_only => super::off_worker(|| {
                broker.create_partitions(&name, t.count, true, &mut |_, _| Ok(()))
            }),
            Ok(()) => {
                gate.run(&format!("adding partitions to topic '{name}'"), |g| {
                    broker.create_partitions(&name, t.count, false, &mut |w, n| {
                        g(&format!("adding partitions to topic '{w}'"), n)
                    })
                })
                .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            r.error_code = e.code;
            r.error_message = Some(s(e.message));
        }
        resp.results.push(r);
    }
    resp.throttle_time_ms = gate.throttle(ctx);
    resp
}

/// The values this broker uses for Kafka keys whose value is its own (its id, addresses,
/// directories, and limits it chose), where not set in server.properties.
fn weir_values(broker: &Broker) -> BTreeMap<String, String> {
    let c = &broker.config;
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let listeners = |ls: &[crate::config::Listener]| {
        ls.iter()
            .map(|l| format!("{}://{}:{}", l.name, l.host, l.port))
            .collect::<Vec<_>>()
            .join(",")
    };
    for (k, v) in [
        ("node.id", c.node_id.to_string()),
        ("broker.id", c.node_id.to_string()),
        ("listeners", listeners(&c.listeners)),
        ("advertised.listeners", listeners(&c.advertised_listeners)),
        (
            "log.dirs",
            c.log_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
        ("num.partitions", c.num_partitions.to_string()),
        (
            "default.replication.factor",
            c.default_replication_factor.to_string(),
        ),
        (
            "auto.create.topics.enable",
            c.auto_create_topics_enable.to_string(),
        ),
        ("delete.topic.enable", c.delete_topic_enable.to_string()),
        ("max.connections", c.max_connections.to_string()),
        (
            "max.connections.per.ip",
            c.max_connections_per_ip.to_string(),
        ),
        (
            "max.connections.per.ip.overrides",
            c.max_connections_per_ip_overrides
                .iter()
                .map(|(h, n)| format!("{h}:{n}"))
                .collect::<Vec<_>>()
                .join(","),
        ),
        (
            "socket.listen.backlog.size",
            c.socket_listen_backlog_size.to_string(),
        ),
        (
            "sasl.server.max.receive.size",
            c.sasl_server_max_receive_size.to_string(),
        ),
        ("max.broker.partitions", c.max_broker_partitions.to_string()),
        ("max.topic.partitions", c.max_topic_partitions.to_string()),
        (
            "socket.request.max.bytes",
            c.socket_request_max_bytes.to_string(),
        ),
        (
            "connections.max.idle.ms",
            c.connections_max_idle_ms.to_string(),
        ),
        (
            "group.initial.rebalance.delay.ms",
            c.group.initial_rebalance_delay_ms.to_string(),
        ),
        (
            "group.min.session.timeout.ms",
            c.group.min_session_timeout_ms.to_string(),
        ),
        (
            "group.max.session.timeout.ms",
            c.group.max_session_timeout_ms.to_string(),
        ),
        (
            "offsets.topic.num.partitions",
            c.group.offsets_topic_partitions.to_string(),
        ),
        (
            "offsets.retention.minutes",
            (c.group.offsets_retention_ms / 60_000).to_string(),
        ),
    ] {
        out.insert(k.to_string(), v);
    }
    out
}

pub fn describe_configs(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let v = ctx.version;
    let mut resp = DescribeConfigsResponse::default();
    for res in req.resources {
        let mut r = DescribeConfigsResult::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        let wanted: Option<HashSet<String>> = res
            .configuration_keys
            .as_ref()
            .map(|ks| ks.iter().map(|k| k.to_string()).collect());
        let keep = |name: &str| wanted.as_ref().is_none_or(|w| w.contains(name));
        if let Err(e) = config_access(
            broker,
            ctx,
            res.resource_type,
            &res.resource_name,
            Operation::DescribeConfigs,
        ) {
            r.error_code = e.code;
            r.error_message = Some(s(e.message));
            resp.results.push(r);
            continue;
        }
        match res.resource_type {
            RESOURCE_TOPIC => match broker.topic(&res.resource_name) {
                None => {
                    r.error_code = E::UnknownTopicOrPartition.code();
                    r.error_message =
                        Some(s(format!("topic '{}' does not exist", res.resource_name)));
                }
                Some(topic) => {
                    r.configs = topic_config_entries(broker, &topic, req.include_synonyms)
                        .into_iter()
                        .filter(|e| keep(&e.name))
                        .map(|e| describe_result(e, v, req.include_documentation))
                        .collect();
                }
            },
            RESOURCE_BROKER => match broker_scope(broker, &res.resource_name) {
                Err(e) => {
                    r.error_code = e.code;
                    r.error_message = Some(s(e.message));
                }
                Ok(scope) => {
                    r.configs = broker_config_entries(broker, scope, req.include_synonyms)
                        .into_iter()
                        .filter(|e| keep(&e.name))
                        .map(|e| describe_result(e, v, req.include_documentation))
                        .collect();
                }
            },
            RESOURCE_BROKER_LOGGER => match logger_broker(broker, &res.resource_name) {
                Err(e) => {
                    r.error_code = e.code;
                    r.error_message = Some(s(e.message));
                }
                Ok(()) => {
                    r.configs = log_levels::describe()
                        .into_iter()
                        .filter(|(name, _)| keep(name))
                        .map(|(name, level)| {
                            let mut c = DescribeConfigsResourceResult::default();
                            c.name = s(name);
                            c.value = Some(s(level));
                            c.config_source = ConfigSource::DynamicBrokerLogger.code();
                            c
                        })
                        .collect();
                }
            },
            RESOURCE_GROUP => match group_configs::check_name(&res.resource_name, true) {
                Err(e) => {
                    r.error_code = e.code;
                    r.error_message = Some(s(e.message));
                }
                Ok(()) => {
                    let value = |name: &str| broker.group_config_broker_value(name);
                    r.configs = group_configs::describe(
                        &broker.group_configs.of(&res.resource_name),
                        &value,
                        req.include_synonyms,
                    )
                    .into_iter()
                    .filter(|e| keep(&e.name))
                    .map(|e| describe_result(e, v, req.include_documentation))
                    .collect();
                }
            },
            other => {
                r.error_code = E::InvalidRequest.code();
                r.error_message = Some(s(format!(
                    "resource type {other} is not supported: topics (2), brokers (4), \
                     broker loggers (8) and groups (32) are"
                )));
            }
        }
        resp.results.push(r);
    }
    resp
}

/// A broker resource's configs as DescribeConfigs reports them: for this broker, every
/// setting with where its value comes from (this broker's dynamic config, the cluster-wide
/// dynamic default, server.properties, or Kafka's default) and, when asked, each source's
/// value in that order; for the cluster-wide default (an empty name), only what is set
/// there, as Kafka answers.
fn broker_config_entries(broker: &Broker, scope: Scope, synonyms: bool) -> Vec<ConfigEntry> {
    let sets = broker.dynamic.sets();
    let props = &broker.config.properties;
    let weir = weir_values(broker);
    // As Kafka: `node.id` and `broker.id` are one setting, given in server.properties by
    // either name.
    let static_value = |name: &str| {
        let alias = match name {
            "broker.id" => Some("node.id"),
            "node.id" => Some("broker.id"),
            _ => None,
        };
        props
            .get(name)
            .or_else(|| alias.and_then(|a| props.get(a)))
            .cloned()
    };
    // Every value a key has, most binding first: this broker's dynamic config, the
    // cluster-wide dynamic default, server.properties, and the default (Weir's own value,
    // or Kafka's default).
    let layers = |name: &str| -> Vec<(Option<String>, ConfigSource)> {
        let default = weir
            .get(name)
            .cloned()
            .or_else(|| kafka_configs::key(name).and_then(|k| k.default.map(str::to_string)));
        [
            (sets.broker.get(name).cloned(), ConfigSource::DynamicBroker),
            (
                sets.cluster_default.get(name).cloned(),
                ConfigSource::DynamicDefaultBroker,
            ),
            (static_value(name), ConfigSource::StaticBroker),
            (default, ConfigSource::Default),
        ]
        .into_iter()
        .filter(|(v, _)| v.is_some())
        .collect()
    };
    let names: BTreeSet<String> = match scope {
        Scope::ClusterDefault => sets.cluster_default.keys().cloned().collect(),
        // Every key of Kafka's, and whatever else was set (Weir's own keys, such as
        // etcd.connect).
        Scope::Broker => kafka_configs::keys()
            .iter()
            .map(|k| k.name.to_string())
            .chain(props.keys().cloned())
            .chain(sets.cluster_default.keys().cloned())
            .chain(sets.broker.keys().cloned())
            .collect(),
    };
    names
        .into_iter()
        .map(|name| {
            let kafka = kafka_configs::key(&name);
            let found = layers(&name);
            let (value, source) = match scope {
                Scope::ClusterDefault => (
                    sets.cluster_default.get(&name).cloned(),
                    ConfigSource::DynamicDefaultBroker,
                ),
                Scope::Broker => found
                    .first()
                    .cloned()
                    .unwrap_or((None, ConfigSource::Default)),
            };
            // As Kafka: secrets (a PEM private key, passwords) are never shown, nor the value
            // of a key set dynamically that neither Kafka nor Weir knows (its type is
            // unknown, so it may be a secret).
            let kafka =
                kafka.or_else(|| dynamic_config::listener_base(&name).and_then(kafka_configs::key));
            let unknown =
                kafka.is_none() && !props.contains_key(&name) && !weir.contains_key(&name);
            let sensitive = weir_security::tls::is_sensitive(&name)
                || unknown
                || kafka.is_some_and(|k| k.config_type == ConfigType::Password);
            let mut entry = ConfigEntry {
                value: if sensitive { None } else { value },
                source,
                read_only: match kafka {
                    Some(k) => k.mode == kafka_configs::UpdateMode::ReadOnly,
                    None => !dynamic_config::is_dynamic(&name),
                },
                sensitive,
                config_type: kafka.map_or(ConfigType::String, |k| k.config_type),
                documentation: Some(kafka_configs::documentation(&name)),
                synonyms: Vec::new(),
                name,
            };
            // As Kafka: a broker key's synonyms are its own values, layer by layer.
            if synonyms && scope == Scope::Broker {
                entry.synonyms = found
                    .into_iter()
                    .map(|(value, source)| ConfigSynonym {
                        name: entry.name.clone(),
                        value: if sensitive { None } else { value },
                        source,
                    })
                    .collect();
            }
            entry
        })
        .collect()
}

/// A topic's configs as DescribeConfigs (and CreateTopics v5+) report them. As Kafka, a key's
/// synonyms are the topic's own value, then its broker keys (`log.retention.ms`, `.minutes`,
/// `.hours` for `retention.ms`) layer by layer: this broker's dynamic config, the cluster-wide
/// dynamic default, server.properties, and the defaults (of broker keys that have one: no
/// DEFAULT synonym where Kafka's default is unset). The entry's source is its first synonym's.
fn topic_config_entries(broker: &Broker, topic: &Topic, synonyms: bool) -> Vec<ConfigEntry> {
    let keys: Vec<&str> = topic.overrides.keys().map(String::as_str).collect();
    let mut entries = topic.config.describe(&keys, &[]);
    let sets = broker.dynamic.sets();
    let weir = weir_values(broker);
    let defaults: BTreeMap<String, String> = LogConfig::broker_keys()
        .iter()
        .filter_map(|k| {
            let default = weir
                .get(*k)
                .cloned()
                .or_else(|| kafka_configs::key(k).and_then(|d| d.default.map(str::to_string)));
            default.map(|v| (k.to_string(), v))
        })
        .collect();
    let layers = [
        (&sets.broker, ConfigSource::DynamicBroker),
        (&sets.cluster_default, ConfigSource::DynamicDefaultBroker),
        (&broker.config.properties, ConfigSource::StaticBroker),
        (&defaults, ConfigSource::Default),
    ];
    for e in &mut entries {
        let mut found: Vec<ConfigSynonym> = Vec::new();
        if let Some(o) = topic.overrides.get(&e.name) {
            found.push(ConfigSynonym {
                name: e.name.clone(),
                value: Some(o.clone()),
                source: ConfigSource::DynamicTopic,
            });
        }
        let broker_keys = LogConfig::broker_synonyms(&e.name);
        let mut from_brokers: Vec<ConfigSynonym> = Vec::new();
        for (layer, source) in &layers {
            for bk in broker_keys {
                if let Some(v) = layer.get(*bk) {
                    from_brokers.push(ConfigSynonym {
                        name: bk.to_string(),
                        value: Some(v.clone()),
                        source: *source,
                    });
                }
            }
        }
        // As Kafka does, the broker layers count only from the first place the primary
        // broker key (say `log.retention.ms`) is set: a `log.retention.hours` alone, or
        // only `log.roll.hours`'s default, is not listed as a synonym of the topic key.
        if let Some(primary) = broker_keys.first() {
            let start = from_brokers
                .iter()
                .position(|f| f.name == *primary)
                .unwrap_or(from_brokers.len());
            found.extend(from_brokers.drain(start..));
        }
        e.source = found.first().map_or(ConfigSource::Default, |f| f.source);
        if synonyms {
            e.synonyms = found;
        }
    }
    entries
}

/// One entry of a DescribeConfigs answer of version `v`.
fn describe_result(e: ConfigEntry, v: i16, documentation: bool) -> DescribeConfigsResourceResult {
    let mut c = DescribeConfigsResourceResult::default();
    c.name = s(e.name);
    c.value = e.value.map(s);
    c.read_only = e.read_only;
    c.config_source = e.source.code();
    c.is_sensitive = e.sensitive;
    c.synonyms = e
        .synonyms
        .into_iter()
        .map(|syn| {
            let mut d = DescribeConfigsSynonym::default();
            d.name = s(syn.name);
            d.value = syn.value.map(s);
            d.source = syn.source.code();
            d
        })
        .collect();
    if v >= 3 {
        c.config_type = e.config_type.code();
        if documentation {
            c.documentation = e.documentation.map(s);
        }
    }
    c
}

/// Whether the client may describe (or alter) a resource's settings: a topic's need the
/// operation on the topic, a broker's on the cluster, as in Kafka.
fn config_access(
    broker: &Broker,
    ctx: &RequestContext,
    resource_type: i8,
    name: &str,
    op: Operation,
) -> Result<(), ApiError> {
    let verb = if op == Operation::AlterConfigs {
        "alter"
    } else {
        "describe"
    };
    match resource_type {
        RESOURCE_TOPIC if !broker.allowed(ctx, op, ResourceType::Topic, name) => {
            Err(ApiError::new(
                E::TopicAuthorizationFailed,
                format!(
                    "{} may not {verb} the settings of topic '{name}'",
                    ctx.principal
                ),
            ))
        }
        RESOURCE_GROUP if !broker.allowed(ctx, op, ResourceType::Group, name) => {
            Err(ApiError::new(
                E::GroupAuthorizationFailed,
                format!(
                    "{} may not {verb} the settings of group '{name}'",
                    ctx.principal
                ),
            ))
        }
        RESOURCE_BROKER | RESOURCE_BROKER_LOGGER if !broker.allowed_on_cluster(ctx, op) => {
            Err(ApiError::new(
                E::ClusterAuthorizationFailed,
                format!("{} may not {verb} the broker's settings", ctx.principal),
            ))
        }
        _ => Ok(()),
    }
}

pub fn alter_configs(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let mut resp = AlterConfigsResponse::default();
    for res in req.resources {
        let mut r = AlterConfigsResourceResponse::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        let allowed = config_access(
            broker,
            ctx,
            res.resource_type,
            &res.resource_name,
            Operation::AlterConfigs,
        );
        let result = allowed.and_then(|()| match res.resource_type {
            RESOURCE_TOPIC => (|| {
                // The legacy API replaces the topic's whole set of overrides.
                let mut overrides = BTreeMap::new();
                for c in &res.configs {
                    let value = c.value.as_ref().ok_or_else(|| {
                        ApiError::new(
                            E::InvalidConfig,
                            format!("config {} has a null value", c.name),
                        )
                    })?;
                    overrides.insert(c.name.to_string(), value.to_string());
                }
                super::off_worker(|| {
                    broker.set_topic_overrides(&res.resource_name, overrides, req.validate_only)
                })
            })(),
            RESOURCE_BROKER => (|| {
                // The legacy API replaces the whole dynamic set, as for a topic.
                let scope = broker_scope(broker, &res.resource_name)?;
                let mut set = BTreeMap::new();
                for c in &res.configs {
                    let value = c.value.as_ref().ok_or_else(|| {
                        ApiError::new(
                            E::InvalidConfig,
                            format!("config {} has a null value", c.name),
                        )
                    })?;
                    set.insert(c.name.to_string(), value.to_string());
                }
                let named: Vec<String> = set.keys().cloned().collect();
                super::off_worker(|| {
                    broker.set_broker_configs(scope, set, &named, req.validate_only)
                })
            })(),
            RESOURCE_GROUP => (|| {
                // As for a topic, the legacy API replaces the group's whole set.
                group_configs::check_name(&res.resource_name, false)?;
                let mut set = BTreeMap::new();
                for c in &res.configs {
                    let value = c.value.as_ref().ok_or_else(|| {
                        ApiError::new(
                            E::InvalidConfig,
                            format!("config {} has a null value", c.name),
                        )
                    })?;
                    set.insert(c.name.to_string(), value.to_string());
                }
                super::off_worker(|| {
                    broker.set_group_configs(&res.resource_name, set, req.validate_only)
                })
            })(),
            other => Err(ApiError::new(
                E::InvalidRequest,
                format!("resource type {other} cannot be altered"),
            )),
        });
        if let Err(e) = result {
            r.error_code = e.code;
            r.error_message = Some(s(e.message));
        }
        resp.responses.push(r);
    }
    resp
}

pub fn incremental_alter_configs(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut resp = IncrementalAlterConfigsResponse::default();
    for res in req.resources {
        let mut r = IncrementalResult::default();
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name.clone();
        let allowed = config_access(
            broker,
            ctx,
            res.resource_type,
            &res.resource_name,
            Operation::AlterConfigs,
        );
        let result = allowed.and_then(|()| match res.resource_type {
            RESOURCE_TOPIC => (|| {
                let topic = broker.topic(&res.resource_name).ok_or_else(|| {
                    ApiError::new(
                        E::UnknownTopicOrPartition,
                        format!("topic '{}' does not exist", res.resource_name),
                    )
                })?;
                for c in &res.configs {
                    if !LogConfig::is_topic_key(&c.name) {
                        return Err(ApiError::new(
                            E::InvalidConfig,
                            format!("'{}' is not a topic config", c.name),
                        ));
                    }
                }
                let is_list =
                    |name: &str| name == "cleanup.policy" || name.ends_with("throttled.replicas");
                let overrides =
                    apply_ops(topic.overrides.clone(), &res.configs, is_list, |name| {
                        topic.config.value_of(name)
                    })?;
                super::off_worker(|| {
                    broker.set_topic_overrides(&res.resource_name, overrides, req.validate_only)
                })
            })(),
            RESOURCE_BROKER => (|| {
                let scope = broker_scope(broker, &res.resource_name)?;
                let defaults = broker.log_defaults();
                let set = apply_ops(
                    broker.dynamic.sets().of(scope).clone(),
                    &res.configs,
                    |name| name == "log.cleanup.policy",
                    |_| defaults.value_of("cleanup.policy"),
                )?;
                let named: Vec<String> = res.configs.iter().map(|c| c.name.to_string()).collect();
                super::off_worker(|| {
                    broker.set_broker_configs(scope, set, &named, req.validate_only)
                })
            })(),
            RESOURCE_GROUP => (|| {
                group_configs::check_name(&res.resource_name, false)?;
                // As Kafka: no group key takes APPEND or SUBTRACT, its one list among them.
                let set = apply_ops(
                    broker.group_configs.of(&res.resource_name),
                    &res.configs,
                    |_| false,
                    |_| None,
                )?;
                super::off_worker(|| {
                    broker.set_group_configs(&res.resource_name, set, req.validate_only)
                })
            })(),
            RESOURCE_BROKER_LOGGER => (|| {
                logger_broker(broker, &res.resource_name)?;
                const SET: i8 = AlterConfigOpType::Set.code();
                const DELETE: i8 = AlterConfigOpType::Delete.code();
                let mut changes = Vec::new();
                for c in &res.configs {
                    let level = match c.config_operation {
                        SET => Some(c.value.as_ref().map_or_else(String::new, |v| v.to_string())),
                        DELETE => None,
                        op => {
                            return Err(ApiError::new(
                                E::InvalidRequest,
                                format!(
                                    "operation {op} is not allowed for the BROKER_LOGGER \
                                     resource: SET (0) and DELETE (1) are"
                                ),
                            ))
                        }
                    };
                    changes.push((c.name.to_string(), level));
                }
                if req.validate_only {
                    log_levels::check(&changes)
                } else {
                    log_levels::change(&changes)
                }
            })(),
            other => Err(ApiError::new(
                E::InvalidRequest,
                format!("resource type {other} cannot be altered"),
            )),
        });
        if let Err(e) = result {
            r.error_code = e.code;
            r.error_message = Some(s(e.message));
        }
        resp.responses.push(r);
    }
    resp
}

/// A BROKER_LOGGER resource names a broker by its id, and a broker answers only for its
/// own loggers, as in Kafka.
fn logger_broker(broker: &Broker, name: &str) -> Result<(), ApiError> {
    let me = broker.config.node_id.to_string();
    if name.is_empty() {
        return Err(ApiError::new(
            E::InvalidRequest,
            "Broker id must not be empty",
        ));
    }
    if name != me {
        return Err(ApiError::new(
            E::InvalidRequest,
            format!("Unexpected broker id, expected {me} but received {name}"),
        ));
    }
    Ok(())
}

/// IncrementalAlterConfigs' operations applied to a set of configs: SET and DELETE a key,
/// APPEND to and SUBTRACT from a list (`is_list`), whose value before is the set's or
/// else `current`'s.
fn apply_ops(
    mut set: BTreeMap<String, String>,
    ops: &[kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig],
    is_list: impl Fn(&str) -> bool,
    current: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, ApiError> {
    const SET: i8 = AlterConfigOpType::Set.code();
    const DELETE: i8 = AlterConfigOpType::Delete.code();
    const APPEND: i8 = AlterConfigOpType::Append.code();
    const SUBTRACT: i8 = AlterConfigOpType::Subtract.code();
    for c in ops {
        let name = c.name.to_string();
        let value = c.value.as_ref().map(|v| v.to_string());
        match c.config_operation {
            SET => {
                let value = value.ok_or_else(|| {
                    ApiError::new(E::InvalidConfig, format!("SET {name} needs a value"))
                })?;
                set.insert(name, value);
            }
            DELETE => {
                set.remove(&name);
            }
            APPEND | SUBTRACT => {
                if !is_list(&name) {
                    return Err(ApiError::new(
                        E::InvalidConfig,
                        format!(
                            "Can't {} to key {name} because its type is not LIST.",
                            if c.config_operation == APPEND {
                                "APPEND"
                            } else {
                                "SUBTRACT"
                            }
                        ),
                    ));
                }
                let before = set
                    .get(&name)
                    .cloned()
                    .or_else(|| current(&name))
                    .unwrap_or_default();
                let mut items: Vec<String> = before
                    .split(',')
                    .map(|x| x.trim().to_string())
                    .filter(|x| !x.is_empty())
                    .collect();
                for x in value
                    .unwrap_or_default()
                    .split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                {
                    if c.config_operation == APPEND {
                        if !items.iter().any(|i| i == x) {
                            items.push(x.to_string());
                        }
                    } else {
                        items.retain(|i| i != x);
                    }
                }
                set.insert(name, items.join(","));
            }
            op => {
                return Err(ApiError::new(
                    E::InvalidRequest,
                    format!("unknown config operation {op}"),
                ))
            }
        }
    }
    Ok(set)
}

/// Which dynamic set a BROKER resource names: this broker's (its id) or every broker's
/// default (an empty name).
fn broker_scope(broker: &Broker, name: &str) -> Result<Scope, ApiError> {
    if name.is_empty() {
        Ok(Scope::ClusterDefault)
    } else if name == broker.config.node_id.to_string() {
        Ok(Scope::Broker)
    } else {
        Err(ApiError::new(
            E::InvalidRequest,
            format!("this is broker {}, not {name}", broker.config.node_id),
        ))
    }
}
