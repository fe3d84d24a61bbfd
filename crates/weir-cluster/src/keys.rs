//! Where each piece of the cluster's metadata lives in etcd. The layout follows the
//! znodes of Kafka's ZooKeeper mode, so a Kafka engineer finds their way at once:
//!
//! ```text
//! {prefix}/cluster/id                                   the cluster id
//! {prefix}/brokers/ids/{id}                             a live broker (under its lease)
//! {prefix}/controller                                   the controller (under its lease)
//! {prefix}/controller_epoch                             how many controllers there have been
//! {prefix}/brokers/topics/{topic}                       a topic: id and replica assignment
//! {prefix}/brokers/topics/{topic}/partitions/{p}/state  leader, leader epoch, ISR
//! {prefix}/config/topics/{topic}                        a topic's config overrides
//! {prefix}/config/brokers/{id | <default>}              dynamic broker configs
//! {prefix}/config/groups                                every group's configs (one document)
//! {prefix}/security/{acls | users | quotas}             ACLs, SCRAM credentials, quotas
//! {prefix}/latest_producer_id_block                     producer ids handed out so far
//! {prefix}/admin/preferred_replica_election             a pending preferred election
//! ```
//!
//! Topic names cannot hold `/` (Kafka's rules), so every key parses back unambiguously.
//! Only names: nothing here reads or writes etcd.

/// The dynamic broker config entity that holds every broker's defaults (Kafka's name).
pub const DEFAULT_BROKER_ENTITY: &str = "<default>";

/// The cluster-wide state documents kept whole, one key each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Document {
    Acls,
    Users,
    Quotas,
    /// Group configs (KIP-848's GROUP config resources), all groups in one document: few
    /// groups set any, and a group id may hold any character, a `/` among them.
    GroupConfigs,
}

impl Document {
    pub const ALL: [Document; 4] = [
        Document::Acls,
        Document::Users,
        Document::Quotas,
        Document::GroupConfigs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Document::Acls => "acls",
            Document::Users => "users",
            Document::Quotas => "quotas",
            Document::GroupConfigs => "group configs",
        }
    }

    /// Where the document lives under the prefix.
    fn path(self) -> &'static str {
        match self {
            Document::Acls => "security/acls",
            Document::Users => "security/users",
            Document::Quotas => "security/quotas",
            Document::GroupConfigs => "config/groups",
        }
    }

    fn from_path(path: &str) -> Option<Document> {
        Document::ALL.into_iter().find(|d| d.path() == path)
    }
}

/// What a key of the layout names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    ClusterId,
    Broker(i32),
    Controller,
    ControllerEpoch,
    Topic(String),
    PartitionState(String, i32),
    TopicConfig(String),
    BrokerConfig(String),
    Document(Document),
    ProducerIdBlock,
    PreferredElection,
}

/// The keys of one cluster: the layout under its prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// `prefix` is empty or `/a/b` (see `EtcdConnect`).
    pub fn new(prefix: &str) -> Keys {
        debug_assert!(prefix.is_empty() || (prefix.starts_with('/') && !prefix.ends_with('/')));
        Keys {
            prefix: prefix.to_string(),
        }
    }

    /// Every key of the cluster starts with this (the prefix and a slash).
    pub fn root(&self) -> String {
        format!("{}/", self.prefix)
    }

    pub fn cluster_id(&self) -> String {
        format!("{}/cluster/id", self.prefix)
    }

    pub fn broker(&self, id: i32) -> String {
        format!("{}/brokers/ids/{id}", self.prefix)
    }

    pub fn controller(&self) -> String {
        format!("{}/controller", self.prefix)
    }

    pub fn controller_epoch(&self) -> String {
        format!("{}/controller_epoch", self.prefix)
    }

    pub fn topic(&self, topic: &str) -> String {
        format!("{}/brokers/topics/{topic}", self.prefix)
    }

    /// The prefix of a topic's partition states (and only theirs: the topic's own key has
    /// no trailing slash).
    pub fn partition_states(&self, topic: &str) -> String {
        format!("{}/brokers/topics/{topic}/partitions/", self.prefix)
    }

    pub fn partition_state(&self, topic: &str, partition: i32) -> String {
        format!("{}{partition}/state", self.partition_states(topic))
    }

    pub fn topic_config(&self, topic: &str) -> String {
        format!("{}/config/topics/{topic}", self.prefix)
    }

    /// `entity` is a broker id or `DEFAULT_BROKER_ENTITY`.
    pub fn broker_config(&self, entity: &str) -> String {
        format!("{}/config/brokers/{entity}", self.prefix)
    }

    pub fn document(&self, doc: Document) -> String {
        format!("{}/{}", self.prefix, doc.path())
    }

    pub fn producer_id_block(&self) -> String {
        format!("{}/latest_producer_id_block", self.prefix)
    }

    pub fn preferred_election(&self) -> String {
        format!("{}/admin/preferred_replica_election", self.prefix)
    }

    /// What `key` names, if it is a key of this layout.
    pub fn parse(&self, key: &str) -> Option<Key> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        if let Some(doc) = Document::from_path(rest) {
            return Some(Key::Document(doc));
        }
        let parts: Vec<&str> = rest.split('/').collect();
        Some(match parts.as_slice() {
            ["cluster", "id"] => Key::ClusterId,
            ["brokers", "ids", id] => Key::Broker(id.parse().ok()?),
            ["controller"] => Key::Controller,
            ["controller_epoch"] => Key::ControllerEpoch,
            ["brokers", "topics", t] if !t.is_empty() => Key::Topic(t.to_string()),
            ["brokers", "topics", t, "partitions", p, "state"] if !t.is_empty() => {
                Key::PartitionState(t.to_string(), p.parse().ok().filter(|p: &i32| *p >= 0)?)
            }
            ["config", "topics", t] if !t.is_empty() => Key::TopicConfig(t.to_string()),
            ["config", "brokers", e] if !e.is_empty() => Key::BrokerConfig(e.to_string()),
            ["latest_producer_id_block"] => Key::ProducerIdBlock,
            ["admin", "preferred_replica_election"] => Key::PreferredElection,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_parses_back_to_what_it_names() {
        for prefix in ["", "/weir", "/a/b"] {
            let k = Keys::new(prefix);
            let cases = [
                (k.cluster_id(), Key::ClusterId),
                (k.broker(7), Key::Broker(7)),
                (k.controller(), Key::Controller),
                (k.controller_epoch(), Key::ControllerEpoch),
                (k.topic("a.b-c_d"), Key::Topic("a.b-c_d".into())),
                (
                    k.partition_state("t", 12),
                    Key::PartitionState("t".into(), 12),
                ),
                (k.topic_config("t"), Key::TopicConfig("t".into())),
                (
                    k.broker_config(DEFAULT_BROKER_ENTITY),
                    Key::BrokerConfig("<default>".into()),
                ),
                (k.document(Document::Users), Key::Document(Document::Users)),
                (
                    k.document(Document::GroupConfigs),
                    Key::Document(Document::GroupConfigs),
                ),
                (k.producer_id_block(), Key::ProducerIdBlock),
                (k.preferred_election(), Key::PreferredElection),
            ];
            for (key, want) in cases {
                assert!(key.starts_with(&k.root()), "{key}");
                assert_eq!(k.parse(&key), Some(want), "{key}");
            }
            assert!(k
                .partition_state("t", 0)
                .starts_with(&k.partition_states("t")));
            assert!(!k.topic("t").starts_with(&k.partition_states("t")));
        }
    }

    #[test]
    fn foreign_keys_name_nothing() {
        let k = Keys::new("/weir");
        for key in [
            "/weirx/controller",
            "/other/controller",
            "/weir/brokers/ids/x",
            "/weir/brokers/topics/t/partitions/-1/state",
            "/weir/brokers/topics/t/partitions/0",
            "/weir/security/keys",
            "/weir",
        ] {
            assert_eq!(k.parse(key), None, "{key}");
        }
    }
}
