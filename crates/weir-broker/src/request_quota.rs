//! Kafka's request quota (`request_percentage`): the share of request handling time one
//! user or client id may take, as Kafka's `ClientRequestQuotaManager` keeps it.
//!
//! Kafka counts the time a request handler thread spends on a request. Weir's handlers are
//! futures on a shared runtime, so the same measure is the time spent inside the handler's
//! `poll` calls — the time it held a thread — and not its waits (for a follower, a lock, a
//! fetch's `max.wait.ms`), which hold none. Over its quota, a client's response carries
//! the throttle time (where the response has the field) and its connection is not read for
//! that long; a throttled fetch is answered empty, as Kafka answers it. Replication (a
//! follower's fetch) and the SASL exchange are exempt, as in Kafka.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use weir_security::quota::Kind;

use crate::broker::Broker;
use crate::request::{RequestContext, Response};

/// A future, and the time spent inside its `poll`, in nanoseconds.
pub struct PollTimed<F> {
    inner: Pin<Box<F>>,
    pub nanos: u64,
}

impl<F: Future> PollTimed<F> {
    pub fn new(inner: F) -> Self {
        PollTimed {
            inner: Box::pin(inner),
            nanos: 0,
        }
    }
}

impl<F: Future> Future for PollTimed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let started = Instant::now();
        let out = self.inner.as_mut().poll(cx);
        let spent = started.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.nanos = self.nanos.saturating_add(spent);
        out
    }
}

/// Whether a request is outside the request quota: a follower's fetch (replication, not a
/// client's traffic) and what brokers send each other.
pub fn exempt(request: &RequestKind) -> bool {
    match request {
        RequestKind::Fetch(f) => f.replica_id.0 >= 0 || f.replica_state.replica_id.0 >= 0,
        RequestKind::WriteTxnMarkers(_) => true,
        _ => false,
    }
}

/// Records `nanos` of handling for this request's client and, over its quota, throttles
/// the response: its `throttle_time_ms` (the larger of this and a byte-rate throttle the
/// handler set), an empty fetch, and the connection muted.
pub fn apply(broker: &Broker, ctx: &RequestContext, response: &mut Response, nanos: u64) {
    let ms = broker
        .quotas
        .record_request(ctx.user(), &ctx.client_id, nanos, weir_log::now_ms());
    if ms == 0 {
        return;
    }
    ctx.throttle(ms);
    let ms = ms.min(i32::MAX as u32) as i32;
    match response {
        Response::Fetch(reply) => {
            // Answered empty: the bytes it would have had are taken back off its fetch rate.
            let bytes: usize = reply
                .records
                .iter()
                .flatten()
                .flatten()
                .map(|s| s.len)
                .sum();
            if bytes > 0 {
                broker.quotas.unrecord(
                    Kind::Fetch,
                    ctx.user(),
                    &ctx.client_id,
                    bytes,
                    weir_log::now_ms(),
                );
            }
            reply.response.responses.clear();
            reply.records.clear();
            reply.response.throttle_time_ms = reply.response.throttle_time_ms.max(ms);
        }
        Response::Message(kind) => set_throttle(kind, ctx.api_key, ctx.version, ms),
        Response::None => {}
    }
}

/// Defines, for every response with a `throttle_time_ms` field, the first version that has
/// it: `throttle_field` finds the field whatever the version, `first_throttled_version`
/// says where it starts, and `default_response` makes an empty response of the API (for
/// the test of the table).
macro_rules! throttled_responses {
    ($($variant:ident from $first:literal),* $(,)?) => {
        fn throttle_field(kind: &mut ResponseKind) -> Option<&mut i32> {
            match kind {
                $(ResponseKind::$variant(r) => Some(&mut r.throttle_time_ms),)*
                _ => None,
            }
        }

        /// The first version of `api`'s response with a throttle time, if any has one.
        pub fn first_throttled_version(api: ApiKey) -> Option<i16> {
            match api {
                $(ApiKey::$variant => Some($first),)*
                _ => None,
            }
        }

        #[cfg(test)]
        fn default_response(api: ApiKey) -> Option<ResponseKind> {
            match api {
                $(ApiKey::$variant => Some(ResponseKind::$variant(Default::default())),)*
                _ => None,
            }
        }
    };
}

/// Raises the response's `throttle_time_ms` to `ms` if its version has the field.
pub fn set_throttle(kind: &mut ResponseKind, api: ApiKey, version: i16, ms: i32) {
    if first_throttled_version(api).is_some_and(|first| version >= first) {
        if let Some(field) = throttle_field(kind) {
            *field = (*field).max(ms);
        }
    }
}

// From Kafka's message definitions; the test checks each against the kafka-protocol crate's
// encoding. WriteTxnMarkers, SaslHandshake and SaslAuthenticate have no throttle time.
throttled_responses! {
    Produce from 1,
    Fetch from 1,
    ListOffsets from 2,
    Metadata from 3,
    OffsetCommit from 3,
    OffsetFetch from 3,
    FindCoordinator from 1,
    JoinGroup from 2,
    Heartbeat from 1,
    LeaveGroup from 1,
    SyncGroup from 1,
    DescribeGroups from 1,
    ListGroups from 1,
    ConsumerGroupHeartbeat from 0,
    ConsumerGroupDescribe from 0,
    ApiVersions from 1,
    CreateTopics from 2,
    DeleteTopics from 1,
    DeleteRecords from 0,
    InitProducerId from 0,
    AddPartitionsToTxn from 0,
    AddOffsetsToTxn from 0,
    EndTxn from 0,
    TxnOffsetCommit from 0,
    DescribeProducers from 0,
    DescribeTransactions from 0,
    ListTransactions from 0,
    OffsetForLeaderEpoch from 2,
    DescribeConfigs from 0,
    AlterConfigs from 0,
    CreatePartitions from 0,
    DeleteGroups from 0,
    IncrementalAlterConfigs from 0,
    OffsetDelete from 0,
    DescribeCluster from 0,
    DescribeLogDirs from 0,
    ElectLeaders from 0,
    AlterPartitionReassignments from 0,
    ListPartitionReassignments from 0,
    DescribeUserScramCredentials from 0,
    AlterUserScramCredentials from 0,
    DescribeAcls from 0,
    CreateAcls from 0,
    DeleteAcls from 0,
    DescribeClientQuotas from 0,
    AlterClientQuotas from 0,
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    /// Every API Weir serves, at every version: the table says the field is there exactly
    /// where kafka-protocol's encoding carries it (a value set below the first version is
    /// dropped by the encoding, one set from it on comes back).
    #[test]
    fn the_throttle_field_is_set_exactly_where_each_version_has_it() {
        for (api, lo, hi) in crate::versions::SUPPORTED {
            let Some(first) = first_throttled_version(*api) else {
                assert!(
                    default_response(*api).is_none(),
                    "{api:?} is missing from the table"
                );
                continue;
            };
            for v in *lo..=*hi {
                let mut kind = default_response(*api).unwrap();
                *throttle_field(&mut kind).unwrap() = 1234;
                let mut buf = BytesMut::new();
                kind.encode(&mut buf, v)
                    .unwrap_or_else(|e| panic!("{api:?} v{v} with a throttle time: {e}"));
                let mut back = ResponseKind::decode(*api, &mut buf.freeze(), v).unwrap();
                let carried = *throttle_field(&mut back).unwrap();
                assert_eq!(carried, if v >= first { 1234 } else { 0 }, "{api:?} v{v}");

                let mut set = default_response(*api).unwrap();
                set_throttle(&mut set, *api, v, 1234);
                set.encode(&mut BytesMut::new(), v).unwrap();
            }
        }
    }

    #[test]
    fn a_measured_future_counts_only_its_polls() {
        let mut timed = PollTimed::new(async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            7
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let out = rt.block_on(&mut timed);
        assert_eq!(out, 7);
        assert!(
            timed.nanos < 40_000_000,
            "a 50 ms sleep holds no thread: counted {} ns",
            timed.nanos
        );
    }
}
