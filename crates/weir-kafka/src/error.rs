//! Kafka's error codes: the code with the message a broker sends back, Kafka's names for
//! the codes (`NOT_LEADER_OR_FOLLOWER`), and whether retrying can help. The codes
//! themselves are the kafka-protocol crate's `ResponseError`, re-exported as [`ErrorCode`].

use std::fmt;

/// Kafka's error codes, with `code()`, `try_from_code()` and `is_retriable()`.
pub use kafka_protocol::ResponseError as ErrorCode;

/// A Kafka error code with a message for the client (where the response has a field for
/// it): what a request handler answers when it cannot do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: i16,
    pub message: String,
}

impl ApiError {
    pub fn new(e: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code: e.code(),
            message: message.into(),
        }
    }

    /// The code as an [`ErrorCode`]; UNKNOWN_SERVER_ERROR for a code it does not know.
    pub fn error(&self) -> ErrorCode {
        ErrorCode::try_from_code(self.code).unwrap_or(ErrorCode::UnknownServerError)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            name(self.error()),
            self.code,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

/// Kafka's error codes as constants, for `match` patterns on the `error_code` fields of
/// responses (an `ErrorCode` method call cannot be a pattern). `NONE` is success.
pub mod codes {
    use super::ErrorCode;

    pub const NONE: i16 = 0;
    pub const UNKNOWN_SERVER_ERROR: i16 = ErrorCode::UnknownServerError.code();
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = ErrorCode::UnknownTopicOrPartition.code();
    pub const INVALID_FETCH_SIZE: i16 = ErrorCode::InvalidFetchSize.code();
    pub const NOT_LEADER_OR_FOLLOWER: i16 = ErrorCode::NotLeaderOrFollower.code();
    pub const REQUEST_TIMED_OUT: i16 = ErrorCode::RequestTimedOut.code();
    pub const MESSAGE_TOO_LARGE: i16 = ErrorCode::MessageTooLarge.code();
    pub const OFFSET_METADATA_TOO_LARGE: i16 = ErrorCode::OffsetMetadataTooLarge.code();
    pub const COORDINATOR_NOT_AVAILABLE: i16 = ErrorCode::CoordinatorNotAvailable.code();
    pub const NOT_COORDINATOR: i16 = ErrorCode::NotCoordinator.code();
    pub const RECORD_LIST_TOO_LARGE: i16 = ErrorCode::RecordListTooLarge.code();
    pub const NOT_ENOUGH_REPLICAS: i16 = ErrorCode::NotEnoughReplicas.code();
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 =
        ErrorCode::NotEnoughReplicasAfterAppend.code();
    pub const ILLEGAL_GENERATION: i16 = ErrorCode::IllegalGeneration.code();
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = ErrorCode::InconsistentGroupProtocol.code();
    pub const INVALID_GROUP_ID: i16 = ErrorCode::InvalidGroupId.code();
    pub const UNKNOWN_MEMBER_ID: i16 = ErrorCode::UnknownMemberId.code();
    pub const INVALID_SESSION_TIMEOUT: i16 = ErrorCode::InvalidSessionTimeout.code();
    pub const REBALANCE_IN_PROGRESS: i16 = ErrorCode::RebalanceInProgress.code();
    pub const INVALID_REQUEST: i16 = ErrorCode::InvalidRequest.code();
    pub const INVALID_COMMIT_OFFSET_SIZE: i16 = ErrorCode::InvalidCommitOffsetSize.code();
    pub const KAFKA_STORAGE_ERROR: i16 = ErrorCode::KafkaStorageError.code();
    pub const NON_EMPTY_GROUP: i16 = ErrorCode::NonEmptyGroup.code();
    pub const GROUP_ID_NOT_FOUND: i16 = ErrorCode::GroupIdNotFound.code();
    pub const MEMBER_ID_REQUIRED: i16 = ErrorCode::MemberIdRequired.code();
    pub const GROUP_MAX_SIZE_REACHED: i16 = ErrorCode::GroupMaxSizeReached.code();
    pub const FENCED_INSTANCE_ID: i16 = ErrorCode::FencedInstanceId.code();
    pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = ErrorCode::GroupSubscribedToTopic.code();
    pub const NETWORK_EXCEPTION: i16 = ErrorCode::NetworkException.code();
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = ErrorCode::CoordinatorLoadInProgress.code();
    pub const UNSTABLE_OFFSET_COMMIT: i16 = ErrorCode::UnstableOffsetCommit.code();
    pub const UNSUPPORTED_VERSION: i16 = ErrorCode::UnsupportedVersion.code();
    pub const FENCED_MEMBER_EPOCH: i16 = ErrorCode::FencedMemberEpoch.code();
    pub const UNRELEASED_INSTANCE_ID: i16 = ErrorCode::UnreleasedInstanceId.code();
    pub const UNSUPPORTED_ASSIGNOR: i16 = ErrorCode::UnsupportedAssignor.code();
    pub const STALE_MEMBER_EPOCH: i16 = ErrorCode::StaleMemberEpoch.code();
    pub const INVALID_REGULAR_EXPRESSION: i16 = ErrorCode::InvalidRegularExpression.code();
}

/// Kafka's name for an error code, as its clients and docs print it
/// (`NOT_LEADER_OR_FOLLOWER`), from the generated variant name (`NotLeaderOrFollower`).
pub fn name(error: ErrorCode) -> String {
    let camel = format!("{error:?}");
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Whether a request that failed with `code` may succeed if sent again (Kafka's
/// `RetriableException`s); an unknown code is not.
pub fn is_retriable(code: i16) -> bool {
    ErrorCode::try_from_code(code).is_some_and(|e| e.is_retriable())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_read_as_kafka_names_them() {
        assert_eq!(name(ErrorCode::KafkaStorageError), "KAFKA_STORAGE_ERROR");
        let e = ApiError::new(ErrorCode::NotLeaderOrFollower, "orders-0");
        assert_eq!(e.to_string(), "NOT_LEADER_OR_FOLLOWER (6): orders-0");
        assert!(is_retriable(6) && !is_retriable(36) && !is_retriable(-9999));
    }
}
