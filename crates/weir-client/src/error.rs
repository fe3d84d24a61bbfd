//! The client's errors: a Kafka error code from a broker (with whether retrying can help),
//! a connection that failed, a timeout, or a configuration the user must fix.

use kafka_protocol::ResponseError;

/// Why a client operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// A broker answered with a Kafka error code.
    #[error("{} ({}){}", weir_kafka::error::name(*error), error.code(), message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        error: ResponseError,
        message: Option<String>,
    },
    /// No broker could be reached, or a connection broke.
    #[error("connection to {broker} failed: {reason}")]
    Connection { broker: String, reason: String },
    /// The operation did not finish in time.
    #[error("timed out after {ms} ms: {what}")]
    Timeout { what: String, ms: u64 },
    /// A setting is missing or invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// The broker sent something this client cannot use.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The producer's memory (`buffer.memory`) stayed full for `max.block.ms`.
    #[error(
        "buffer.memory is exhausted: no room for {needed} bytes within max.block.ms ({ms} ms)"
    )]
    BufferExhausted { needed: usize, ms: u64 },
    /// A record is larger than `max.request.size` or `buffer.memory`.
    #[error("the record is {size} bytes, more than {setting} ({limit})")]
    RecordTooLarge {
        size: usize,
        limit: usize,
        setting: &'static str,
    },
    /// The broker refused a record's batch for other records of it (KIP-467): this record
    /// was not written, though nothing is wrong with it (librdkafka's
    /// `_INVALID_DIFFERENT_RECORD`). `reason` is the broker's word on the batch.
    #[error("not written: another record of its batch was refused ({reason})")]
    InvalidDifferentRecord { reason: String },
    /// The client was closed.
    #[error("the client is closed")]
    Closed,
    /// A call the client's state does not allow (Kafka's `IllegalStateException`): e.g.
    /// `commit_transaction` with no transaction begun. The program, not the cluster, is wrong.
    #[error("not allowed now: {0}")]
    IllegalState(String),
    /// The transaction cannot commit (a record or its offsets failed to be written, or it
    /// was aborted): `abort_transaction`, then begin again. Kafka's abortable errors.
    #[error("the transaction must be aborted: {0}")]
    TransactionAbortable(Box<ClientError>),
    /// The record was not sent: its transaction (of this `transactional.id`) was
    /// aborted first.
    #[error("not sent: the transaction of transactional.id '{0}' was aborted")]
    TransactionAborted(String),
    /// The transactional producer can do nothing more (fenced by a newer producer with its
    /// `transactional.id`, not authorised for it, or the coordinator refused its state):
    /// close it. Kafka's fatal errors.
    #[error("the transactional producer failed for good: {0}")]
    TransactionFatal(Box<ClientError>),
}

impl ClientError {
    pub fn kafka(code: i16, message: Option<String>) -> Self {
        ClientError::Kafka {
            error: ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError),
            message,
        }
    }

    /// The Kafka error code, if a broker gave one.
    pub fn code(&self) -> Option<i16> {
        match self {
            ClientError::Kafka { error, .. } => Some(error.code()),
            _ => None,
        }
    }

    /// The Kafka error code behind this error, looking through a transaction's wrapper.
    pub fn root_code(&self) -> Option<i16> {
        match self {
            ClientError::TransactionAbortable(e) | ClientError::TransactionFatal(e) => {
                e.root_code()
            }
            e => e.code(),
        }
    }

    /// Whether the same request may succeed if sent again (Kafka's `RetriableException`s,
    /// and broken connections).
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Kafka { error, .. } => error.is_retriable(),
            ClientError::Connection { .. } | ClientError::Timeout { .. } => true,
            _ => false,
        }
    }

    /// Errors after which the client should refresh its metadata (a leader moved, a topic
    /// appeared).
    pub fn needs_metadata_refresh(&self) -> bool {
        matches!(
            self,
            ClientError::Kafka {
                error: ResponseError::NotLeaderOrFollower
                    | ResponseError::LeaderNotAvailable
                    | ResponseError::UnknownTopicOrPartition
                    | ResponseError::NotCoordinator
                    | ResponseError::CoordinatorNotAvailable
                    | ResponseError::FencedLeaderEpoch
                    | ResponseError::UnknownLeaderEpoch,
                ..
            } | ClientError::Connection { .. }
        )
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_kafka_names_them() {
        let e = ClientError::kafka(6, Some("orders-0".into()));
        assert_eq!(e.to_string(), "NOT_LEADER_OR_FOLLOWER (6): orders-0");
        assert_eq!(
            ClientError::kafka(36, None).to_string(),
            "TOPIC_ALREADY_EXISTS (36)"
        );
    }
}
