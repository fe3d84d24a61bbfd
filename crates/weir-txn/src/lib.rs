//! # weir-txn
//!
//! Weir's transaction coordinator (Kafka's KIP-98 design): the states a transactional id
//! moves through, the bytes of its records in `__transaction_state` in Kafka's schemas, and
//! the coordinator that serves InitProducerId, AddPartitionsToTxn and EndTxn, writes the
//! markers, aborts what timed out and reloads its partitions after a restart. It touches
//! no log or socket itself: the broker gives it a [`TxnHost`].
//!
//! - [`state`]: `TxnState`, its persisted ids and Kafka's allowed transitions.
//! - [`records`]: TransactionLogKey/Value (value versions 0 and 1), and the partition of
//!   `__transaction_state` a transactional id belongs to.
//! - [`metadata`]: `TxnMetadata`, changed only by transitions prepared, written and then
//!   applied; and the cache rebuilt from a `__transaction_state` partition.
//! - [`coordinator`]: [`TxnCoordinator`], the requests, the markers and the timers.

pub mod coordinator;
pub mod metadata;
pub mod records;
pub mod state;

pub use coordinator::{ListFilter, ListedTxn, Markers, TxnConfig, TxnCoordinator, TxnHost};
pub use metadata::{TxnMetadata, TxnTransit};
pub use records::{partition_for, TxnLogValue};
pub use state::TxnState;
