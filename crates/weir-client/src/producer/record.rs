//! What goes into the producer and what comes back: `ProducerRecord` (with serializers for
//! bytes, strings and serde JSON) and `RecordMetadata`, and the future or callback that
//! carries the outcome of one send.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::error::{ClientError, Result};

/// A record to send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Shared: an application sending many records to one topic clones an `Arc<str>`
    /// rather than allocating the name for every record.
    pub topic: Arc<str>,
    /// A fixed partition; otherwise the partitioner chooses.
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Milliseconds since the epoch; now if not given.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    pub fn new(topic: impl Into<Arc<str>>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            ..Default::default()
        }
    }
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }
    pub fn value(mut self, value: impl Into<Bytes>) -> Self {
        self.value = Some(value.into());
        self
    }
    /// A value serialized as JSON (serde).
    pub fn json_value<T: serde::Serialize>(mut self, value: &T) -> Result<Self> {
        let v = serde_json::to_vec(value)
            .map_err(|e| ClientError::Config(format!("serializing the value: {e}")))?;
        self.value = Some(Bytes::from(v));
        Ok(self)
    }
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }
    pub fn header(mut self, name: impl Into<String>, value: Option<impl Into<Bytes>>) -> Self {
        self.headers.push((name.into(), value.map(Into::into)));
        self
    }
}

/// Where a record went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Shared with every record of the batch: acknowledging a record allocates nothing.
    pub topic: Arc<str>,
    pub partition: i32,
    /// -1 with acks=0 (the broker does not say).
    pub offset: i64,
    /// The record's timestamp, or the broker's append time under LogAppendTime.
    pub timestamp: i64,
    pub serialized_key_size: i32,
    pub serialized_value_size: i32,
}

pub(crate) type Callback = Box<dyn FnOnce(Result<RecordMetadata>) + Send>;

/// Told of every record sent with `Producer::send_with_listener`, with the token given
/// at the send: librdkafka's delivery-report callback with its per-message opaque. One
/// listener serves many records, so a send allocates nothing for its outcome — at a
/// million records a second, a boxed closure per record (and freeing it on the producer's
/// I/O thread) is a visible share of the producer's CPU.
pub trait DeliveryListener: Send + Sync + 'static {
    /// Runs on the producer's I/O thread: keep it short.
    fn on_delivery(&self, token: u64, result: Result<RecordMetadata>);

    /// The outcomes of a batch's records, in the order they were sent, when they all report
    /// to this listener: all acknowledged at once, or all failed. Each goes to
    /// `on_delivery` unless a listener does better; one that reads a clock or takes a
    /// lock per outcome can do so once per batch here.
    fn on_deliveries(&self, outcomes: &mut dyn Iterator<Item = (u64, Result<RecordMetadata>)>) {
        for (token, result) in outcomes {
            self.on_delivery(token, result);
        }
    }
}

/// How one record's outcome is to be reported, as `send` is given it. A listener is
/// borrowed: the batch keeps one reference to it for all its records (see the
/// accumulator's `Completion`), so that a send does not touch the listener's reference
/// count — which the producer's I/O thread touches too, on another core.
pub(crate) enum Notifier<'a> {
    Future(oneshot::Sender<Result<RecordMetadata>>),
    Callback(Callback),
    Listener(&'a Arc<dyn DeliveryListener>, u64),
}

/// The outcome of one `send`: resolves once the broker acknowledged the record (or the
/// producer gave up on it).
pub struct DeliveryFuture {
    pub(crate) rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ClientError::Closed)))
    }
}
