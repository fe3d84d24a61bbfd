//! Kafka's client-quota vocabulary, as DescribeClientQuotas and AlterClientQuotas carry it:
//! the entity types a quota is set for, how a filter component matches an entity, and the
//! names of the quotas.

/// The entity type of a user principal's quotas.
pub const ENTITY_USER: &str = "user";
/// The entity type of a client id's quotas.
pub const ENTITY_CLIENT_ID: &str = "client-id";
/// The entity type of an IP address's quotas (KIP-612).
pub const ENTITY_IP: &str = "ip";

/// The byte rate a producer may send at.
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
/// The byte rate a consumer may fetch at.
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// The share of request handler time (KIP-124).
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
/// Partitions created or deleted per second (KIP-599).
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";
/// Connections opened per second from one address (KIP-612).
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// How a DescribeClientQuotas filter component matches one entity type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum QuotaMatch {
    /// This name.
    Exactly(String),
    /// The type's default (`<default>`).
    Default,
    /// Any name, or the default.
    Any,
}

impl QuotaMatch {
    /// The wire's `match_type` and `match`.
    pub fn wire(&self) -> (i8, Option<&str>) {
        match self {
            QuotaMatch::Exactly(n) => (0, Some(n)),
            QuotaMatch::Default => (1, None),
            QuotaMatch::Any => (2, None),
        }
    }

    /// From the wire; an unknown match type, or an exact match without a name, is `None`.
    pub fn from_wire(match_type: i8, name: Option<&str>) -> Option<QuotaMatch> {
        match (match_type, name) {
            (0, Some(n)) => Some(QuotaMatch::Exactly(n.to_string())),
            (1, _) => Some(QuotaMatch::Default),
            (2, _) => Some(QuotaMatch::Any),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_round_trip() {
        for m in [
            QuotaMatch::Exactly("alice".into()),
            QuotaMatch::Default,
            QuotaMatch::Any,
        ] {
            let (t, n) = m.wire();
            assert_eq!(QuotaMatch::from_wire(t, n), Some(m.clone()));
        }
        assert_eq!(QuotaMatch::from_wire(0, None), None);
        assert_eq!(QuotaMatch::from_wire(3, None), None);
    }
}
