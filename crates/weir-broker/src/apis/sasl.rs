//! SaslHandshake and SaslAuthenticate (the connection's `sasl::Session` does the work; each
//! answer says whether the connection closes after it), and the SCRAM credential APIs:
//! DescribeUserScramCredentials and AlterUserScramCredentials.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, ResponseKind,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;

use weir_kafka::acl::Operation;
use weir_security::sasl::{Credential, Scram, Session, MAX_ITERATIONS, MIN_ITERATIONS};

use crate::broker::Broker;
use crate::request::{RequestContext, Response};

pub fn handshake(
    ctx: &RequestContext,
    session: &mut Session,
    req: SaslHandshakeRequest,
) -> (Response, bool) {
    let a = session.handshake(&req.mechanism, ctx.version);
    let mut r = SaslHandshakeResponse::default();
    r.error_code = a.error;
    r.mechanisms = a
        .mechanisms
        .into_iter()
        .map(StrBytes::from_string)
        .collect();
    (Response::Message(ResponseKind::SaslHandshake(r)), a.close)
}

pub fn authenticate(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    session: &mut Session,
    req: SaslAuthenticateRequest,
) -> (Response, bool) {
    let a = session.authenticate(&req.auth_bytes, &broker.users);
    if a.error != 0 {
        tracing::info!(peer = %ctx.peer, listener = %ctx.listener, "SASL authentication failed: {}",
            a.message.as_deref().unwrap_or(""));
    }
    let mut r = SaslAuthenticateResponse::default();
    r.error_code = a.error;
    r.error_message = a.message.map(StrBytes::from_string);
    r.auth_bytes = Bytes::from(a.bytes);
    if a.error == 0 && ctx.version >= 1 {
        r.session_lifetime_ms = session.lifetime_ms();
    }
    (
        Response::Message(ResponseKind::SaslAuthenticate(r)),
        a.close,
    )
}

pub fn describe_credentials(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let mut resp = DescribeUserScramCredentialsResponse::default();
    if !broker.allowed_on_cluster(ctx, Operation::Describe) {
        resp.error_code = E::ClusterAuthorizationFailed.code();
        resp.error_message = Some(StrBytes::from_string(format!(
            "{} may not describe users",
            ctx.principal
        )));
        return resp;
    }
    let all = broker.users.describe();
    let wanted: Vec<String> = match &req.users {
        Some(users) if !users.is_empty() => users.iter().map(|u| u.name.to_string()).collect(),
        _ => all.keys().cloned().collect(),
    };
    let mut seen = HashSet::new();
    for user in wanted {
        let mut r = DescribeUserScramCredentialsResult::default();
        r.user = StrBytes::from_string(user.clone());
        if !seen.insert(user.clone()) {
            r.error_code = E::DuplicateResource.code();
            r.error_message = Some(StrBytes::from_string(format!("{user} is asked for twice")));
        } else {
            match all.get(&user) {
                Some(mechs) => {
                    r.credential_infos = mechs
                        .iter()
                        .map(|(m, iterations)| {
                            let mut c = CredentialInfo::default();
                            c.mechanism = m.id();
                            c.iterations = *iterations as i32;
                            c
                        })
                        .collect();
                }
                None => {
                    r.error_code = E::ResourceNotFound.code();
                    r.error_message = Some(StrBytes::from_string(format!(
                        "attempt to describe a user credential that does not exist: {user}"
                    )));
                }
            }
        }
        resp.results.push(r);
    }
    resp
}

/// One alteration's fate: done, or refused with this error.
type Outcome = Result<(), (E, String)>;

pub fn alter_credentials(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut resp = AlterUserScramCredentialsResponse::default();
    if !broker.allowed_on_cluster(ctx, Operation::Alter) {
        let msg = format!("{} may not change users", ctx.principal);
        resp.results = req
            .deletions
            .iter()
            .map(|d| &d.name)
            .chain(req.upsertions.iter().map(|u| &u.name))
            .map(|user| {
                let mut out = AlterUserScramCredentialsResult::default();
                out.user = user.clone();
                out.error_code = E::ClusterAuthorizationFailed.code();
                out.error_message = Some(StrBytes::from_string(msg.clone()));
                out
            })
            .collect();
        return resp;
    }
    let existing = broker.users.describe();
    // A user named in more than one alteration has all of them refused, as Kafka does.
    let mut count = std::collections::HashMap::new();
    for n in req
        .deletions
        .iter()
        .map(|d| &d.name)
        .chain(req.upsertions.iter().map(|u| &u.name))
    {
        *count.entry(n.to_string()).or_insert(0) += 1;
    }
    let mut upserts = Vec::new();
    let mut deletes = Vec::new();
    let mut results: Vec<(String, Outcome)> = Vec::new();
    for d in &req.deletions {
        let user = d.name.to_string();
        let r = (|| {
            let mech = Scram::from_id(d.mechanism).ok_or((
                E::UnsupportedSaslMechanism,
                format!("unknown SCRAM mechanism {}", d.mechanism),
            ))?;
            if count[&user] > 1 {
                return Err((
                    E::DuplicateResource,
                    format!("{user} is altered more than once"),
                ));
            }
            if !existing
                .get(&user)
                .is_some_and(|ms| ms.iter().any(|(m, _)| *m == mech))
            {
                return Err((
                    E::ResourceNotFound,
                    format!("attempt to delete a user credential that does not exist: {user}"),
                ));
            }
            deletes.push((user.clone(), mech));
            Ok(())
        })();
        results.push((user, r));
    }
    for u in &req.upsertions {
        let user = u.name.to_string();
        let r = (|| {
            let mech = Scram::from_id(u.mechanism).ok_or((
                E::UnsupportedSaslMechanism,
                format!("unknown SCRAM mechanism {}", u.mechanism),
            ))?;
            if count[&user] > 1 {
                return Err((
                    E::DuplicateResource,
                    format!("{user} is altered more than once"),
                ));
            }
            if user.is_empty() {
                return Err((E::UnacceptableCredential, "the user name is empty".into()));
            }
            let iterations = u32::try_from(u.iterations).unwrap_or(0);
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
                return Err((
                    E::UnacceptableCredential,
                    format!(
                        "{} iterations: {} takes {MIN_ITERATIONS} to {MAX_ITERATIONS}",
                        u.iterations,
                        mech.name()
                    ),
                ));
            }
            if u.salt.is_empty() || u.salted_password.is_empty() {
                return Err((
                    E::UnacceptableCredential,
                    "an empty salt or password".into(),
                ));
            }
            let cred =
                Credential::from_salted(mech, &u.salted_password, u.salt.to_vec(), iterations);
            upserts.push((user.clone(), mech, cred));
            Ok(())
        })();
        results.push((user, r));
    }
    let saved = broker.users.change(upserts, deletes);
    for (user, r) in results {
        let mut out = AlterUserScramCredentialsResult::default();
        out.user = StrBytes::from_string(user);
        let r = r.and_then(|()| {
            saved.clone().map_err(|e| {
                (
                    E::UnknownServerError,
                    format!("saving the credentials: {e}"),
                )
            })
        });
        if let Err((code, msg)) = r {
            out.error_code = code.code();
            out.error_message = Some(StrBytes::from_string(msg));
        }
        resp.results.push(out);
    }
    resp
}
