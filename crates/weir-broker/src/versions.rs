//! The Kafka APIs Weir serves and the versions of each: this table is exactly what
//! ApiVersions advertises, and a request outside it is refused before it is decoded.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

/// (API, lowest, highest version) served. The ranges cover what current clients send
/// (see shared/reference/kafka-clients.md) within what the kafka-protocol crate decodes.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    // v6 (KIP-1043): an unknown group is GROUP_ID_NOT_FOUND, not a Dead description.
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    // KIP-848. v1 (member ids made by the client, regex subscriptions) is what librdkafka
    // 2.10+ and the Java client 4.x send.
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    // Transactions (KIP-98) without KIP-890 part 2 (transaction.version 2 is not
    // finalized, so clients keep to these): EndTxn v5 and TxnOffsetCommit v5 are its.
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 4),
    (ApiKey::TxnOffsetCommit, 0, 4),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeCluster, 0, 1),
    // Kafka 4.4 has v5 (KIP-1066's cordoned directories), which the codec lacks.
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    // After a v0 handshake the SASL tokens go as bare frames; v1 wraps them in
    // SaslAuthenticate. librdkafka asks for v0 in the range before it uses v1.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
];

pub fn is_supported(api: ApiKey, version: i16) -> bool {
    SUPPORTED
        .iter()
        .any(|(k, lo, hi)| *k == api && (*lo..=*hi).contains(&version))
}

/// The ApiVersions answer: every API in `SUPPORTED`.
pub fn api_versions_response() -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.api_keys = SUPPORTED
        .iter()
        .map(|(k, lo, hi)| {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = *lo;
            v.max_version = *hi;
            v
        })
        .collect();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_range_is_one_the_codec_supports() {
        for (k, lo, hi) in SUPPORTED {
            let r = k.valid_versions();
            assert!(
                r.min <= *lo && *hi <= r.max,
                "{k:?} {lo}..={hi} outside {}..={}",
                r.min,
                r.max
            );
        }
    }
}
