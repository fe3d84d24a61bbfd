//! ACLs through the admin client: CreateAcls, DescribeAcls and DeleteAcls, with Kafka's
//! `AclBinding` and `AclBindingFilter` (weir-kafka's, the same the broker checks). Each call
//! goes to any broker, as Kafka sends it to the least loaded node.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};

use weir_kafka::acl::{AclBinding, AclBindingFilter};

use super::{err, no_routing_codes, sb, Admin, Route};
use crate::error::{ClientError, Result};

const CREATE_ACLS: (i16, i16) = (1, 3);
const DESCRIBE_ACLS: (i16, i16) = (1, 3);
const DELETE_ACLS: (i16, i16) = (1, 3);

/// A binding from a broker's codes; an unknown code is a protocol error.
#[allow(clippy::too_many_arguments)]
fn binding(
    resource_type: i8,
    resource_name: String,
    pattern_type: i8,
    principal: String,
    host: String,
    operation: i8,
    permission: i8,
) -> Result<AclBinding> {
    AclBinding::from_wire(
        resource_type,
        resource_name,
        pattern_type,
        principal,
        host,
        operation,
        permission,
    )
    .map_err(ClientError::Protocol)
}

impl Admin {
    /// Creates ACLs; each gets its own result (INVALID_REQUEST for a malformed one,
    /// SECURITY_DISABLED where the broker has no authorizer).
    pub async fn create_acls(&self, acls: &[AclBinding]) -> Result<Vec<(AclBinding, Result<()>)>> {
        let build = |_| {
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
                    c.permission_type = a.permission.code();
                    c
                })
                .collect();
            req
        };
        let resp = self
            .send(
                "creating ACLs",
                Route::Any,
                CREATE_ACLS,
                build,
                no_routing_codes,
            )
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
        let build = |_| {
            let (resource_type, pattern_type, operation, permission) = filter.wire_codes();
            let mut req = DescribeAclsRequest::default();
            req.resource_type_filter = resource_type;
            req.resource_name_filter = filter.resource_name.as_deref().map(sb);
            req.pattern_type_filter = pattern_type;
            req.principal_filter = filter.principal.as_deref().map(sb);
            req.host_filter = filter.host.as_deref().map(sb);
            req.operation = operation;
            req.permission_type = permission;
            req
        };
        let resp = self
            .send(
                "listing ACLs",
                Route::Any,
                DESCRIBE_ACLS,
                build,
                no_routing_codes,
            )
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
        let build = |_| {
            let mut req = DeleteAclsRequest::default();
            req.filters = filters
                .iter()
                .map(|f| {
                    let (resource_type, pattern_type, operation, permission) = f.wire_codes();
                    let mut d = DeleteAclsFilter::default();
                    d.resource_type_filter = resource_type;
                    d.resource_name_filter = f.resource_name.as_deref().map(sb);
                    d.pattern_type_filter = pattern_type;
                    d.principal_filter = f.principal.as_deref().map(sb);
                    d.host_filter = f.host.as_deref().map(sb);
                    d.operation = operation;
                    d.permission_type = permission;
                    d
                })
                .collect();
            req
        };
        let resp = self
            .send(
                "deleting ACLs",
                Route::Any,
                DELETE_ACLS,
                build,
                no_routing_codes,
            )
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
