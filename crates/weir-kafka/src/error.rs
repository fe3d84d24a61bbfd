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
