//! ACLs through the admin client: CreateAcls, DescribeAcls and DeleteAcls, with the types
//! of Kafka's Admin API (`AclBinding`, `AclBindingFilter`). Each call goes to any broker,
//! as Kafka sends it to the least loaded node. The enums carry Kafka's wire codes; their
//! ANY (and, for patterns, MATCH) values are for filters only.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{ApiKey, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};

use super::{err, sb, Admin};
use crate::error::{ClientError, Result};

const CREATE_ACLS: (i16, i16) = (1, 3);
const DESCRIBE_ACLS: (i16, i16) = (1, 3);
const DELETE_ACLS: (i16, i16) = (1, 3);

/// Declares one of Kafka's ACL enums with its wire codes and the names Kafka prints.
macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $code:literal, $text:literal;)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($variant),* }

        impl $name {
            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),* }
            }

            pub fn from_code(code: i8) -> Option<$name> {
                match code { $($code => Some($name::$variant),)* _ => None }
            }

            /// Kafka's name (`TOPIC`, `PREFIXED`, `DESCRIBE_CONFIGS`, `ALLOW`).
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
        }
    };
}

wire_enum!(
    /// Kafka's ResourceType.
    ResourceType {
        Any = 1, "ANY";
        Topic = 2, "TOPIC";
        Group = 3, "GROUP";
        Cluster = 4, "CLUSTER";
        TransactionalId = 5, "TRANSACTIONAL_ID";
        DelegationToken = 6, "DELEGATION_TOKEN";
        User = 7, "USER";
    }
);

wire_enum!(
    /// Kafka's PatternType: a binding is LITERAL or PREFIXED; a filter may also say ANY
    /// (any pattern with this name) or MATCH (every pattern that applies to the name).
    PatternType {
        Any = 1, "ANY";
        Match = 2, "MATCH";
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
);

wire_enum!(
    /// Kafka's AclOperation.
    AclOperation {
        Any = 1, "ANY";
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

wire_enum!(
    /// Kafka's AclPermissionType.
    AclPermissionType {
        Any = 1, "ANY";
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
);

/// One ACL: `principal` from `host` may (ALLOW) or may not (DENY) do `operation` to the
/// resources the pattern names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `User:alice`, or `User:*` for every user.
    pub principal: String,
    /// A client address, or `*` for every host.
    pub host: String,
    pub operation: AclOperation,
    pub permission_type: AclPermissionType,
}

/// Which ACLs to list or delete: `None` and the ANY values match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclBindingFilter {
    pub resource_type: ResourceType,
    pub resource_name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: AclOperation,
    pub permission_type: AclPermissionType,
}

impl AclBindingFilter {
    /// Matches every ACL.
    pub fn any() -> Self {
        AclBindingFilter {
            resource_type: ResourceType::Any,
            resource_name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: AclOperation::Any,
            permission_type: AclPermissionType::Any,
        }
    }

    /// Matches exactly this binding.
    pub fn exactly(b: &AclBinding) -> Self {
        AclBindingFilter {
            resource_type: b.resource_type,
            resource_name: Some(b.resource_name.clone()),
            pattern_type: b.pattern_type,
            principal: Some(b.principal.clone()),
            host: Some(b.host.clone()),
            operation: b.operation,
            permission_type: b.permission_type,
        }
    }
}

/// A binding from a broker's codes; an unknown code is a protocol error.
#[allow(clippy::too_many_arguments)]
fn binding(
    resource_type: i8,
    resource_name: String,
    pattern_type: i8,
    principal: String,
    host: String,
    operation: i8,
    permission_type: i8,
) -> Result<AclBinding> {
    let bad =
        |what: &str, code: i8| ClientError::Protocol(format!("unknown ACL {what} code {code}"));
    Ok(AclBinding {
        resource_type: ResourceType::from_code(resource_type)
            .ok_or_else(|| bad("resource type", resource_type))?,
        resource_name,
        pattern_type: PatternType::from_code(pattern_type)
            .ok_or_else(|| bad("pattern type", pattern_type))?,
        principal,
        host,
        operation: AclOperation::from_code(operation).ok_or_else(|| bad("operation", operation))?,
        permission_type: AclPermissionType::from_code(permission_type)
            .ok_or_else(|| bad("permission type", permission_type))?,
    })
}

impl Admin {
    /// Creates ACLs; each gets its own result (INVALID_REQUEST for a malformed one,
    /// SECURITY_DISABLED where the broker has no authorizer).
    pub async fn create_acls(&self, acls: &[AclBinding]) -> Result<Vec<(AclBinding, Result<()>)>> {
        let resp = self
            .retrying("creating ACLs", || async {
                let conn = self.cluster.any().await?;
                let v = conn.version_for(ApiKey::CreateAcls, CREATE_ACLS)?;
                let mut req = CreateAclsRequest::default();
                req.creations = acls
                    .iter()
                    .map(|a| {
                        let mut c = AclCreation::default();
                        c.resource_type = a.resource_type.code();
                        c.resource_name = sb(&a.resource_name);
                        c.resource_pattern_type = a.pattern_type.code();
                        c.principal = sb(&a.principal);
                        c.host = sb(&a.host);
                        c.operation = a.operation.code();
                        c.permission_type = a.permission_type.code();
                        c
                    })
                    .collect();
                conn.request(&req, v).await
            })
            .await?;
        if resp.results.len() != acls.len() {
            return Err(ClientError::Protocol(format!(
                "CreateAcls answered {} results for {} ACLs",
                resp.results.len(),
                acls.len()
            )));
        }
        Ok(acls
            .iter()
            .cloned()
            .zip(
                resp.results
                    .iter()
                    .map(|r| err(r.error_code, r.error_message.as_ref())),
            )
            .collect())
    }

    /// The ACLs the filter matches.
    pub async fn describe_acls(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>> {
        let resp = self
            .retrying("listing ACLs", || async {
                let conn = self.cluster.any().await?;
                let v = conn.version_for(ApiKey::DescribeAcls, DESCRIBE_ACLS)?;
                let mut req = DescribeAclsRequest::default();
                req.resource_type_filter = filter.resource_type.code();
                req.resource_name_filter = filter.resource_name.as_deref().map(sb);
                req.pattern_type_filter = filter.pattern_type.code();
                req.principal_filter = filter.principal.as_deref().map(sb);
                req.host_filter = filter.host.as_deref().map(sb);
                req.operation = filter.operation.code();
                req.permission_type = filter.permission_type.code();
                conn.request(&req, v).await
            })
            .await?;
        err(resp.error_code, resp.error_message.as_ref())?;
        let mut out = Vec::new();
        for r in resp.resources {
            for a in r.acls {
                out.push(binding(
                    r.resource_type,
                    r.resource_name.to_string(),
                    r.pattern_type,
                    a.principal.to_string(),
                    a.host.to_string(),
                    a.operation,
                    a.permission_type,
                )?);
            }
        }
        Ok(out)
    }

    /// Deletes the ACLs each filter matches; each filter's result lists what it removed.
    pub async fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Result<Vec<AclBinding>>>> {
        let resp = self
            .retrying("deleting ACLs", || async {
                let conn = self.cluster.any().await?;
                let v = conn.version_for(ApiKey::DeleteAcls, DELETE_ACLS)?;
                let mut req = DeleteAclsRequest::default();
                req.filters = filters
                    .iter()
                    .map(|f| {
                        let mut d = DeleteAclsFilter::default();
                        d.resource_type_filter = f.resource_type.code();
                        d.resource_name_filter = f.resource_name.as_deref().map(sb);
                        d.pattern_type_filter = f.pattern_type.code();
                        d.principal_filter = f.principal.as_deref().map(sb);
                        d.host_filter = f.host.as_deref().map(sb);
                        d.operation = f.operation.code();
                        d.permission_type = f.permission_type.code();
                        d
                    })
                    .collect();
                conn.request(&req, v).await
            })
            .await?;
        if resp.filter_results.len() != filters.len() {
            return Err(ClientError::Protocol(format!(
                "DeleteAcls answered {} results for {} filters",
                resp.filter_results.len(),
                filters.len()
            )));
        }
        Ok(resp
            .filter_results
            .into_iter()
            .map(|r| {
                err(r.error_code, r.error_message.as_ref())?;
                r.matching_acls
                    .into_iter()
                    .map(|m| {
                        err(m.error_code, m.error_message.as_ref())?;
                        binding(
                            m.resource_type,
                            m.resource_name.to_string(),
                            m.pattern_type,
                            m.principal.to_string(),
                            m.host.to_string(),
                            m.operation,
                            m.permission_type,
                        )
                    })
                    .collect()
            })
            .collect())
    }
}
