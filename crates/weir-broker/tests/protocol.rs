//! The broker at the protocol level, with raw frames over real sockets: every advertised API
//! answers at its lowest and highest version; ApiVersions falls back to v0 for versions it
//! does not know; and a garbage, oversized, truncated or unknown-API frame closes only the
//! connection that sent it.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_broker::{BrokerConfig, RunningBroker};

async fn start(dir: &std::path::Path) -> RunningBroker {
    let mut props = std::collections::BTreeMap::new();
    props.insert(
        "listeners".to_string(),
        "PLAINTEXT://127.0.0.1:0".to_string(),
    );
    props.insert("log.dirs".to_string(), dir.display().to_string());
    props.insert(
        "group.initial.rebalance.delay.ms".to_string(),
        "0".to_string(),
    );
    props.insert("offsets.topic.num.partitions".to_string(), "2".to_string());
    RunningBroker::start(BrokerConfig::from_properties(props).unwrap())
        .await
        .unwrap()
}

fn frame(api: ApiKey, version: i16, corr: i32, body: &RequestKind) -> Bytes {
    let mut buf = BytesMut::new();
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = corr;
    header.client_id = Some(StrBytes::from_static_str("protocol-test"));
    header
        .encode(&mut buf, api.request_header_version(version))
        .unwrap();
    body.encode(&mut buf, version).unwrap();
    let mut out = BytesMut::new();
    out.extend_from_slice(&(buf.len() as i32).to_be_bytes());
    out.extend_from_slice(&buf);
    out.freeze()
}

async fn read_frame(s: &mut TcpStream) -> Option<Bytes> {
    let n = tokio::time::timeout(Duration::from_secs(10), s.read_i32())
        .await
        .ok()?
        .ok()?;
    let mut buf = vec![0u8; n as usize];
    s.read_exact(&mut buf).await.ok()?;
    Some(Bytes::from(buf))
}

async fn call(
    s: &mut TcpStream,
    api: ApiKey,
    version: i16,
    corr: i32,
    body: RequestKind,
) -> ResponseKind {
    s.write_all(&frame(api, version, corr, &body))
        .await
        .unwrap();
    let mut resp = read_frame(s)
        .await
        .unwrap_or_else(|| panic!("no response to {api:?} v{version}"));
    let header =
        ResponseHeader::decode_with_version(&mut resp, api.response_header_version(version));
    assert_eq!(header, corr, "{api:?} v{version}: correlation id");
    ResponseKind::decode(api, &mut resp, version)
        .unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"))
}

trait DecodeHeader {
    fn decode_with_version(buf: &mut Bytes, version: i16) -> i32;
}
impl DecodeHeader for ResponseHeader {
    fn decode_with_version(buf: &mut Bytes, version: i16) -> i32 {
        use kafka_protocol::protocol::Decodable;
        ResponseHeader::decode(buf, version).unwrap().correlation_id
    }
}

/// A sensible request of each API, valid at every version we serve.
fn request(api: ApiKey, topic: &str, v: i16) -> RequestKind {
    let name = || TopicName(StrBytes::from_string(topic.to_string()));
    let txn_id = || TransactionalId(StrBytes::from_string(format!("{topic}-txn")));
    match api {
        ApiKey::Produce => {
            let mut b =
                weir_record::BatchBuilder::new(weir_record::Compression::None, 0, usize::MAX);
            b.append(1_700_000_000_000, Some(b"k"), Some(b"v"), &[])
                .unwrap();
            let mut pd = produce_request::PartitionProduceData::default();
            pd.records = Some(Bytes::from(b.build().unwrap().bytes));
            let mut td = produce_request::TopicProduceData::default();
            td.name = name();
            td.partition_data = vec![pd];
            let mut r = ProduceRequest::default();
            r.acks = 1;
            r.timeout_ms = 1000;
            r.topic_data = vec![td];
            RequestKind::Produce(r)
        }
        ApiKey::Fetch => {
            let mut p = fetch_request::FetchPartition::default();
            p.partition_max_bytes = 1 << 20;
            let mut t = fetch_request::FetchTopic::default();
            t.topic = name();
            t.partitions = vec![p];
            let mut r = FetchRequest::default();
            r.max_bytes = 1 << 20;
            r.max_wait_ms = 10;
            r.session_epoch = -1;
            r.topics = vec![t];
            RequestKind::Fetch(r)
        }
        ApiKey::ListOffsets => {
            let mut p = list_offsets_request::ListOffsetsPartition::default();
            p.timestamp = -1;
            let mut t = list_offsets_request::ListOffsetsTopic::default();
            t.name = name();
            t.partitions = vec![p];
            let mut r = ListOffsetsRequest::default();
            r.topics = vec![t];
            RequestKind::ListOffsets(r)
        }
        ApiKey::Metadata => {
            let mut t = metadata_request::MetadataRequestTopic::default();
            t.name = Some(name());
            let mut r = MetadataRequest::default();
            r.topics = Some(vec![t]);
            RequestKind::Metadata(r)
        }
        ApiKey::OffsetCommit => {
            let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
            p.committed_offset = 0;
            let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
            t.name = name();
            t.partitions = vec![p];
            let mut r = OffsetCommitRequest::default();
            r.group_id = GroupId(StrBytes::from_static_str("g-protocol"));
            r.generation_id_or_member_epoch = -1;
            r.topics = vec![t];
            RequestKind::OffsetCommit(r)
        }
        ApiKey::OffsetFetch => {
            let mut r = OffsetFetchRequest::default();
            if v >= 8 {
                let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
                g.group_id = GroupId(StrBytes::from_static_str("g-protocol"));
                r.groups = vec![g];
            } else {
                r.group_id = GroupId(StrBytes::from_static_str("g-protocol"));
                let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
                t.name = name();
                t.partition_indexes = vec![0];
                r.topics = Some(vec![t]);
            }
            RequestKind::OffsetFetch(r)
        }
        ApiKey::FindCoordinator => {
            let mut r = FindCoordinatorRequest::default();
            if v >= 4 {
                r.coordinator_keys = vec![StrBytes::from_static_str("g-protocol")];
            } else {
                r.key = StrBytes::from_static_str("g-protocol");
            }
            RequestKind::FindCoordinator(r)
        }
        ApiKey::JoinGroup => {
            let mut r = JoinGroupRequest::default();
            r.group_id = GroupId(StrBytes::from_static_str("g-join"));
            r.session_timeout_ms = 10_000;
            r.rebalance_timeout_ms = 10_000;
            r.protocol_type = StrBytes::from_static_str("consumer");
            let mut p = join_group_request::JoinGroupRequestProtocol::default();
            p.name = StrBytes::from_static_str("range");
            r.protocols = vec![p];
            RequestKind::JoinGroup(r)
        }
        ApiKey::Heartbeat => {
            let mut r = HeartbeatRequest::default();
            r.group_id = GroupId(StrBytes::from_static_str("g-none"));
            RequestKind::Heartbeat(r)
        }
        ApiKey::LeaveGroup => {
            let mut r = LeaveGroupRequest::default();
            r.group_id = GroupId(StrBytes::from_static_str("g-none"));
            if v >= 3 {
                let mut m = leave_group_request::MemberIdentity::default();
                m.member_id = StrBytes::from_static_str("nobody");
                r.members = vec![m];
            } else {
                r.member_id = StrBytes::from_static_str("nobody");
            }
            RequestKind::LeaveGroup(r)
        }
        ApiKey::SyncGroup => {
            let mut r = SyncGroupRequest::default();
            r.group_id = GroupId(StrBytes::from_static_str("g-none"));
            RequestKind::SyncGroup(r)
        }
        ApiKey::ConsumerGroupHeartbeat => {
            // A first heartbeat (KIP-848): join at epoch 0 with a subscription.
            let mut r = ConsumerGroupHeartbeatRequest::default();
            r.group_id = GroupId(StrBytes::from_static_str("g-kip848"));
            r.member_id = StrBytes::from_static_str("m-protocol");
            r.member_epoch = 0;
            r.rebalance_timeout_ms = 1000;
            r.subscribed_topic_names = Some(vec![name()]);
            r.topic_partitions = Some(Vec::new());
            RequestKind::ConsumerGroupHeartbeat(r)
        }
        ApiKey::ConsumerGroupDescribe => {
            let mut r = ConsumerGroupDescribeRequest::default();
            r.group_ids = vec![GroupId(StrBytes::from_static_str("g-kip848"))];
            RequestKind::ConsumerGroupDescribe(r)
        }
        ApiKey::DescribeGroups => {
            let mut r = DescribeGroupsRequest::default();
            r.groups = vec![GroupId(StrBytes::from_static_str("g-protocol"))];
            RequestKind::DescribeGroups(r)
        }
        ApiKey::ListGroups => RequestKind::ListGroups(ListGroupsRequest::default()),
        ApiKey::ApiVersions => {
            let mut r = ApiVersionsRequest::default();
            r.client_software_name = StrBytes::from_static_str("weir-test");
            r.client_software_version = StrBytes::from_static_str("1.0");
            RequestKind::ApiVersions(r)
        }
        ApiKey::CreateTopics => {
            let mut t = create_topics_request::CreatableTopic::default();
            t.name = TopicName(StrBytes::from_string(format!("{topic}-created")));
            t.num_partitions = 2;
            t.replication_factor = 1;
            let mut r = CreateTopicsRequest::default();
            r.topics = vec![t];
            r.timeout_ms = 1000;
            r.validate_only = true;
            RequestKind::CreateTopics(r)
        }
        ApiKey::DeleteTopics => {
            let mut r = DeleteTopicsRequest::default();
            if v >= 6 {
                let mut st = delete_topics_request::DeleteTopicState::default();
                st.name = Some(TopicName(StrBytes::from_static_str("does-not-exist")));
                r.topics = vec![st];
            } else {
                r.topic_names = vec![TopicName(StrBytes::from_static_str("does-not-exist"))];
            }
            r.timeout_ms = 1000;
            RequestKind::DeleteTopics(r)
        }
        ApiKey::DeleteRecords => {
            let mut p = delete_records_request::DeleteRecordsPartition::default();
            p.offset = 0;
            let mut t = delete_records_request::DeleteRecordsTopic::default();
            t.name = name();
            t.partitions = vec![p];
            let mut r = DeleteRecordsRequest::default();
            r.topics = vec![t];
            RequestKind::DeleteRecords(r)
        }
        ApiKey::InitProducerId => {
            let mut r = InitProducerIdRequest::default();
            r.transaction_timeout_ms = 60_000;
            r.producer_id = ProducerId(-1);
            r.producer_epoch = -1;
            RequestKind::InitProducerId(r)
        }
        ApiKey::OffsetForLeaderEpoch => {
            let mut p = offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
            p.leader_epoch = 0;
            p.current_leader_epoch = -1;
            let mut t = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
            t.topic = name();
            t.partitions = vec![p];
            let mut r = OffsetForLeaderEpochRequest::default();
            r.replica_id = BrokerId(-1);
            r.topics = vec![t];
            RequestKind::OffsetForLeaderEpoch(r)
        }
        ApiKey::DescribeConfigs => {
            let mut res = describe_configs_request::DescribeConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = StrBytes::from_string(topic.to_string());
            let mut r = DescribeConfigsRequest::default();
            r.resources = vec![res];
            RequestKind::DescribeConfigs(r)
        }
        ApiKey::AlterConfigs => {
            let mut res = alter_configs_request::AlterConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = StrBytes::from_string(topic.to_string());
            let mut r = AlterConfigsRequest::default();
            r.resources = vec![res];
            r.validate_only = true;
            RequestKind::AlterConfigs(r)
        }
        ApiKey::CreatePartitions => {
            let mut t = create_partitions_request::CreatePartitionsTopic::default();
            t.name = name();
            t.count = 3;
            let mut r = CreatePartitionsRequest::default();
            r.topics = vec![t];
            r.validate_only = true;
            RequestKind::CreatePartitions(r)
        }
        ApiKey::DeleteGroups => {
            let mut r = DeleteGroupsRequest::default();
            r.groups_names = vec![GroupId(StrBytes::from_static_str("g-none"))];
            RequestKind::DeleteGroups(r)
        }
        ApiKey::IncrementalAlterConfigs => {
            let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = StrBytes::from_string(topic.to_string());
            let mut r = IncrementalAlterConfigsRequest::default();
            r.resources = vec![res];
            r.validate_only = true;
            RequestKind::IncrementalAlterConfigs(r)
        }
        ApiKey::OffsetDelete => {
            let mut r = OffsetDeleteRequest::default();
            r.group_id = GroupId(StrBytes::from_static_str("g-none"));
            RequestKind::OffsetDelete(r)
        }
        ApiKey::DescribeCluster => RequestKind::DescribeCluster(DescribeClusterRequest::default()),
        // On a listener without SASL these answer ILLEGAL_SASL_STATE.
        ApiKey::SaslHandshake => {
            let mut r = SaslHandshakeRequest::default();
            r.mechanism = StrBytes::from_static_str("SCRAM-SHA-256");
            RequestKind::SaslHandshake(r)
        }
        ApiKey::SaslAuthenticate => {
            RequestKind::SaslAuthenticate(SaslAuthenticateRequest::default())
        }
        ApiKey::DescribeUserScramCredentials => {
            let mut r = DescribeUserScramCredentialsRequest::default();
            r.users = None;
            RequestKind::DescribeUserScramCredentials(r)
        }
        ApiKey::AlterUserScramCredentials => {
            let mut u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
            u.name = StrBytes::from_string(format!("{topic}-user"));
            u.mechanism = 1;
            u.iterations = 4096;
            u.salt = Bytes::from_static(b"salt");
            u.salted_password = Bytes::from_static(&[7; 32]);
            let mut r = AlterUserScramCredentialsRequest::default();
            r.upsertions.push(u);
            RequestKind::AlterUserScramCredentials(r)
        }
        ApiKey::CreateAcls => {
            let mut c = create_acls_request::AclCreation::default();
            c.resource_type = 2;
            c.resource_name = StrBytes::from_string(topic.to_string());
            c.resource_pattern_type = 3;
            c.principal = StrBytes::from_static_str("User:alice");
            c.host = StrBytes::from_static_str("*");
            c.operation = 3;
            c.permission_type = 3;
            let mut r = CreateAclsRequest::default();
            r.creations.push(c);
            RequestKind::CreateAcls(r)
        }
        ApiKey::DescribeAcls => {
            let mut r = DescribeAclsRequest::default();
            r.resource_type_filter = 1;
            r.pattern_type_filter = 1;
            r.operation = 1;
            r.permission_type = 1;
            RequestKind::DescribeAcls(r)
        }
        ApiKey::DeleteAcls => {
            let mut f = delete_acls_request::DeleteAclsFilter::default();
            f.resource_type_filter = 2;
            f.resource_name_filter = Some(StrBytes::from_string(topic.to_string()));
            f.pattern_type_filter = 3;
            f.operation = 1;
            f.permission_type = 1;
            let mut r = DeleteAclsRequest::default();
            r.filters.push(f);
            RequestKind::DeleteAcls(r)
        }
        ApiKey::DescribeClientQuotas => {
            let mut c = describe_client_quotas_request::ComponentData::default();
            c.entity_type = StrBytes::from_static_str("client-id");
            c.match_type = 2;
            let mut r = DescribeClientQuotasRequest::default();
            r.components.push(c);
            RequestKind::DescribeClientQuotas(r)
        }
        ApiKey::AlterClientQuotas => {
            let mut e = alter_client_quotas_request::EntityData::default();
            e.entity_type = StrBytes::from_static_str("client-id");
            e.entity_name = Some(StrBytes::from_string(format!("{topic}-client")));
            let mut op = alter_client_quotas_request::OpData::default();
            op.key = StrBytes::from_static_str("producer_byte_rate");
            op.value = 1_048_576.0;
            let mut entry = alter_client_quotas_request::EntryData::default();
            entry.entity.push(e);
            entry.ops.push(op);
            let mut r = AlterClientQuotasRequest::default();
            r.entries.push(entry);
            RequestKind::AlterClientQuotas(r)
        }
        ApiKey::ElectLeaders => {
            let mut t = elect_leaders_request::TopicPartitions::default();
            t.topic = name();
            t.partitions = vec![0];
            let mut r = ElectLeadersRequest::default();
            r.topic_partitions = Some(vec![t]);
            r.timeout_ms = 1000;
            RequestKind::ElectLeaders(r)
        }
        ApiKey::AlterPartitionReassignments => {
            let mut p = alter_partition_reassignments_request::ReassignablePartition::default();
            p.partition_index = 0;
            p.replicas = Some(vec![BrokerId(1)]);
            let mut t = alter_partition_reassignments_request::ReassignableTopic::default();
            t.name = name();
            t.partitions = vec![p];
            let mut r = AlterPartitionReassignmentsRequest::default();
            r.timeout_ms = 1000;
            r.topics = vec![t];
            RequestKind::AlterPartitionReassignments(r)
        }
        ApiKey::ListPartitionReassignments => {
            let mut r = ListPartitionReassignmentsRequest::default();
            r.timeout_ms = 1000;
            RequestKind::ListPartitionReassignments(r)
        }
        ApiKey::AddPartitionsToTxn => {
            let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
            t.name = name();
            t.partitions = vec![0];
            let mut r = AddPartitionsToTxnRequest::default();
            if v >= 4 {
                let mut x = add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default();
                x.transactional_id = txn_id();
                x.producer_id = ProducerId(1);
                x.verify_only = true;
                x.topics = vec![t];
                r.transactions = vec![x];
            } else {
                r.v3_and_below_transactional_id = txn_id();
                r.v3_and_below_producer_id = ProducerId(1);
                r.v3_and_below_topics = vec![t];
            }
            RequestKind::AddPartitionsToTxn(r)
        }
        ApiKey::AddOffsetsToTxn => {
            let mut r = AddOffsetsToTxnRequest::default();
            r.transactional_id = txn_id();
            r.producer_id = ProducerId(1);
            r.group_id = GroupId(StrBytes::from_static_str("g-txn"));
            RequestKind::AddOffsetsToTxn(r)
        }
        ApiKey::EndTxn => {
            let mut r = EndTxnRequest::default();
            r.transactional_id = txn_id();
            r.producer_id = ProducerId(1);
            RequestKind::EndTxn(r)
        }
        ApiKey::TxnOffsetCommit => {
            let mut p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
            p.committed_offset = 1;
            let mut t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
            t.name = name();
            t.partitions = vec![p];
            let mut r = TxnOffsetCommitRequest::default();
            r.transactional_id = txn_id();
            r.group_id = GroupId(StrBytes::from_static_str("g-txn"));
            r.producer_id = ProducerId(1);
            r.generation_id = -1;
            r.topics = vec![t];
            RequestKind::TxnOffsetCommit(r)
        }
        ApiKey::WriteTxnMarkers => {
            let mut t = write_txn_markers_request::WritableTxnMarkerTopic::default();
            t.name = name();
            t.partition_indexes = vec![0];
            let mut m = write_txn_markers_request::WritableTxnMarker::default();
            m.producer_id = ProducerId(1);
            m.topics = vec![t];
            let mut r = WriteTxnMarkersRequest::default();
            r.markers = vec![m];
            RequestKind::WriteTxnMarkers(r)
        }
        ApiKey::ListTransactions => {
            let mut r = ListTransactionsRequest::default();
            r.duration_filter = -1;
            RequestKind::ListTransactions(r)
        }
        ApiKey::DescribeTransactions => {
            let mut r = DescribeTransactionsRequest::default();
            r.transactional_ids = vec![txn_id()];
            RequestKind::DescribeTransactions(r)
        }
        ApiKey::DescribeProducers => {
            let mut t = describe_producers_request::TopicRequest::default();
            t.name = name();
            t.partition_indexes = vec![0];
            let mut r = DescribeProducersRequest::default();
            r.topics = vec![t];
            RequestKind::DescribeProducers(r)
        }
        ApiKey::DescribeLogDirs => {
            let mut t = describe_log_dirs_request::DescribableLogDirTopic::default();
            t.topic = name();
            t.partitions = vec![0];
            let mut r = DescribeLogDirsRequest::default();
            r.topics = Some(vec![t]);
            RequestKind::DescribeLogDirs(r)
        }
        other => panic!("no test request for {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_api_answers_at_its_lowest_and_highest_version() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut s = TcpStream::connect(broker.addrs[0]).await.unwrap();
    // The topic the requests name exists (made by Metadata's auto-creation).
    call(
        &mut s,
        ApiKey::Metadata,
        4,
        1,
        request(ApiKey::Metadata, "proto", 4),
    )
    .await;
    let mut corr = 10;
    for (api, lo, hi) in weir_broker::versions::SUPPORTED {
        for v in [*lo, *hi] {
            corr += 1;
            let resp = call(&mut s, *api, v, corr, request(*api, "proto", v)).await;
            if let ResponseKind::ApiVersions(r) = &resp {
                assert_eq!(r.error_code, 0);
                assert_eq!(r.api_keys.len(), weir_broker::versions::SUPPORTED.len());
            }
            if let ResponseKind::Produce(r) = &resp {
                assert_eq!(
                    r.responses[0].partition_responses[0].error_code, 0,
                    "produce v{v}"
                );
            }
            if let ResponseKind::Fetch(r) = &resp {
                let p = &r.responses[0].partitions[0];
                assert_eq!(p.error_code, 0, "fetch v{v}");
                assert!(
                    p.records.as_ref().is_some_and(|b| !b.is_empty()),
                    "fetch v{v} returns the produced batch"
                );
            }
        }
    }
    broker.stop().await.unwrap();
}

/// A transactional producer's first requests at the wire: FindCoordinator for its id
/// (every version that has key types) names this broker; InitProducerId bumps the epoch
/// on each call (a new producer fences the last); a transactional batch needs the request's
/// transactional id, and its partition must be in the open transaction (KIP-890 part 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_producer_finds_its_coordinator_and_is_checked_before_it_writes() {
    use kafka_protocol::ResponseError as E;
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut s = TcpStream::connect(broker.addrs[0]).await.unwrap();
    let txn = StrBytes::from_static_str("txn-protocol");
    // key_type came with v1: a v0 request can only ask for a group.
    for v in 1..=4 {
        let mut r = FindCoordinatorRequest::default();
        r.key_type = 1;
        if v >= 4 {
            r.coordinator_keys = vec![txn.clone()];
        } else {
            r.key = txn.clone();
        }
        let ResponseKind::FindCoordinator(resp) = call(
            &mut s,
            ApiKey::FindCoordinator,
            v,
            100 + v as i32,
            RequestKind::FindCoordinator(r),
        )
        .await
        else {
            unreachable!()
        };
        let (code, port) = if v >= 4 {
            let c = &resp.coordinators[0];
            (c.error_code, c.port)
        } else {
            (resp.error_code, resp.port)
        };
        assert_eq!(code, 0, "FindCoordinator v{v}");
        assert_eq!(port, broker.addrs[0].port() as i32);
    }
    let mut pid = -1;
    for v in 0..=4 {
        let mut r = InitProducerIdRequest::default();
        r.transactional_id = Some(TransactionalId(txn.clone()));
        r.transaction_timeout_ms = 60_000;
        r.producer_id = ProducerId(-1);
        r.producer_epoch = -1;
        let ResponseKind::InitProducerId(resp) = call(
            &mut s,
            ApiKey::InitProducerId,
            v,
            200 + v as i32,
            RequestKind::InitProducerId(r),
        )
        .await
        else {
            unreachable!()
        };
        assert_eq!(resp.error_code, 0, "InitProducerId v{v}");
        assert!(
            pid == -1 || resp.producer_id.0 == pid,
            "the id keeps its producer id"
        );
        pid = resp.producer_id.0;
        assert_eq!(resp.producer_epoch, v, "each init bumps the epoch");
    }
    let mut t = create_topics_request::CreatableTopic::default();
    t.name = TopicName(StrBytes::from_static_str("txn-data"));
    t.num_partitions = 1;
    t.replication_factor = 1;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 5000;
    let ResponseKind::CreateTopics(created) = call(
        &mut s,
        ApiKey::CreateTopics,
        5,
        300,
        RequestKind::CreateTopics(r),
    )
    .await
    else {
        unreachable!()
    };
    assert_eq!(created.topics[0].error_code, 0);
    let produce = |transactional_id: Option<&'static str>, correlation: i32| {
        let mut b = weir_record::BatchBuilder::new(weir_record::Compression::None, 0, usize::MAX)
            .producer(pid, 4, 0)
            .transactional(true);
        b.append(1_700_000_000_000, Some(b"k"), Some(b"v"), &[])
            .unwrap();
        let mut pd = produce_request::PartitionProduceData::default();
        pd.records = Some(Bytes::from(b.build().unwrap().bytes));
        let mut td = produce_request::TopicProduceData::default();
        td.name = TopicName(StrBytes::from_static_str("txn-data"));
        td.partition_data = vec![pd];
        let mut r = ProduceRequest::default();
        r.acks = -1;
        r.timeout_ms = 1000;
        r.transactional_id =
            transactional_id.map(|t| TransactionalId(StrBytes::from_static_str(t)));
        r.topic_data = vec![td];
        (correlation, r)
    };
    // Without the transactional id: taken, the batch would open a transaction no marker
    // closes, holding the last stable offset back for good.
    let (c, r) = produce(None, 301);
    let ResponseKind::Produce(resp) =
        call(&mut s, ApiKey::Produce, 9, c, RequestKind::Produce(r)).await
    else {
        unreachable!()
    };
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(
        p.error_code,
        E::TransactionalIdAuthorizationFailed.code(),
        "{:?}",
        p.error_message
    );
    assert!(p
        .error_message
        .as_ref()
        .is_some_and(|m| m.contains("needs the request's transactional id")));
    // With it, but before AddPartitionsToTxn: the coordinator has no open transaction.
    let (c, r) = produce(Some("txn-protocol"), 302);
    let ResponseKind::Produce(resp) =
        call(&mut s, ApiKey::Produce, 9, c, RequestKind::Produce(r)).await
    else {
        unreachable!()
    };
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(
        p.error_code,
        E::InvalidTxnState.code(),
        "{:?}",
        p.error_message
    );
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_api_versions_version_gets_the_v0_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut s = TcpStream::connect(broker.addrs[0]).await.unwrap();
    // ApiVersions v99: header v2 (flexible), as a client from the future would send.
    let mut body = BytesMut::new();
    body.extend_from_slice(&18i16.to_be_bytes());
    body.extend_from_slice(&99i16.to_be_bytes());
    body.extend_from_slice(&7i32.to_be_bytes());
    body.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    body.extend_from_slice(&[0, 0, 0]); // tagged fields, and an empty body
    let mut f = (body.len() as i32).to_be_bytes().to_vec();
    f.extend_from_slice(&body);
    s.write_all(&f).await.unwrap();
    let mut resp = read_frame(&mut s).await.unwrap();
    assert_eq!(ResponseHeader::decode_with_version(&mut resp, 0), 7);
    let ResponseKind::ApiVersions(r) =
        ResponseKind::decode(ApiKey::ApiVersions, &mut resp, 0).unwrap()
    else {
        panic!()
    };
    assert_eq!(r.error_code, 35, "UNSUPPORTED_VERSION");
    assert!(r
        .api_keys
        .iter()
        .any(|k| k.api_key == 18 && k.max_version == 4));
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_frame_closes_only_its_own_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut good = TcpStream::connect(broker.addrs[0]).await.unwrap();
    let bad_frames: Vec<Vec<u8>> = vec![
        // garbage
        vec![0, 0, 0, 12, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8],
        // oversized (beyond socket.request.max.bytes)
        (200_000_000i32).to_be_bytes().to_vec(),
        // negative size
        (-5i32).to_be_bytes().to_vec(),
        // unknown API key 9999
        {
            let mut v = vec![0, 0, 0, 10];
            v.extend_from_slice(&9999i16.to_be_bytes());
            v.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0xff, 0xff]);
            v
        },
        // a Metadata request whose body claims two billion topics
        {
            let mut v = Vec::new();
            v.extend_from_slice(&3i16.to_be_bytes());
            v.extend_from_slice(&1i16.to_be_bytes());
            v.extend_from_slice(&1i32.to_be_bytes());
            v.extend_from_slice(&(-1i16).to_be_bytes());
            v.extend_from_slice(&i32::MAX.to_be_bytes());
            let mut f = (v.len() as i32).to_be_bytes().to_vec();
            f.extend_from_slice(&v);
            f
        },
    ];
    for (i, bytes) in bad_frames.iter().enumerate() {
        let mut bad = TcpStream::connect(broker.addrs[0]).await.unwrap();
        bad.write_all(bytes).await.unwrap();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), bad.read(&mut buf))
            .await
            .expect("closed promptly");
        assert!(
            matches!(n, Ok(0) | Err(_)),
            "bad frame {i}: the connection is closed"
        );
        // The other connection did not notice.
        let resp = call(
            &mut good,
            ApiKey::ApiVersions,
            3,
            100 + i as i32,
            request(ApiKey::ApiVersions, "x", 3),
        )
        .await;
        assert!(matches!(resp, ResponseKind::ApiVersions(_)));
    }
    // A truncated frame: the size says 100 bytes, 10 arrive, then the client goes away.
    let mut bad = TcpStream::connect(broker.addrs[0]).await.unwrap();
    bad.write_all(&[0, 0, 0, 100, 0, 18, 0, 3, 0, 0, 0, 1, 0, 0])
        .await
        .unwrap();
    drop(bad);
    let resp = call(
        &mut good,
        ApiKey::ApiVersions,
        0,
        200,
        request(ApiKey::ApiVersions, "x", 3),
    )
    .await;
    assert!(matches!(resp, ResponseKind::ApiVersions(_)));
    broker.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_and_acks_0_gets_no_answer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut s = TcpStream::connect(broker.addrs[0]).await.unwrap();
    call(
        &mut s,
        ApiKey::Metadata,
        9,
        1,
        request(ApiKey::Metadata, "pipe", 9),
    )
    .await;
    let mut all = Vec::new();
    for corr in 0..50 {
        let (api, v) = if corr % 2 == 0 {
            (ApiKey::Produce, 7)
        } else {
            (ApiKey::ListOffsets, 5)
        };
        let mut req = request(api, "pipe", v);
        if corr == 10 {
            if let RequestKind::Produce(p) = &mut req {
                p.acks = 0; // no response for this one
            }
        }
        all.extend_from_slice(&frame(api, v, corr, &req));
    }
    s.write_all(&all).await.unwrap();
    for corr in (0..50).filter(|c| *c != 10) {
        let mut f = read_frame(&mut s).await.unwrap();
        let v = if corr % 2 == 0 {
            ProduceResponse::header_version_of(7)
        } else {
            0
        };
        assert_eq!(ResponseHeader::decode_with_version(&mut f, v), corr);
    }
    broker.stop().await.unwrap();
}

/// Requests small and large (up to 900 KiB, past every read buffer), pipelined and written
/// in pieces of every size with pauses between: each arrives whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_written_in_pieces_arrive_whole() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut s = TcpStream::connect(broker.addrs[0]).await.unwrap();
    call(
        &mut s,
        ApiKey::Metadata,
        9,
        1,
        request(ApiKey::Metadata, "pieces", 9),
    )
    .await;
    let sizes = [10usize, 70_000, 1, 900_000, 65_530, 300, 131_072, 5];
    let mut all = Vec::new();
    for (corr, size) in sizes.iter().enumerate() {
        let mut b = weir_record::BatchBuilder::new(weir_record::Compression::None, 0, usize::MAX);
        let value = vec![corr as u8; *size];
        b.append(1_700_000_000_000, None, Some(&value), &[])
            .unwrap();
        let mut req = request(ApiKey::Produce, "pieces", 7);
        if let RequestKind::Produce(p) = &mut req {
            p.topic_data[0].partition_data[0].records = Some(Bytes::from(b.build().unwrap().bytes));
        }
        all.extend_from_slice(&frame(ApiKey::Produce, 7, corr as i32, &req));
    }
    let mut rng = fastrand::Rng::with_seed(3);
    let mut rest = &all[..];
    while !rest.is_empty() {
        let n = rng.usize(1..=rest.len().min(200_000));
        s.write_all(&rest[..n]).await.unwrap();
        rest = &rest[n..];
        if rng.bool() {
            tokio::time::sleep(Duration::from_millis(rng.u64(1..20))).await;
        }
    }
    for (corr, _) in sizes.iter().enumerate() {
        let mut f = read_frame(&mut s).await.unwrap();
        let v = ProduceResponse::header_version_of(7);
        assert_eq!(ResponseHeader::decode_with_version(&mut f, v), corr as i32);
        let resp = ProduceResponse::decode(&mut f, 7).unwrap();
        let p = &resp.responses[0].partition_responses[0];
        assert_eq!((p.error_code, p.base_offset), (0, corr as i64));
    }
    broker.stop().await.unwrap();
}

trait HeaderOf {
    fn header_version_of(v: i16) -> i16;
}
impl HeaderOf for ProduceResponse {
    fn header_version_of(v: i16) -> i16 {
        ApiKey::Produce.response_header_version(v)
    }
}

/// The fuzz target `request_decode` starts from these: a sensible request of every API at
/// both ends of its version range, as a client frames it (without the size prefix). Each
/// must decode to the request it was made from; the corpus in `fuzz/corpus/request_decode`
/// (these seeds, and what the fuzzer found worth keeping) must decode without a panic.
#[test]
fn requests_decode_as_sent_and_the_fuzz_corpus_replays() {
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/request_decode");
    let mut corr = 0;
    for (api, lo, hi) in weir_broker::versions::SUPPORTED {
        for v in [*lo, *hi] {
            corr += 1;
            let body = request(*api, "fuzz", v);
            let frame = frame(*api, v, corr, &body).slice(4..);
            match weir_broker::wire::decode_request(frame.clone()) {
                Ok(weir_broker::wire::Decoded::Request {
                    api_key,
                    version,
                    correlation_id,
                    request,
                    ..
                }) => {
                    assert_eq!((api_key, version, correlation_id), (*api, v, corr));
                    // Fields a version lacks decode to defaults: compare what each says
                    // on the wire at this version.
                    let (mut sent, mut got) = (BytesMut::new(), BytesMut::new());
                    body.encode(&mut sent, v).unwrap();
                    request.encode(&mut got, v).unwrap();
                    assert_eq!(got, sent, "{api:?} v{v}");
                }
                other => panic!("{api:?} v{v}: {other:?}"),
            }
            let seed = corpus.join(format!("seed-{api:?}-v{v}"));
            if std::env::var_os("WEIR_WRITE_FUZZ_SEEDS").is_some() {
                std::fs::write(&seed, &frame).unwrap();
            }
        }
    }
    let mut files = 0;
    for entry in std::fs::read_dir(&corpus).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        let _ = weir_broker::wire::decode_request(Bytes::from(data));
        files += 1;
    }
    assert!(
        files >= corr as usize - 1, // OffsetDelete has one version: one seed for both ends
        "the corpus has {files} files"
    );
    // Short, unknown and unsupported frames are errors, and ApiVersions in a version
    // from the future is the one exception Kafka answers.
    use weir_broker::wire::{decode_request, Decoded};
    assert!(decode_request(Bytes::from_static(&[0, 18, 0])).is_err());
    assert!(decode_request(Bytes::from_static(&[0x7f, 0, 0, 0, 0, 0, 0, 1])).is_err());
    assert!(decode_request(Bytes::from_static(&[0, 0, 0x7f, 0, 0, 0, 0, 1])).is_err());
    assert!(matches!(
        decode_request(Bytes::from_static(&[0, 18, 0x7f, 0, 0, 0, 0, 9])),
        Ok(Decoded::UnsupportedApiVersions { correlation_id: 9 })
    ));
}

/// Kafka's authorization failures: topic, group, cluster, transactional id.
const AUTHORIZATION_FAILURES: [i16; 4] = [29, 30, 31, 53];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_refuses_a_client_the_acls_do_not_allow() {
    let dir = tempfile::tempdir().unwrap();
    let mut props = std::collections::BTreeMap::new();
    props.insert("listeners".into(), "PLAINTEXT://127.0.0.1:0".into());
    props.insert("log.dirs".into(), dir.path().display().to_string());
    props.insert("offsets.topic.num.partitions".into(), "2".into());
    props.insert(
        "authorizer.class.name".into(),
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
    );
    // Someone else may do everything; this client (User:ANONYMOUS) may do nothing.
    props.insert("super.users".into(), "User:admin".into());
    let broker = RunningBroker::start(BrokerConfig::from_properties(props).unwrap())
        .await
        .unwrap();
    broker
        .broker
        .create_topic("proto", 1, Default::default(), false)
        .unwrap();
    let mut s = TcpStream::connect(broker.addrs[0]).await.unwrap();
    let mut corr = 0;
    for (api, lo, hi) in weir_broker::versions::SUPPORTED {
        // Asking what the broker speaks, logging in, and DescribeCluster (its brokers,
        // as Metadata's) need no ACL in Kafka either.
        if matches!(
            api,
            ApiKey::ApiVersions
                | ApiKey::SaslHandshake
                | ApiKey::SaslAuthenticate
                | ApiKey::DescribeCluster
        ) {
            continue;
        }
        for v in [*lo, *hi] {
            corr += 1;
            let resp = call(&mut s, *api, v, corr, request(*api, "proto", v)).await;
            let shown = format!("{resp:?}");
            let refused = AUTHORIZATION_FAILURES
                .iter()
                .any(|c| shown.contains(&format!("error_code: {c},")));
            // Listing groups or transactions is not refused: the client is shown none. Nor
            // is DescribeLogDirs below v3, which has no error to say so (as in Kafka).
            let shows_nothing = matches!(&resp, ResponseKind::ListGroups(r) if r.groups.is_empty())
                || matches!(&resp, ResponseKind::ListTransactions(r) if r.transaction_states.is_empty())
                || matches!(&resp, ResponseKind::DescribeLogDirs(r) if r.results.is_empty());
            assert!(
                refused || shows_nothing,
                "{api:?} v{v} served a client with no ACLs: {shown}"
            );
            assert!(
                !shown.contains("records: Some(b\"\\0"),
                "{api:?} v{v} returned records"
            );
        }
    }
    broker.stop().await.unwrap();
}

/// Before SASL authentication a frame larger than `sasl.server.max.receive.size` closes
/// the connection, as in Kafka, before the broker holds anything for it; a small one is
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_before_sasl_authentication_is_bounded_by_sasl_server_max_receive_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut props = std::collections::BTreeMap::new();
    props.insert(
        "listeners".to_string(),
        "SASL_PLAINTEXT://127.0.0.1:0".to_string(),
    );
    props.insert("log.dirs".to_string(), dir.path().display().to_string());
    props.insert(
        "sasl.server.max.receive.size".to_string(),
        "1024".to_string(),
    );
    let broker = RunningBroker::start(BrokerConfig::from_properties(props).unwrap())
        .await
        .unwrap();
    let addr = broker.addrs[0];

    // A size prefix over the bound, and nothing else: closed at once.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&2048i32.to_be_bytes()).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the broker should have closed the connection, got {read:?}"
    );

    // ApiVersions fits, and is answered.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let resp = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        1,
        RequestKind::ApiVersions(ApiVersionsRequest::default()),
    )
    .await;
    assert!(matches!(resp, ResponseKind::ApiVersions(r) if r.error_code == 0));
    broker.stop().await.unwrap();
}

/// A creation a crash interrupted leaves directories that the next start removes: the
/// journal said which topic was being made, and its id. A topic whose creation completed
/// loads whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_after_a_crash_removes_what_an_interrupted_creation_made() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    // As a crash in the middle of making "half", after "whole" was made, would leave them.
    let (whole, half) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let b64 = weir_log::checkpoint::uuid_to_base64;
    let mut journal =
        std::fs::File::create(dir.path().join(weir_broker::topics::JOURNAL_FILE)).unwrap();
    writeln!(
        journal,
        r#"{{"op":"intent","topic":"whole","id":"{0}","from":0,"to":3}}
{{"op":"create","topic":"whole","id":"{0}","partitions":3}}
{{"op":"intent","topic":"half","id":"{1}","from":0,"to":5}}"#,
        b64(whole),
        b64(half)
    )
    .unwrap();
    drop(journal);
    for p in 0..2 {
        let d = dir.path().join(format!("half-{p}"));
        std::fs::create_dir_all(&d).unwrap();
        weir_log::checkpoint::write_partition_metadata(&d.join("partition.metadata"), half)
            .unwrap();
    }
    // One whose partition.metadata was not written yet.
    std::fs::create_dir_all(dir.path().join("half-2")).unwrap();

    let broker = start(dir.path()).await;
    assert!(broker.broker.topic("half").is_none());
    for p in 0..3 {
        assert!(!dir.path().join(format!("half-{p}")).exists(), "half-{p}");
    }
    let t = broker.broker.topic("whole").unwrap();
    assert_eq!((t.id, t.partitions.len()), (whole, 3));
    // The journal was folded into the snapshot.
    assert_eq!(
        std::fs::read(dir.path().join(weir_broker::topics::JOURNAL_FILE)).unwrap(),
        b""
    );
    broker.stop().await.unwrap();
}

/// `max.connections.per.ip.overrides` gives an address its own limit: with
/// `max.connections.per.ip=2` and an override of 5 for 127.0.0.1, five connections from it
/// are served and the sixth is closed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_override_replaces_max_connections_per_ip() {
    let dir = tempfile::tempdir().unwrap();
    let mut props = std::collections::BTreeMap::new();
    props.insert(
        "listeners".to_string(),
        "PLAINTEXT://127.0.0.1:0".to_string(),
    );
    props.insert("log.dirs".to_string(), dir.path().display().to_string());
    props.insert("max.connections.per.ip".to_string(), "2".to_string());
    props.insert(
        "max.connections.per.ip.overrides".to_string(),
        "localhost-of-nobody.invalid:1,127.0.0.1:5".to_string(),
    );
    // A host that does not resolve stops the start with its name.
    let e = match RunningBroker::start(BrokerConfig::from_properties(props.clone()).unwrap()).await
    {
        Err(e) => e,
        Ok(_) => panic!("a host that does not resolve was accepted"),
    };
    assert!(e.contains("localhost-of-nobody.invalid"), "{e}");
    props.insert(
        "max.connections.per.ip.overrides".to_string(),
        "127.0.0.1:5".to_string(),
    );
    let broker = RunningBroker::start(BrokerConfig::from_properties(props).unwrap())
        .await
        .unwrap();
    let mut open = Vec::new();
    for i in 0..5 {
        let mut s = TcpStream::connect(broker.addrs[0]).await.unwrap();
        let resp = call(
            &mut s,
            ApiKey::ApiVersions,
            3,
            i,
            RequestKind::ApiVersions(ApiVersionsRequest::default()),
        )
        .await;
        assert!(matches!(resp, ResponseKind::ApiVersions(r) if r.error_code == 0));
        open.push(s);
    }
    let mut sixth = TcpStream::connect(broker.addrs[0]).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), sixth.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the sixth connection should have been closed, got {read:?}"
    );
    drop(open);
    broker.stop().await.unwrap();
}

/// The broker's partition limit holds across creating, growing and deleting topics:
/// `max.broker.partitions=5`, with the offsets topic's 2 kept free until it exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partition_limit_counts_growth_and_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let mut props = std::collections::BTreeMap::new();
    props.insert("listeners".into(), "PLAINTEXT://127.0.0.1:0".into());
    props.insert("log.dirs".into(), dir.path().display().to_string());
    props.insert("offsets.topic.num.partitions".into(), "2".into());
    props.insert("max.broker.partitions".into(), "5".into());
    let running = RunningBroker::start(BrokerConfig::from_properties(props).unwrap())
        .await
        .unwrap();
    let b = running.broker.clone();
    let free = &mut |_: &str, _: usize| Ok(());
    b.create_topic("a", 2, Default::default(), false).unwrap();
    b.create_partitions("a", 3, false, free).unwrap();
    let e = b.create_partitions("a", 4, false, free).unwrap_err();
    assert_eq!(e.code, 44, "{}", e.message);
    assert!(
        e.message.contains("max.broker.partitions is 5"),
        "{}",
        e.message
    );
    let e = b
        .create_topic("b", 1, Default::default(), false)
        .unwrap_err();
    assert_eq!(e.code, 44, "{}", e.message);
    b.delete_topic("a", free).unwrap();
    b.create_topic("b", 3, Default::default(), false).unwrap();
    assert_eq!(b.topic("b").unwrap().partitions.len(), 3);
    running.stop().await.unwrap();
}

/// Metadata v12 names a topic by its id when the id is set, whatever the name says (the Java
/// Admin client's describeTopics by id sends an empty name beside it); an id no topic has is
/// UNKNOWN_TOPIC_ID, answered with that id and no name, as Kafka answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_names_a_topic_by_its_id_when_one_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let topic = broker
        .broker
        .create_topic("by-id", 2, Default::default(), false)
        .unwrap();
    let mut s = TcpStream::connect(broker.addrs[0]).await.unwrap();
    let unknown = uuid::Uuid::from_u128(0x1234);
    let mut req = MetadataRequest::default();
    for id in [topic.id, unknown] {
        let mut t = metadata_request::MetadataRequestTopic::default();
        t.topic_id = id;
        t.name = Some(TopicName(StrBytes::from_static_str("")));
        req.topics.get_or_insert_with(Vec::new).push(t);
    }
    let ResponseKind::Metadata(resp) =
        call(&mut s, ApiKey::Metadata, 12, 1, RequestKind::Metadata(req)).await
    else {
        panic!("not a Metadata response")
    };
    let known = &resp.topics[0];
    assert_eq!(known.error_code, 0);
    assert_eq!(known.topic_id, topic.id);
    assert_eq!(known.name.as_ref().map(|n| n.as_str()), Some("by-id"));
    assert_eq!(known.partitions.len(), 2);
    let missing = &resp.topics[1];
    assert_eq!(missing.error_code, 100, "UNKNOWN_TOPIC_ID");
    assert_eq!(missing.topic_id, unknown);
    assert_eq!(missing.name, None);
    broker.stop().await.unwrap();
}

fn group_config_op(group: &str, key: &str, value: &str) -> RequestKind {
    let mut c = incremental_alter_configs_request::AlterableConfig::default();
    c.name = StrBytes::from_string(key.to_string());
    c.config_operation = 0; // SET
    c.value = Some(StrBytes::from_string(value.to_string()));
    let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
    res.resource_type = 32; // GROUP
    res.resource_name = StrBytes::from_string(group.to_string());
    res.configs = vec![c];
    let mut r = IncrementalAlterConfigsRequest::default();
    r.resources = vec![res];
    RequestKind::IncrementalAlterConfigs(r)
}

async fn alter_group_config(s: &mut TcpStream, corr: i32, key: &str, value: &str) -> (i16, String) {
    let ResponseKind::IncrementalAlterConfigs(resp) = call(
        s,
        ApiKey::IncrementalAlterConfigs,
        1,
        corr,
        group_config_op("g-timing", key, value),
    )
    .await
    else {
        panic!("not an IncrementalAlterConfigs response")
    };
    let r = &resp.responses[0];
    let message = r.error_message.as_ref().map(|m| m.to_string());
    (r.error_code, message.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_own_heartbeat_interval_is_checked_kept_and_given_to_its_members() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    broker
        .broker
        .create_topic("timing", 1, Default::default(), false)
        .unwrap();
    let mut s = TcpStream::connect(broker.addrs[0]).await.unwrap();

    // Below the broker's group.consumer.min.heartbeat.interval.ms (5000): refused as Kafka does.
    let (code, message) =
        alter_group_config(&mut s, 1, "consumer.heartbeat.interval.ms", "1000").await;
    assert_eq!(code, 40, "INVALID_CONFIG: {message}");
    assert!(
        message.contains("consumer.heartbeat.interval.ms"),
        "{message}"
    );
    let (code, message) =
        alter_group_config(&mut s, 2, "consumer.heartbeat.interval.ms", "7000").await;
    assert_eq!(code, 0, "{message}");

    let mut hb = ConsumerGroupHeartbeatRequest::default();
    hb.group_id = GroupId(StrBytes::from_static_str("g-timing"));
    hb.member_id = StrBytes::from_static_str("m-timing");
    hb.member_epoch = 0;
    hb.rebalance_timeout_ms = 1000;
    hb.subscribed_topic_names = Some(vec![TopicName(StrBytes::from_static_str("timing"))]);
    hb.topic_partitions = Some(Vec::new());
    let ResponseKind::ConsumerGroupHeartbeat(resp) = call(
        &mut s,
        ApiKey::ConsumerGroupHeartbeat,
        0,
        3,
        RequestKind::ConsumerGroupHeartbeat(hb),
    )
    .await
    else {
        panic!("not a ConsumerGroupHeartbeat response")
    };
    assert_eq!(resp.error_code, 0);
    assert_eq!(resp.heartbeat_interval_ms, 7000);
    drop(s);
    broker.stop().await.unwrap();

    // The setting outlives a restart and is described as the group's own.
    let broker = start(dir.path()).await;
    let mut s = TcpStream::connect(broker.addrs[0]).await.unwrap();
    let mut res = describe_configs_request::DescribeConfigsResource::default();
    res.resource_type = 32;
    res.resource_name = StrBytes::from_static_str("g-timing");
    res.configuration_keys = None; // every key
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![res];
    let ResponseKind::DescribeConfigs(resp) = call(
        &mut s,
        ApiKey::DescribeConfigs,
        4,
        4,
        RequestKind::DescribeConfigs(req),
    )
    .await
    else {
        panic!("not a DescribeConfigs response")
    };
    let result = &resp.results[0];
    assert_eq!(result.error_code, 0);
    let entry = result
        .configs
        .iter()
        .find(|c| c.name.as_str() == "consumer.heartbeat.interval.ms")
        .expect("consumer.heartbeat.interval.ms is described");
    assert_eq!(entry.value.as_ref().map(|v| v.as_str()), Some("7000"));
    assert_eq!(entry.config_source, 8, "DYNAMIC_GROUP_CONFIG");
    let session = result
        .configs
        .iter()
        .find(|c| c.name.as_str() == "consumer.session.timeout.ms")
        .expect("consumer.session.timeout.ms is described");
    assert_eq!(session.value.as_ref().map(|v| v.as_str()), Some("45000"));
    assert_eq!(session.config_source, 5, "DEFAULT_CONFIG");
    broker.stop().await.unwrap();
}
