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
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

/// The file the ACLs are kept in, in the first data directory.
pub const ACLS_FILE: &str = "weir-acls.json";
/// The one name of the cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The literal name that matches every resource of its type.
pub const WILDCARD: &str = "*";
/// The principal that matches every user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Declares a Kafka enum with its wire codes and names (the names `kafka-acls.sh` and the
/// Java Admin client print).
macro_rules! kafka_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $code:literal, $text:literal;)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),* }
            }

            pub fn from_code(code: i8) -> Option<$name> {
                match code { $($code => Some($name::$variant),)* _ => None }
            }

            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }

            /// By name, in any case, `-` or `_` between words (`transactional-id`).
            pub fn parse(s: &str) -> Option<$name> {
                let s = s.trim().to_ascii_uppercase().replace('-', "_");
                Self::ALL.iter().copied().find(|v| v.name() == s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::parse(&s).ok_or_else(|| {
                    serde::de::Error::custom(format!(concat!("unknown ", stringify!($name), " '{}'"), s))
                })
            }
        }
    };
}

kafka_enum!(
    /// Kafka's ResourceType (ANY = 1 appears only in filters).
    ResourceType {
        Topic = 2, "TOPIC";
        Group = 3, "GROUP";
        Cluster = 4, "CLUSTER";
        TransactionalId = 5, "TRANSACTIONAL_ID";
        DelegationToken = 6, "DELEGATION_TOKEN";
        User = 7, "USER";
    }
);

kafka_enum!(
    /// Kafka's PatternType for a stored binding (ANY = 1 and MATCH = 2 are filters).
    PatternType {
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
);

kafka_enum!(
    /// Kafka's AclOperation (ANY = 1 appears only in filters).
    Operation {
        All = 2, "ALL";
        Read = 3, "READ";
        Write = 4, "WRITE";
        Create = 5, "CREATE";
        Delete = 6, "DELETE";
        Alter = 7, "ALTER";
        Describe = 8, "DESCRIBE";
        ClusterAction = 9, "CLUSTER_ACTION";
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        AlterConfigs = 11, "ALTER_CONFIGS";
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        CreateTokens = 13, "CREATE_TOKENS";
        DescribeTokens = 14, "DESCRIBE_TOKENS";
    }
);

kafka_enum!(
    /// Kafka's AclPermissionType (ANY = 1 appears only in filters).
    Permission {
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
);

/// The filter code for "any value" in every one of Kafka's ACL enums.
pub const ANY: i8 = 1;
/// PatternType MATCH: the patterns that would apply to the filter's resource name.
pub const MATCH: i8 = 2;

impl ResourceType {
    /// The operations that mean something for this resource type: the bits of Kafka's
    /// "authorized operations" fields.
    pub fn operations(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Delete,
                Alter,
                Describe,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
        }
    }
}

impl Operation {
    /// Whether an ALLOW entry for `self` grants `wanted`.
    fn grants(self, wanted: Operation) -> bool {
        use Operation::*;
        self == All
            || self == wanted
            || match wanted {
                Describe => matches!(self, Read | Write | Delete | Alter),
                DescribeConfigs => self == AlterConfigs,
                _ => false,
            }
    }
}

/// One ACL: who may (or may not) do what to which resources.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclBinding {
    /// Checks a new binding as Kafka does before storing it; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.resource_name.is_empty() {
            return Err("the resource name is empty".into());
        }
        if self.resource_type == ResourceType::Cluster
            && (self.resource_name != CLUSTER_NAME || self.pattern_type != PatternType::Literal)
        {
            return Err(format!(
                "the only CLUSTER resource is the literal name '{CLUSTER_NAME}'"
            ));
        }
        if self.pattern_type == PatternType::Prefixed && self.resource_name == WILDCARD {
            return Err("a PREFIXED pattern may not be '*' (use a LITERAL '*')".into());
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => {
                return Err(format!(
                    "principal '{}' is not TYPE:NAME (e.g. User:alice)",
                    self.principal
                ))
            }
        }
        if self.host.is_empty() {
            return Err("the host is empty (use '*' for every host)".into());
        }
        Ok(())
    }

    /// One line, as `kafka-acls.sh --list` shows it.
    pub fn describe(&self) -> String {
        format!(
            "(principal={}, host={}, operation={}, permissionType={}) on {}:{}:{}",
            self.principal,
            self.host,
            self.operation.name(),
            self.permission.name(),
            self.resource_type.name(),
            self.pattern_type.name(),
            self.resource_name
        )
    }
}

/// Which resource patterns a filter selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternFilter {
    /// Any pattern type, the name (if given) equal.
    Any,
    /// The patterns that apply to the named resource: the literal name, the literal `*`,
    /// and every prefix of the name.
    Match,
    Exactly(PatternType),
}

/// Kafka's AclBindingFilter, as DescribeAcls and DeleteAcls send it: `None` matches any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

impl AclFilter {
    /// From the wire codes; an unknown code (0, or out of range) is an error, as Kafka
    /// answers INVALID_REQUEST for it.
    #[allow(clippy::too_many_arguments)]
    pub fn from_wire(
        resource_type: i8,
        resource_name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclFilter, String> {
        fn any_or<T>(code: i8, what: &str, f: fn(i8) -> Option<T>) -> Result<Option<T>, String> {
            if code == ANY {
                return Ok(None);
            }
            f(code)
                .map(Some)
                .ok_or_else(|| format!("unknown {what} code {code}"))
        }
        let pattern = match pattern_type {
            ANY => PatternFilter::Any,
            MATCH => PatternFilter::Match,
            c => PatternFilter::Exactly(
                PatternType::from_code(c)
                    .ok_or_else(|| format!("unknown pattern type code {c}"))?,
            ),
        };
        Ok(AclFilter {
            resource_type: any_or(resource_type, "resource type", ResourceType::from_code)?,
            resource_name: resource_name.map(str::to_owned),
            pattern,
            principal: principal.map(str::to_owned),
            host: host.map(str::to_owned),
            operation: any_or(operation, "operation", Operation::from_code)?,
            permission: any_or(permission, "permission type", Permission::from_code)?,
        })
    }

    /// A filter matching every ACL.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: None,
            resource_name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    pub fn matches(&self, b: &AclBinding) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        let pattern = match (&self.resource_name, self.pattern) {
            (_, PatternFilter::Exactly(t)) if t != b.pattern_type => false,
            (None, _) => true,
            (Some(n), PatternFilter::Match) => match b.pattern_type {
                PatternType::Literal => b.resource_name == *n || b.resource_name == WILDCARD,
                PatternType::Prefixed => n.starts_with(&b.resource_name),
            },
            (Some(n), _) => b.resource_name == *n,
        };
        pattern
            && self.resource_type.is_none_or(|t| t == b.resource_type)
            && eq(&self.principal, &b.principal)
            && eq(&self.host, &b.host)
            && self.operation.is_none_or(|o| o == b.operation)
            && self.permission.is_none_or(|p| p == b.permission)
    }
}

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
    path: PathBuf,
    state: RwLock<State>,
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
            path,
            state: RwLock::new(State::from(all)),
        })
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
        let Some(t) = state.by_type.get(&rt) else {
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
    pub fn describe(&self, filter: &AclFilter) -> Vec<AclBinding> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state
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
        remove: &[AclFilter],
    ) -> Result<Vec<Vec<AclBinding>>, String> {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let mut next = state.all.clone();
        let mut removed = Vec::with_capacity(remove.len());
        for f in remove {
            let gone: Vec<AclBinding> = next.iter().filter(|b| f.matches(b)).cloned().collect();
            for b in &gone {
                next.remove(b);
            }
            removed.push(gone);
        }
        next.extend(add.iter().cloned());
        if next != state.all {
            write_file(&self.path, &next)?;
            *state = State::from(next);
        }
        Ok(removed)
    }
}

fn read_file(path: &Path) -> Result<BTreeSet<AclBinding>, String> {
    let acls = crate::state_file::read::<AclsFile>(path)?
        .map(|f| f.acls)
        .unwrap_or_default();
    for b in &acls {
        b.validate()
            .map_err(|e| format!("{}: {}: {e}", path.display(), b.describe()))?;
    }
    Ok(acls.into_iter().collect())
}

fn write_file(path: &Path, acls: &BTreeSet<AclBinding>) -> Result<(), String> {
    crate::state_file::write(
        path,
        &AclsFile {
            acls: acls.iter().cloned().collect(),
        },
    )
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
    fn filters_match_as_kafka_s_binding_filters() {
        let lit = topic("orders", Literal, "User:u", Read, Allow);
        let wild = topic("*", Literal, "User:u", Read, Allow);
        let pre = topic("ord", Prefixed, "User:u", Read, Allow);
        let other = topic("pay", Literal, "User:u", Read, Allow);
        let f = |pattern, name: Option<&str>| AclFilter {
            resource_name: name.map(str::to_owned),
            pattern,
            ..AclFilter::any()
        };
        let matching = |f: &AclFilter| {
            [&lit, &wild, &pre, &other]
                .iter()
                .filter(|b| f.matches(b))
                .count()
        };
        assert_eq!(matching(&f(PatternFilter::Match, Some("orders"))), 3);
        assert_eq!(matching(&f(PatternFilter::Any, Some("orders"))), 1);
        assert_eq!(matching(&f(PatternFilter::Exactly(Prefixed), None)), 1);
        assert_eq!(matching(&f(PatternFilter::Any, None)), 4);
        let by_principal = AclFilter {
            principal: Some("User:v".into()),
            ..AclFilter::any()
        };
        assert_eq!(matching(&by_principal), 0);
        assert!(AclFilter::from_wire(0, None, 1, None, None, 1, 1).is_err());
        assert!(AclFilter::from_wire(2, None, 9, None, None, 1, 1).is_err());
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
                &[AclFilter {
                    principal: Some("User:v".into()),
                    ..AclFilter::any()
                }],
            )
            .unwrap();
        assert_eq!(removed, vec![vec![b2]]);
        let again = Authorizer::load(dir.path(), BTreeSet::new(), false).unwrap();
        assert_eq!(again.describe(&AclFilter::any()), vec![b1]);
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
