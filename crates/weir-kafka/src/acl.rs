//! Kafka's access-control vocabulary: the resource types, pattern types, operations and
//! permissions with their wire codes and the names `kafka-acls.sh` prints, and Kafka's
//! `AclBinding` (one rule) and `AclBindingFilter` (which rules a DescribeAcls or DeleteAcls
//! selects). The broker's authorizer checks requests against bindings; the admin client
//! sends and receives them; both use these types.

use serde::{Deserialize, Serialize};

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
            ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
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
    /// Whether an ALLOW entry for `self` grants `wanted`: ALL grants everything; READ,
    /// WRITE, DELETE and ALTER each grant DESCRIBE; ALTER_CONFIGS grants DESCRIBE_CONFIGS.
    pub fn grants(self, wanted: Operation) -> bool {
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

    /// A binding from its wire codes (a DescribeAcls or DeleteAcls answer); an unknown
    /// code, or an ANY or MATCH where a binding must say one value, is an error.
    #[allow(clippy::too_many_arguments)]
    pub fn from_wire(
        resource_type: i8,
        resource_name: String,
        pattern_type: i8,
        principal: String,
        host: String,
        operation: i8,
        permission: i8,
    ) -> Result<AclBinding, String> {
        fn known<T>(code: i8, what: &str, f: fn(i8) -> Option<T>) -> Result<T, String> {
            f(code).ok_or_else(|| format!("unknown ACL {what} code {code}"))
        }
        Ok(AclBinding {
            resource_type: known(resource_type, "resource type", ResourceType::from_code)?,
            resource_name,
            pattern_type: known(pattern_type, "pattern type", PatternType::from_code)?,
            principal,
            host,
            operation: known(operation, "operation", Operation::from_code)?,
            permission: known(permission, "permission type", Permission::from_code)?,
        })
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
pub struct AclBindingFilter {
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

impl AclBindingFilter {
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
    ) -> Result<AclBindingFilter, String> {
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
        Ok(AclBindingFilter {
            resource_type: any_or(resource_type, "resource type", ResourceType::from_code)?,
            resource_name: resource_name.map(str::to_owned),
            pattern,
            principal: principal.map(str::to_owned),
            host: host.map(str::to_owned),
            operation: any_or(operation, "operation", Operation::from_code)?,
            permission: any_or(permission, "permission type", Permission::from_code)?,
        })
    }

    /// The wire codes of the filter, in the order of `from_wire`'s arguments that take one:
    /// resource type, pattern type, operation, permission (ANY where the filter has none).
    pub fn wire_codes(&self) -> (i8, i8, i8, i8) {
        let pattern = match self.pattern {
            PatternFilter::Any => ANY,
            PatternFilter::Match => MATCH,
            PatternFilter::Exactly(t) => t.code(),
        };
        (
            self.resource_type.map_or(ANY, ResourceType::code),
            pattern,
            self.operation.map_or(ANY, Operation::code),
            self.permission.map_or(ANY, Permission::code),
        )
    }

    /// A filter matching exactly one binding.
    pub fn exactly(b: &AclBinding) -> AclBindingFilter {
        AclBindingFilter {
            resource_type: Some(b.resource_type),
            resource_name: Some(b.resource_name.clone()),
            pattern: PatternFilter::Exactly(b.pattern_type),
            principal: Some(b.principal.clone()),
            host: Some(b.host.clone()),
            operation: Some(b.operation),
            permission: Some(b.permission),
        }
    }

    /// A filter matching every ACL.
    pub fn any() -> AclBindingFilter {
        AclBindingFilter {
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

#[cfg(test)]
mod tests {
    use super::Operation::*;
    use super::PatternType::*;
    use super::Permission::*;
    use super::*;

    fn topic(name: &str, pattern_type: PatternType, principal: &str) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type,
            principal: principal.into(),
            host: WILDCARD.into(),
            operation: Read,
            permission: Allow,
        }
    }

    #[test]
    fn filters_match_as_kafka_s_binding_filters() {
        let lit = topic("orders", Literal, "User:u");
        let wild = topic("*", Literal, "User:u");
        let pre = topic("ord", Prefixed, "User:u");
        let other = topic("pay", Literal, "User:u");
        let f = |pattern, name: Option<&str>| AclBindingFilter {
            resource_name: name.map(str::to_owned),
            pattern,
            ..AclBindingFilter::any()
        };
        let matching = |f: &AclBindingFilter| {
            [&lit, &wild, &pre, &other]
                .iter()
                .filter(|b| f.matches(b))
                .count()
        };
        assert_eq!(matching(&f(PatternFilter::Match, Some("orders"))), 3);
        assert_eq!(matching(&f(PatternFilter::Any, Some("orders"))), 1);
        assert_eq!(matching(&f(PatternFilter::Exactly(Prefixed), None)), 1);
        assert_eq!(matching(&f(PatternFilter::Any, None)), 4);
        let by_principal = AclBindingFilter {
            principal: Some("User:v".into()),
            ..AclBindingFilter::any()
        };
        assert_eq!(matching(&by_principal), 0);
        assert_eq!(matching(&AclBindingFilter::exactly(&pre)), 1);
        assert!(AclBindingFilter::from_wire(0, None, 1, None, None, 1, 1).is_err());
        assert!(AclBindingFilter::from_wire(2, None, 9, None, None, 1, 1).is_err());
    }

    #[test]
    fn filters_and_bindings_round_trip_through_their_wire_codes() {
        let b = AclBinding {
            operation: DescribeConfigs,
            permission: Deny,
            ..topic("orders-", Prefixed, "User:alice")
        };
        for f in [AclBindingFilter::any(), AclBindingFilter::exactly(&b)] {
            let (rt, pt, op, perm) = f.wire_codes();
            let back = AclBindingFilter::from_wire(
                rt,
                f.resource_name.as_deref(),
                pt,
                f.principal.as_deref(),
                f.host.as_deref(),
                op,
                perm,
            )
            .unwrap();
            assert_eq!(back, f);
        }
        let again = AclBinding::from_wire(
            b.resource_type.code(),
            b.resource_name.clone(),
            b.pattern_type.code(),
            b.principal.clone(),
            b.host.clone(),
            b.operation.code(),
            b.permission.code(),
        )
        .unwrap();
        assert_eq!(again, b);
        assert!(
            AclBinding::from_wire(2, "t".into(), MATCH, "User:a".into(), "*".into(), 3, 3).is_err()
        );
    }

    #[test]
    fn names_parse_as_kafka_acls_spells_them() {
        assert_eq!(
            ResourceType::parse("transactional-id"),
            Some(ResourceType::TransactionalId)
        );
        assert_eq!(Operation::parse("describe_configs"), Some(DescribeConfigs));
        assert_eq!(PatternType::parse("Prefixed"), Some(Prefixed));
        assert_eq!(Permission::parse("nope"), None);
        assert!(Read.grants(Describe) && AlterConfigs.grants(DescribeConfigs));
        assert!(!Describe.grants(Read) && All.grants(IdempotentWrite));
    }
}
