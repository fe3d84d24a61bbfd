//! # weir-txn
//!
//! The beginnings of Weir's transaction coordinator (Kafka's KIP-98 design): the states a
//! transactional id moves through and the bytes of its records in `__transaction_state`,
//! in Kafka's schemas. The coordinator itself (InitProducerId with a transactional id,
//! AddPartitionsToTxn, EndTxn, markers, timeouts, loading after a restart) builds on these
//! and is not here yet; until it is, the broker refuses transactional ids at once.
//!
//! - [`state`]: `TxnState`, its persisted ids and Kafka's allowed transitions.
//! - [`records`]: TransactionLogKey/Value (value versions 0 and 1), and the partition of
//!   `__transaction_state` a transactional id belongs to.
//! - [`metadata`]: `TxnMetadata`, changed only by transitions prepared, written and then
//!   applied; and the cache rebuilt from a `__transaction_state` partition.

pub mod metadata;
pub mod records;
pub mod state;

pub use metadata::{TxnMetadata, TxnTransit};
pub use records::{partition_for, TxnLogValue};
pub use state::TxnState;
