//! What a request handler is given and what it gives back: the context of the request it
//! serves (who asks, through which listener, at which version) and its answer as a value —
//! a Kafka message, a fetch whose records are still file ranges, or nothing (acks=0). The
//! `wire` module turns answers into frames; handlers never see frames or sockets.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseKind};
use weir_log::FileSlice;

/// What a handler knows about the request it serves.
#[derive(Debug)]
pub struct RequestContext {
    pub api_key: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: String,
    pub peer: SocketAddr,
    /// The listener the client connected through (Metadata advertises that one).
    pub listener: Arc<str>,
    /// Kafka's principal: `User:<name>` after SASL, else `User:ANONYMOUS`. Shared, so
    /// that a request costs no allocation for it.
    pub principal: Arc<str>,
    /// The client's address as ACLs name hosts (`10.0.0.7`, `::1`).
    pub host: Arc<str>,
    /// The request frame's size in bytes: what a produce quota counts.
    pub size: usize,
    /// Set by a handler whose client went over its quota: how long, in ms, this
    /// connection is not read after the response (KIP-219).
    pub throttle_ms: AtomicU32,
}

impl RequestContext {
    /// The user part of the principal (`alice` for `User:alice`), as quotas name users.
    pub fn user(&self) -> &str {
        self.principal
            .split_once(':')
            .map_or(&*self.principal, |(_, name)| name)
    }

    pub fn throttle(&self, ms: u32) {
        self.throttle_ms.fetch_max(ms, Ordering::Relaxed);
    }
}

/// A handler's answer.
// Made once per request and consumed at once by the wire module: boxing the large variant
// would cost an allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Response {
    /// A Kafka response message.
    Message(ResponseKind),
    /// A fetch response whose record sets are still ranges of segment files.
    Fetch(FetchReply),
    /// No response is due (a produce request with acks=0).
    None,
}

/// A fetch response whose record sets are still file ranges: `records[t][p]` belongs to
/// `response.responses[t].partitions[p]`, whose own `records` field is empty.
#[derive(Debug, Default)]
pub struct FetchReply {
    pub response: FetchResponse,
    pub records: Vec<Vec<Option<FileSlice>>>,
}
