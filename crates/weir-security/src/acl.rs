//! Access control lists with Kafka's model, and the authorizer that checks each request
//! against them.
//!
//! An ACL binds a resource pattern (resource type, name, literal or prefixed) to an entry
//! (principal, host, operation, allow or deny). A request is allowed when some ALLOW entry
//! matches it and no DENY entry does; an entry matches a principal when it names it or
//! `User:*`, a host when it names the client's address or `*`. As in Kafka:
//! - DENY wins over ALLOW, and a DENY of ALL denies every operation;
//! - READ, WRITE, DELETE and ALTER each imply DESCRIBE; ALTER_CONFIGS implies
//!   DESCRIBE_CONFIGS; ALL implies everything;
//! - a resource no ACL names at all (for any principal) is open to everyone only with
//!   `allow.everyone.if.no.acl.found=true`;
//! - `super.users` pass every check.
//!
//! The ACLs are kept in `weir-acls.json` in the first data directory, written atomically
//! on every change (Kafka keeps them in its metadata log; a single node needs only the
//! file). This is hand-written because it is Kafka's own authorization model, which no
//! crate implements.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::RwLock;

use crate::state_file::{Doc, FileStore, Store};

use serde::{Deserialize, Serialize};
use weir_kafka::acl::{
    AclBinding, AclBindingFilter, Operation, PatternType, Permission, ResourceType, WILDCARD,
    WILDCARD_PRINCIPAL,
};

/// The file the ACLs are kept in, in the first data directory.
pub const ACLS_FILE: &str = "weir-acls.json";

/// The part of a binding that is checked once its resource pattern has matched.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    principal: String,
    host: String,
    operation: Operation,
    permission: Permission,
}

/// One resource type's ACLs, indexed so that a check costs a few map lookups whatever
/// the number of ACLs: literal names by name, prefixes by prefix.
#[derive(Debug, Default, Clone)]
struct TypeAcls {
    literal: HashMap<String, Vec<Entry>>,
    prefixed: HashMap<String, Vec<Entry>>,
    /// Longest prefix stored, so a check tries no longer ones.
    longest_prefix: usize,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct AclsFile {
    acls: Vec<AclBinding>,
}

/// The authorizer: `super.users`, `allow.everyone.if.no.acl.found`, and the ACLs.
#[derive(Debug)]
pub struct Authorizer {
    super_users: BTreeSet<String>,
    allow_if_no_acl: bool,
    store: Box<dyn Store>,
    state: RwLock<Doc<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Every binding, the persisted form.
    all: BTreeSet<AclBinding>,
    by_type: HashMap<ResourceType, TypeAcls>,
}

impl State {
    fn from(all: BTreeSet<AclBinding>) -> State {
        let mut by_type: HashMap<ResourceType, TypeAcls> = HashMap::new();
        for b in &all {
            let t = by_type.entry(b.resource_type).or_default();
            let entry = Entry {
                principal: b.principal.clone(),
                host: b.host.clone(),
                operation: b.operation,
                permission: b.permission,
            };
            match b.pattern_type {
                PatternType::Literal => t
                    .literal
                    .entry(b.resource_name.clone())
                    .or_default()
                    .push(entry),
                PatternType::Prefixed => {
                    t.longest_prefix = t.longest_prefix.max(b.resource_name.len());
                    t.prefixed
                        .entry(b.resource_name.clone())
                        .or_default()
                        .push(entry)
                }
            }
        }
        State { all, by_type }
    }

    /// Every entry whose pattern applies to resource `name` of type `rt`.
    fn applicable<'a>(
        &'a self,
        rt: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        let t = self.by_type.get(&rt);
        let literal = t.into_iter().flat_map(move |t| {
            let exact = t.literal.get(name).into_iter().flatten();
            let wild = (name != WILDCARD)
                .then(|| t.literal.get(WILDCARD))
                .flatten()
                .into_iter()
                .flatten();
            exact.chain(wild)
        });
        let prefixed = t.into_iter().flat_map(move |t| {
            let longest = t.longest_prefix.min(name.len());
            (1..=longest)
                .filter(move |&i| name.is_char_boundary(i))
                .filter_map(move |i| t.prefixed.get(&name[..i]))
                .flatten()
        });
        literal.chain(prefixed)
    }
}

fn principal_matches(entry: &str, principal: &str) -> bool {
    entry == principal || entry == WILDCARD_PRINCIPAL
}

fn host_matches(entry: &str, host: &str) -> bool {
    entry == host || entry == WILDCARD
}

impl Authorizer {
    /// Loads the ACLs of data directory `dir` (none if it has no ACL file).
    pub fn load(
        dir: &Path,
        super_users: BTreeSet<String>,
        allow_if_no_acl: bool,
    ) -> Result<Authorizer, String> {
        let path = dir.join(ACLS_FILE);
        let all = read_file(&path)?;
        Ok(Authorizer {
            super_users,
            allow_if_no_acl,
            store: Box::new(FileStore(path)),
            state: RwLock::new(Doc {
                value: State::from(all),
                revision: 0,
            }),
        })
    }

    /// The ACLs of a document kept in `store`, as it stands (`None`: no ACLs yet).
    pub fn from_document(
        store: Box<dyn Store>,
        current: Option<(&[u8], i64)>,
        super_users: BTreeSet<String>,
        allow_if_no_acl: bool,
    ) -> Result<Authorizer, String> {
        let (all, revision) = match current {
            Some((bytes, rev)) => (decode_acls(bytes)?, rev),
            None => (BTreeSet::new(), 0),
        };
        Ok(Authorizer {
            super_users,
            allow_if_no_acl,
            store,
            state: RwLock::new(Doc {
                value: State::from(all),
                revision,
            }),
        })
    }

    /// Takes the document another broker saved (`None`: removed), seen at `revision`.
    pub fn install(&self, bytes: Option<&[u8]>, revision: i64) -> Result<bool, String> {
        let all = bytes.map(decode_acls).transpose()?.unwrap_or_default();
        Ok(crate::state_file::install(
            &self.state,
            State::from(all),
            revision,
        ))
    }

    /// Whether `principal`, connecting from `host`, may do `op` to resource `name`.
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        op: Operation,
        rt: ResourceType,
        name: &str,
    ) -> bool {
        if self.super_users.contains(principal) {
            return true;
        }
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let state = &state.value;
        let mut any_acl = false;
        let mut allowed = false;
        for e in state.applicable(rt, name) {
            any_acl = true;
            if !principal_matches(&e.principal, principal) || !host_matches(&e.host, host) {
                continue;
            }
            match e.permission {
                Permission::Deny if e.operation == op || e.operation == Operation::All => {
                    return false
                }
                Permission::Allow if e.operation.grants(op) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any_acl && self.allow_if_no_acl)
    }

    /// Whether some resource of type `rt` could allow `op` to this principal (Kafka's
    /// `authorizeByResourceType`): an ALLOW on a literal name or prefix that no DENY
    /// covers. An idempotent producer needs WRITE on some topic, or IDEMPOTENT_WRITE on
    /// the cluster.
    pub fn authorize_any(
        &self,
        principal: &str,
        host: &str,
        op: Operation,
        rt: ResourceType,
    ) -> bool {
        if self.super_users.contains(principal) {
            return true;
        }
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let Some(t) = state.value.by_type.get(&rt) else {
            return self.allow_if_no_acl;
        };
        let relevant = |e: &Entry, perm: Permission| {
            e.permission == perm
                && principal_matches(&e.principal, principal)
                && host_matches(&e.host, host)
                && (e.operation == op || e.operation == Operation::All)
        };
        let names = |map: &HashMap<String, Vec<Entry>>, perm: Permission| -> BTreeSet<String> {
            map.iter()
                .filter(|(_, es)| es.iter().any(|e| relevant(e, perm)))
                .map(|(n, _)| n.clone())
                .collect()
        };
        let deny_literal = names(&t.literal, Permission::Deny);
        if deny_literal.contains(WILDCARD) {
            return false;
        }
        let deny_prefix = names(&t.prefixed, Permission::Deny);
        let denied = |n: &str| deny_prefix.iter().any(|p| n.starts_with(p.as_str()));
        names(&t.literal, Permission::Allow)
            .iter()
            .any(|n| !deny_literal.contains(n) && !denied(n))
            || names(&t.prefixed, Permission::Allow)
                .iter()
                .any(|n| !denied(n))
    }

    /// Kafka's "authorized operations" bit field for a resource: bit `code` set for each
    /// operation of its type this principal may do.
    pub fn authorized_operations(
        &self,
        principal: &str,
        host: &str,
        rt: ResourceType,
        name: &str,
    ) -> i32 {
        rt.operations()
            .iter()
            .filter(|op| self.authorize(principal, host, **op, rt, name))
            .fold(0, |bits, op| bits | (1 << op.code()))
    }

    /// Every ACL the filter matches.
    pub fn describe(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state
            .value
            .all
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect()
    }

    /// Adds bindings (those already present are kept once) and removes what each filter
    /// matches, then saves the file: all of it or, if the save fails, none of it.
    /// Returns what each filter removed.
    pub fn change(
        &self,
        add: &[AclBinding],
        remove: &[AclBindingFilter],
    ) -> Result<Vec<Vec<AclBinding>>, String> {
        crate::state_file::update(
            &self.state,
            &*self.store,
            |state| {
                crate::state_file::encode(&AclsFile {
                    acls: state.all.iter().cloned().collect(),
                })
            },
            |bytes| decode_acls(bytes).map(State::from),
            State::default,
            |current| {
                let mut next = current.all.clone();
                let mut removed = Vec::with_capacity(remove.len());
                for f in remove {
                    let gone: Vec<AclBinding> =
                        next.iter().filter(|b| f.matches(b)).cloned().collect();
                    for b in &gone {
                        next.remove(b);
                    }
                    removed.push(gone);
                }
                next.extend(add.iter().cloned());
                let changed = next != current.all;
                Ok((changed.then(|| State::from(next)), removed))
            },
        )
    }
}

fn check_all(acls: Vec<AclBinding>) -> Result<BTreeSet<AclBinding>, String> {
    for b in &acls {
        b.validate().map_err(|e| format!("{}: {e}", b.describe()))?;
    }
    Ok(acls.into_iter().collect())
}

fn decode_acls(bytes: &[u8]) -> Result<BTreeSet<AclBinding>, String> {
    check_all(crate::state_file::decode::<AclsFile>(bytes)?.acls)
}

fn read_file(path: &Path) -> Result<BTreeSet<AclBinding>, String> {
    let acls = crate::state_file::read::<AclsFile>(path)?
        .map(|f| f.acls)
        .unwrap_or_default();
    check_all(acls).map_err(|e| format!("{}: {e}", path.display()))
}

/// The authorizer's settings, as Kafka names them.
#[derive(Debug, Clone)]
pub struct AuthorizerConfig {
    /// `super.users`: principals every check allows.
    pub super_users: std::collections::BTreeSet<String>,
    /// `allow.everyone.if.no.acl.found`: a resource no ACL names is open to all.
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// From `authorizer.class.name`, `super.users` and `allow.everyone.if.no.acl.found`;
    /// `None` when no authorizer is set.
    pub fn from_properties(props: &BTreeMap<String, String>) -> Result<Option<Self>, String> {
        let class = props.get("authorizer.class.name").map_or("", |s| s.trim());
        if class.is_empty() {
            for key in ["super.users", "allow.everyone.if.no.acl.found"] {
                if props.contains_key(key) {
                    return Err(format!(
                        "{key} is set but authorizer.class.name is not: set authorizer.class.name={} \
                         to check ACLs",
                        AUTHORIZER_CLASSES[0]
                    ));
                }
            }
            return Ok(None);
        }
        if !AUTHORIZER_CLASSES.contains(&class) {
            return Err(format!(
                "authorizer.class.name={class}: Weir's authorizer is Kafka's ACL model; use {}",
                AUTHORIZER_CLASSES.join(" or ")
            ));
        }
        Ok(Some(AuthorizerConfig {
            super_users: parse_super_users(props.get("super.users").map_or("", |s| s.as_str()))?,
            allow_everyone_if_no_acl_found: match props
                .get("allow.everyone.if.no.acl.found")
                .map(|v| v.trim().to_ascii_lowercase())
                .as_deref()
            {
                None | Some("false") => false,
                Some("true") => true,
                Some(v) => {
                    return Err(format!(
                        "allow.everyone.if.no.acl.found: '{v}' is not true or false"
                    ))
                }
            },
        }))
    }
}

/// The class names `authorizer.class.name` may take: Kafka's own authorizers, whose ACL
/// model Weir implements. Kafka's StandardAuthorizer is the KRaft one.
pub const AUTHORIZER_CLASSES: &[&str] = &[
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
];

/// `super.users`: principals separated by semicolons (`User:admin;User:ops`).
pub fn parse_super_users(value: &str) -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    for p in value.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        match p.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {
                out.insert(p.to_string());
            }
            _ => {
                return Err(format!(
                    "super.users: '{p}' is not a principal TYPE:NAME (e.g. User:admin); \
                     separate principals with ';'"
                ))
            }
        }
    }
    Ok(out)
}

/// Bindings by resource, for DescribeAcls' answer.
pub fn group_by_resource(
    acls: Vec<AclBinding>,
) -> BTreeMap<(ResourceType, String, PatternType), Vec<AclBinding>> {
    let mut out: BTreeMap<_, Vec<AclBinding>> = BTreeMap::new();
    for b in acls {
        out.entry((b.resource_type, b.resource_name.clone(), b.pattern_type))
            .or_default()
            .push(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use weir_kafka::acl::CLUSTER_NAME;

    use super::*;

    fn acl(
        rt: ResourceType,
        name: &str,
        pt: PatternType,
        principal: &str,
        host: &str,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: principal.into(),
            host: host.into(),
            operation: op,
            permission: perm,
        }
    }

    fn topic(
        name: &str,
        pt: PatternType,
        who: &str,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        acl(ResourceType::Topic, name, pt, who, "*", op, perm)
    }

    fn authorizer(acls: &[AclBinding], allow_if_none: bool) -> (tempfile::TempDir, Authorizer) {
        let dir = tempfile::tempdir().unwrap();
        let supers = parse_super_users("User:admin").unwrap();
        let a = Authorizer::load(dir.path(), supers, allow_if_none).unwrap();
        a.change(acls, &[]).unwrap();
        (dir, a)
    }

    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;

    #[test]
    fn allow_and_deny_on_literal_wildcard_and_prefixed_patterns() {
        let (_d, a) = authorizer(
            &[
                topic("orders", Literal, "User:alice", Read, Allow),
                topic("pay-", Prefixed, "User:alice", Write, Allow),
                topic("pay-secret", Literal, "User:alice", Write, Deny),
                topic("*", Literal, "User:bob", Read, Allow),
                topic("*", Literal, "User:*", Describe, Allow),
            ],
            false,
        );
        let ok = |who, op, name| a.authorize(who, "10.0.0.1", op, Topic, name);
        assert!(ok("User:alice", Read, "orders"));
        assert!(!ok("User:alice", Write, "orders"));
        assert!(ok("User:alice", Write, "pay-in"));
        assert!(!ok("User:alice", Write, "pay-secret"), "DENY wins");
        assert!(!ok("User:alice", Write, "pa"), "shorter than the prefix");
        assert!(ok("User:bob", Read, "anything"));
        assert!(!ok("User:bob", Write, "anything"));
        assert!(
            ok("User:carol", Describe, "orders"),
            "User:* matches every user"
        );
        assert!(!ok("User:carol", Read, "orders"));
        assert!(
            ok("User:admin", Alter, "orders"),
            "super users pass every check"
        );
        assert!(!ok("User:admin2", Alter, "orders"));
    }

    #[test]
    fn read_write_delete_alter_imply_describe_and_alter_configs_implies_describe_configs() {
        for (op, implied) in [
            (Read, Describe),
            (Write, Describe),
            (Delete, Describe),
            (Alter, Describe),
            (AlterConfigs, DescribeConfigs),
            (All, Describe),
            (All, AlterConfigs),
        ] {
            let (_d, a) = authorizer(&[topic("t", Literal, "User:u", op, Allow)], false);
            assert!(
                a.authorize("User:u", "h", implied, Topic, "t"),
                "{op:?} ⇒ {implied:?}"
            );
        }
        for (op, not) in [
            (Describe, Read),
            (Create, Describe),
            (DescribeConfigs, AlterConfigs),
        ] {
            let (_d, a) = authorizer(&[topic("t", Literal, "User:u", op, Allow)], false);
            assert!(
                !a.authorize("User:u", "h", not, Topic, "t"),
                "{op:?} ⇏ {not:?}"
            );
        }
    }

    #[test]
    fn a_deny_is_for_its_operation_or_all_and_not_the_ones_it_would_imply() {
        let (_d, a) = authorizer(
            &[
                topic("t", Literal, "User:u", All, Allow),
                topic("t", Literal, "User:u", Read, Deny),
            ],
            false,
        );
        assert!(!a.authorize("User:u", "h", Read, Topic, "t"));
        assert!(a.authorize("User:u", "h", Describe, Topic, "t"));
        let (_d, a) = authorizer(
            &[
                topic("t", Literal, "User:u", Read, Allow),
                topic("t", Prefixed, "User:*", All, Deny),
            ],
            false,
        );
        assert!(!a.authorize("User:u", "h", Read, Topic, "t"));
    }

    #[test]
    fn hosts_must_match_unless_the_acl_says_any_host() {
        let (_d, a) = authorizer(
            &[acl(Topic, "t", Literal, "User:u", "10.0.0.1", Read, Allow)],
            false,
        );
        assert!(a.authorize("User:u", "10.0.0.1", Read, Topic, "t"));
        assert!(!a.authorize("User:u", "10.0.0.2", Read, Topic, "t"));
    }

    #[test]
    fn allow_everyone_applies_only_to_resources_no_acl_names() {
        let (_d, a) = authorizer(&[topic("t", Literal, "User:u", Read, Allow)], true);
        assert!(a.authorize("User:x", "h", Write, Topic, "other"));
        assert!(a.authorize("User:x", "h", Read, Group, "g"));
        assert!(!a.authorize("User:x", "h", Read, Topic, "t"), "t has ACLs");
        let (_d, a) = authorizer(&[], false);
        assert!(!a.authorize("User:x", "h", Read, Topic, "t"));
    }

    #[test]
    fn authorize_any_finds_an_allow_no_deny_covers() {
        let (_d, a) = authorizer(&[topic("logs-", Prefixed, "User:u", Write, Allow)], false);
        assert!(a.authorize_any("User:u", "h", Write, Topic));
        assert!(!a.authorize_any("User:v", "h", Write, Topic));
        let (_d, a) = authorizer(
            &[
                topic("logs-", Prefixed, "User:u", Write, Allow),
                topic("log", Prefixed, "User:u", Write, Deny),
            ],
            false,
        );
        assert!(!a.authorize_any("User:u", "h", Write, Topic));
        let (_d, a) = authorizer(
            &[
                topic("a", Literal, "User:u", Write, Allow),
                topic("*", Literal, "User:u", Write, Deny),
            ],
            false,
        );
        assert!(!a.authorize_any("User:u", "h", Write, Topic));
    }

    #[test]
    fn authorized_operations_are_kafka_bit_fields() {
        let (_d, a) = authorizer(&[topic("t", Literal, "User:u", Read, Allow)], false);
        let bits = a.authorized_operations("User:u", "h", Topic, "t");
        assert_eq!(
            bits,
            (1 << 3) | (1 << 8),
            "READ and the DESCRIBE it implies"
        );
        assert_eq!(a.authorized_operations("User:v", "h", Topic, "t"), 0);
    }

    #[test]
    fn changes_are_saved_and_survive_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let a = Authorizer::load(dir.path(), BTreeSet::new(), false).unwrap();
        let b1 = topic("t", Literal, "User:u", Read, Allow);
        let b2 = topic("t", Literal, "User:v", Read, Allow);
        a.change(&[b1.clone(), b2.clone(), b1.clone()], &[])
            .unwrap();
        let removed = a
            .change(
                &[],
                &[AclBindingFilter {
                    principal: Some("User:v".into()),
                    ..AclBindingFilter::any()
                }],
            )
            .unwrap();
        assert_eq!(removed, vec![vec![b2]]);
        let again = Authorizer::load(dir.path(), BTreeSet::new(), false).unwrap();
        assert_eq!(again.describe(&AclBindingFilter::any()), vec![b1]);
        assert!(again.authorize("User:u", "h", Read, Topic, "t"));
    }

    #[test]
    fn bad_bindings_and_super_users_are_refused_with_what_to_fix() {
        let mut b = topic("t", Literal, "alice", Read, Allow);
        assert!(b.validate().unwrap_err().contains("TYPE:NAME"));
        b.principal = "User:alice".into();
        assert!(b.validate().is_ok());
        let c = acl(Cluster, "other", Literal, "User:a", "*", Alter, Allow);
        assert!(c.validate().unwrap_err().contains(CLUSTER_NAME));
        assert!(parse_super_users("User:a;User:b").unwrap().len() == 2);
        assert!(parse_super_users("User:a,User:b").is_ok_and(|s| s.len() == 1));
        assert!(parse_super_users("admin").is_err());
        assert_eq!(
            ResourceType::parse("transactional-id"),
            Some(TransactionalId)
        );
        assert_eq!(Operation::parse("describe_configs"), Some(DescribeConfigs));
    }
}
