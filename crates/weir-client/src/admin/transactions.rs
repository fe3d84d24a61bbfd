//! Transactions through the admin client, as `kafka-transactions.sh` sees them: the
//! transactions every coordinator knows (ListTransactions, to every broker), one
//! transactional id's state (DescribeTransactions, to its coordinator), and the producers
//! a partition's leader knows with their open transactions (DescribeProducers, KIP-664).
//! Read-only: nothing here changes a transaction.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    ListTransactionsRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::ResponseError as E;

use super::{
    by_topic, err, match_answer, partition_item, sb, with_context, Admin, Route, TopicPartitionKey,
};
use crate::cluster::CoordinatorKind;
use crate::error::{ClientError, Result};

const LIST_TRANSACTIONS: (i16, i16) = (0, 1);
const DESCRIBE_TRANSACTIONS: (i16, i16) = (0, 0);
const DESCRIBE_PRODUCERS: (i16, i16) = (0, 0);

/// A transactional id as ListTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    pub transactional_id: String,
    /// The broker that coordinates it.
    pub coordinator: i32,
    pub producer_id: i64,
    /// Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead
    /// or PrepareEpochFence.
    pub state: String,
}

/// A transactional id as DescribeTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    pub transactional_id: String,
    /// The broker that answered, if the client knows its id.
    pub coordinator: Option<i32>,
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// When the open transaction began (-1 when none is open).
    pub start_time_ms: i64,
    /// The partitions of the open transaction.
    pub partitions: Vec<TopicPartitionKey>,
}

/// A producer a partition's leader knows (DescribeProducers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerDescription {
    pub producer_id: i64,
    pub producer_epoch: i32,
    /// -1 before the first sequenced batch.
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// The coordinator epoch of its last transaction marker (-1 if none).
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction on this partition, if one is open.
    pub current_txn_start_offset: Option<i64>,
}

/// "transactional id 't'", for errors about a transactional id.
fn txn_item(id: &String) -> String {
    format!("transactional id '{id}'")
}

impl Admin {
    /// The transactions every broker coordinates, by transactional id. Empty filters
    /// match everything; `min_duration_ms` keeps transactions open at least that long
    /// (brokers that only speak ListTransactions v0 cannot filter so, and are refused).
    pub async fn list_transactions(
        &self,
        states: &[String],
        producer_ids: &[i64],
        min_duration_ms: Option<i64>,
    ) -> Result<Vec<TransactionListing>> {
        let m = self
            .retrying("listing transactions", || {
                self.cluster.refresh(Some(&[]), false)
            })
            .await?;
        let mut ids: Vec<i32> = m.brokers.keys().copied().collect();
        ids.sort();
        let lowest = if min_duration_ms.is_some() { 1 } else { 0 };
        let mut out: BTreeMap<String, TransactionListing> = BTreeMap::new();
        for id in ids {
            let build = |_| {
                let mut req = ListTransactionsRequest::default();
                req.state_filters = states.iter().map(|s| sb(s)).collect();
                req.producer_id_filters = producer_ids.iter().map(|p| ProducerId(*p)).collect();
                req.duration_filter = min_duration_ms.unwrap_or(-1);
                req
            };
            let resp = self
                .send(
                    "listing transactions",
                    Route::Node(id),
                    (lowest, LIST_TRANSACTIONS.1),
                    build,
                    |r| vec![r.error_code],
                )
                .await?;
            err(resp.error_code, None)?;
            if let Some(unknown) = resp.unknown_state_filters.first() {
                return Err(ClientError::kafka(
                    E::InvalidRequest.code(),
                    Some(format!(
                        "'{unknown}' is not a transaction state (Empty, Ongoing, PrepareCommit, \
                     PrepareAbort, CompleteCommit, CompleteAbort, Dead, PrepareEpochFence)"
                    )),
                ));
            }
            for t in resp.transaction_states {
                out.insert(
                    t.transactional_id.to_string(),
                    TransactionListing {
                        transactional_id: t.transactional_id.to_string(),
                        coordinator: id,
                        producer_id: t.producer_id.0,
                        state: t.transaction_state.to_string(),
                    },
                );
            }
        }
        Ok(out.into_values().collect())
    }

    /// One transactional id's state, from its coordinator. An id the coordinator does not
    /// know fails with TRANSACTIONAL_ID_NOT_FOUND.
    pub async fn describe_transaction(&self, id: &str) -> Result<TransactionDescription> {
        let build = |_| {
            let mut req = DescribeTransactionsRequest::default();
            req.transactional_ids = vec![TransactionalId(sb(id))];
            req
        };
        let resp = self
            .send(
                "describing a transaction",
                Route::TxnCoordinator(id),
                DESCRIBE_TRANSACTIONS,
                build,
                |r| r.transaction_states.iter().map(|s| s.error_code).collect(),
            )
            .await?;
        let coordinator = self
            .cluster
            .known_coordinator(CoordinatorKind::Transaction, id);
        let answered = resp.transaction_states.into_iter().map(|s| {
            let key = s.transactional_id.to_string();
            let r = err(s.error_code, None)
                .map_err(|e| with_context(e, &txn_item(&key)))
                .map(|()| TransactionDescription {
                    transactional_id: key.clone(),
                    coordinator,
                    state: s.transaction_state.to_string(),
                    producer_id: s.producer_id.0,
                    producer_epoch: s.producer_epoch,
                    timeout_ms: s.transaction_timeout_ms,
                    start_time_ms: s.transaction_start_time_ms,
                    partitions: s
                        .topics
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.to_string(), *p)))
                        .collect(),
                });
            (key, r)
        });
        match_answer("DescribeTransactions", id.to_string(), answered, txn_item)
    }

    /// The producers each partition's leader knows, by producer id.
    pub async fn describe_producers(
        &self,
        partitions: &[TopicPartitionKey],
    ) -> Result<Vec<(TopicPartitionKey, Result<Vec<ProducerDescription>>)>> {
        let build = |share: &[(TopicPartitionKey, ())]| {
            let mut req = DescribeProducersRequest::default();
            req.topics = by_topic(share.iter().map(|(tp, ())| (tp, ())), |p, ()| p)
                .into_iter()
                .map(|(t, ps)| {
                    let mut r = TopicRequest::default();
                    r.name = TopicName(sb(t));
                    r.partition_indexes = ps;
                    r
                })
                .collect();
            req
        };
        let answers = |resp: &DescribeProducersResponse| {
            resp.topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(|p| {
                        let key = (t.name.to_string(), p.partition_index);
                        let r = err(p.error_code, p.error_message.as_ref())
                            .map_err(|e| with_context(e, &partition_item(&key)))
                            .map(|()| {
                                p.active_producers
                                    .iter()
                                    .map(|s| ProducerDescription {
                                        producer_id: s.producer_id.0,
                                        producer_epoch: s.producer_epoch,
                                        last_sequence: s.last_sequence,
                                        last_timestamp: s.last_timestamp,
                                        coordinator_epoch: s.coordinator_epoch,
                                        current_txn_start_offset: (s.current_txn_start_offset >= 0)
                                            .then_some(s.current_txn_start_offset),
                                    })
                                    .collect()
                            });
                        (key, r)
                    })
                })
                .collect()
        };
        self.to_leaders(
            "describing producers",
            "DescribeProducers",
            DESCRIBE_PRODUCERS,
            partitions.iter().map(|tp| (tp, ())),
            build,
            answers,
        )
        .await
    }
}
