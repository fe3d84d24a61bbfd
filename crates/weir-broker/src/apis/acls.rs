//! CreateAcls, DescribeAcls and DeleteAcls: the ACLs of `acl::Authorizer`, managed as
//! Kafka's Admin client and `kafka-acls.sh` manage them. Changing ACLs takes ALTER on the
//! cluster, listing them DESCRIBE; without an authorizer each answers SECURITY_DISABLED.

use std::sync::Arc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;

use weir_kafka::acl::{AclBinding, AclBindingFilter, Operation};

use weir_kafka::ApiError;
use weir_security::acl;
use weir_security::Authorizer;

use crate::broker::Broker;
use crate::request::RequestContext;

fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

const NO_AUTHORIZER: &str = "no authorizer is configured (set authorizer.class.name)";

/// The authorizer whose ACLs this request may use for `op`, or why it may not.
fn authorizer<'a>(
    broker: &'a Broker,
    ctx: &RequestContext,
    op: Operation,
) -> Result<&'a Authorizer, ApiError> {
    let Some(authorizer) = broker.authorizer.as_ref() else {
        return Err(ApiError::new(E::SecurityDisabled, NO_AUTHORIZER));
    };
    if !broker.allowed_on_cluster(ctx, op) {
        return Err(ApiError::new(
            E::ClusterAuthorizationFailed,
            format!(
                "{} may not {} ACLs",
                ctx.principal,
                if op == Operation::Alter {
                    "change"
                } else {
                    "list"
                }
            ),
        ));
    }
    Ok(authorizer)
}

fn binding(
    c: &kafka_protocol::messages::create_acls_request::AclCreation,
) -> Result<AclBinding, String> {
    let b = AclBinding::from_wire(
        c.resource_type,
        c.resource_name.to_string(),
        c.resource_pattern_type,
        c.principal.to_string(),
        c.host.to_string(),
        c.operation,
        c.permission_type,
    )?;
    b.validate()?;
    Ok(b)
}

pub fn create_acls(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: CreateAclsRequest,
) -> CreateAclsResponse {
    let result = |e: Option<&ApiError>| {
        let mut r = AclCreationResult::default();
        if let Some(e) = e {
            r.error_code = e.code;
            r.error_message = Some(sb(e.message.clone()));
        }
        r
    };
    let mut resp = CreateAclsResponse::default();
    let authorizer = match authorizer(broker, ctx, Operation::Alter) {
        Ok(a) => a,
        Err(e) => {
            resp.results = req.creations.iter().map(|_| result(Some(&e))).collect();
            return resp;
        }
    };
    let checked: Vec<Result<AclBinding, ApiError>> = req
        .creations
        .iter()
        .map(|c| binding(c).map_err(|m| ApiError::new(E::InvalidRequest, m)))
        .collect();
    let valid: Vec<AclBinding> = checked
        .iter()
        .filter_map(|c| c.as_ref().ok().cloned())
        .collect();
    let saved = authorizer.change(&valid, &[]);
    if let Err(e) = &saved {
        tracing::error!("saving ACLs: {e}");
    }
    for b in &valid {
        if saved.is_ok() {
            tracing::info!(principal = %ctx.principal, "ACL added: {}", b.describe());
        }
    }
    resp.results = checked
        .iter()
        .map(|c| match (c, &saved) {
            (Err(e), _) => result(Some(e)),
            (Ok(_), Err(e)) => result(Some(&ApiError::new(
                E::UnknownServerError,
                format!("the ACLs could not be saved: {e}"),
            ))),
            (Ok(_), Ok(_)) => result(None),
        })
        .collect();
    resp
}

pub fn describe_acls(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    let authorizer = match authorizer(broker, ctx, Operation::Describe) {
        Ok(a) => a,
        Err(e) => {
            resp.error_code = e.code;
            resp.error_message = Some(sb(e.message));
            return resp;
        }
    };
    let filter = AclBindingFilter::from_wire(
        req.resource_type_filter,
        req.resource_name_filter.as_ref().map(|s| s.as_str()),
        req.pattern_type_filter,
        req.principal_filter.as_ref().map(|s| s.as_str()),
        req.host_filter.as_ref().map(|s| s.as_str()),
        req.operation,
        req.permission_type,
    );
    let filter = match filter {
        Ok(f) => f,
        Err(m) => {
            resp.error_code = E::InvalidRequest.code();
            resp.error_message = Some(sb(m));
            return resp;
        }
    };
    let found = authorizer.describe(&filter);
    resp.resources = acl::group_by_resource(found)
        .into_iter()
        .map(|((rt, name, pt), bindings)| {
            let mut r = DescribeAclsResource::default();
            r.resource_type = rt.code();
            r.resource_name = sb(name);
            r.pattern_type = pt.code();
            r.acls = bindings
                .into_iter()
                .map(|b| {
                    let mut d = AclDescription::default();
                    d.principal = sb(b.principal);
                    d.host = sb(b.host);
                    d.operation = b.operation.code();
                    d.permission_type = b.permission.code();
                    d
                })
                .collect();
            r
        })
        .collect();
    resp
}

pub fn delete_acls(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let failed = |e: &ApiError| {
        let mut r = DeleteAclsFilterResult::default();
        r.error_code = e.code;
        r.error_message = Some(sb(e.message.clone()));
        r
    };
    let mut resp = DeleteAclsResponse::default();
    let authorizer = match authorizer(broker, ctx, Operation::Alter) {
        Ok(a) => a,
        Err(e) => {
            resp.filter_results = req.filters.iter().map(|_| failed(&e)).collect();
            return resp;
        }
    };
    let filters: Vec<Result<AclBindingFilter, ApiError>> = req
        .filters
        .iter()
        .map(|f| {
            AclBindingFilter::from_wire(
                f.resource_type_filter,
                f.resource_name_filter.as_ref().map(|s| s.as_str()),
                f.pattern_type_filter,
                f.principal_filter.as_ref().map(|s| s.as_str()),
                f.host_filter.as_ref().map(|s| s.as_str()),
                f.operation,
                f.permission_type,
            )
            .map_err(|m| ApiError::new(E::InvalidRequest, m))
        })
        .collect();
    let valid: Vec<AclBindingFilter> = filters
        .iter()
        .filter_map(|f| f.as_ref().ok().cloned())
        .collect();
    let removed = authorizer.change(&[], &valid);
    let mut removed = match removed {
        Ok(r) => r.into_iter(),
        Err(e) => {
            tracing::error!("saving ACLs: {e}");
            let e = ApiError::new(
                E::UnknownServerError,
                format!("the ACLs could not be saved: {e}"),
            );
            resp.filter_results = req.filters.iter().map(|_| failed(&e)).collect();
            return resp;
        }
    };
    resp.filter_results = filters
        .iter()
        .map(|f| match f {
            Err(e) => failed(e),
            Ok(_) => {
                let mut r = DeleteAclsFilterResult::default();
                r.matching_acls = removed
                    .next()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|b| {
                        tracing::info!(principal = %ctx.principal, "ACL removed: {}", b.describe());
                        let mut m = DeleteAclsMatchingAcl::default();
                        m.resource_type = b.resource_type.code();
                        m.resource_name = sb(b.resource_name);
                        m.pattern_type = b.pattern_type.code();
                        m.principal = sb(b.principal);
                        m.host = sb(b.host);
                        m.operation = b.operation.code();
                        m.permission_type = b.permission.code();
                        m
                    })
                    .collect();
                r
            }
        })
        .collect();
    resp
}
