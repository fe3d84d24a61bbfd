//! # weir-security
//!
//! Who a Kafka client is, what it may do, and how fast: Kafka's security model on the
//! broker's side, with Kafka's keys and files of state, and nothing that knows sockets.
//!
//! - [`sasl`]: SASL/PLAIN and SCRAM-SHA-256/512 (the users' credentials, and one
//!   connection's exchange as a [`Session`]); [`tls`]: `SSL` listeners from Kafka's
//!   `ssl.*` keys; [`principal`]: the principal a client certificate names.
//! - [`acl`]: Kafka's ACLs and the [`Authorizer`] that checks requests against them.
//! - [`quota`]: client byte-rate quotas and their throttling.
//! - [`state_file`]: the small JSON files these keep in the data directory.
//!
//! The broker calls into these per request; `weir users` and `weir acls` use the same
//! fronts on a stopped broker's data directory.

pub mod acl;
pub mod principal;
pub mod quota;
pub mod sasl;
pub mod state_file;
pub mod tls;

pub use acl::{Authorizer, AuthorizerConfig};
pub use quota::Quotas;
pub use sasl::{Credential, SaslListener, Scram, Session, Users};
