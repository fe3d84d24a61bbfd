//! TLS listeners: Kafka's `SSL` security protocol, served with rustls. Configured with
//! Kafka's keys, for one listener (`listener.name.<name>.ssl.*`, name in lower case) or for
//! all (`ssl.*`):
//!
//! - `ssl.keystore.type=PEM` with `ssl.keystore.location` naming a PEM file that holds the
//!   private key and the certificate chain (or the PEM text itself in `ssl.keystore.key`
//!   and `ssl.keystore.certificate.chain`).
//! - `ssl.truststore.type=PEM` with `ssl.truststore.location` (or
//!   `ssl.truststore.certificates`): the CAs that client certificates must chain to.
//! - `ssl.client.auth`: `none` (the default), `requested` or `required`.
//! - `ssl.enabled.protocols`: `TLSv1.2` and/or `TLSv1.3` (both by default).
//!
//! JKS and PKCS12 keystores are refused with the command that converts them; so is an
//! encrypted private key (`ssl.key.password`), which rustls cannot read.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// The `ssl.*` settings read here.
pub const HONOURED: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.principal.mapping.rules",
];

/// Kafka `ssl.*` settings accepted and left alone, and why.
pub const IGNORED: &[(&str, &str)] = &[
    ("ssl.keystore.password", "PEM keystores have no password"),
    (
        "ssl.truststore.password",
        "PEM truststores have no password",
    ),
    (
        "ssl.protocol",
        "rustls negotiates the highest version in ssl.enabled.protocols",
    ),
    ("ssl.cipher.suites", "rustls offers its own safe suites"),
    ("ssl.endpoint.identification.algorithm", "a client setting"),
    ("ssl.keymanager.algorithm", "a JVM setting"),
    ("ssl.trustmanager.algorithm", "a JVM setting"),
    ("ssl.secure.random.implementation", "a JVM setting"),
    ("ssl.engine.factory.class", "a JVM setting"),
    ("ssl.allow.dn.changes", "no reconfiguration of keystores"),
    ("ssl.allow.san.changes", "no reconfiguration of keystores"),
];

/// Whether a broker setting holds a secret, which DescribeConfigs must not show (Kafka's
/// PASSWORD-typed settings): the PEM private key, and every password.
pub fn is_sensitive(key: &str) -> bool {
    key.ends_with("ssl.keystore.key") || key.contains("password") || key.ends_with("jaas.config")
}

/// A listener's setting: `listener.name.<name>.<key>` (name in lower case), else `<key>`.
fn setting(name: &str, props: &BTreeMap<String, String>, key: &str) -> Option<String> {
    props
        .get(&format!(
            "listener.name.{}.{key}",
            name.to_ascii_lowercase()
        ))
        .or_else(|| props.get(key))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// How an `SSL` listener names the principal of a client certificate.
pub fn principal_mapper(
    name: &str,
    props: &BTreeMap<String, String>,
) -> Result<crate::principal::PrincipalMapper, String> {
    match setting(name, props, "ssl.principal.mapping.rules") {
        None => Ok(Default::default()),
        Some(rules) => crate::principal::PrincipalMapper::parse(&rules)
            .map_err(|e| format!("listener {name} (SSL): {e}")),
    }
}

/// The TLS configuration of listener `name`, from the broker's properties.
pub fn server_config(
    name: &str,
    props: &BTreeMap<String, String>,
) -> Result<Arc<ServerConfig>, String> {
    let get = |key: &str| setting(name, props, key);
    let err = |msg: String| format!("listener {name} (SSL): {msg}");

    for (key, what) in [
        ("ssl.keystore.type", "keystore"),
        ("ssl.truststore.type", "truststore"),
    ] {
        if let Some(t) = get(key) {
            if !t.eq_ignore_ascii_case("PEM") {
                return Err(err(format!(
                    "{key}={t}: Weir reads PEM {what}s only; convert it, e.g. \
                     `keytool -importkeystore -srckeystore X.jks -destkeystore X.p12 \
                     -deststoretype PKCS12` then `openssl pkcs12 -in X.p12 -nodes -out X.pem`"
                )));
            }
        }
    }

    let keystore = match (
        get("ssl.keystore.location"),
        get("ssl.keystore.key"),
        get("ssl.keystore.certificate.chain"),
    ) {
        (Some(path), _, _) => {
            std::fs::read(&path).map_err(|e| err(format!("ssl.keystore.location {path}: {e}")))?
        }
        (None, Some(key), Some(chain)) => format!("{key}\n{chain}").into_bytes(),
        _ => {
            return Err(err(
                "set ssl.keystore.location to a PEM file holding the private key and the \
                 certificate chain (with ssl.keystore.type=PEM)"
                    .into(),
            ))
        }
    };
    if String::from_utf8_lossy(&keystore).contains("ENCRYPTED PRIVATE KEY") {
        return Err(err(
            "the private key is encrypted (ssl.key.password), which Weir cannot read; \
             decrypt it with `openssl pkcs8 -in key.pem -out plain-key.pem`"
                .into(),
        ));
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&keystore)
        .collect::<Result<_, _>>()
        .map_err(|e| err(format!("reading the keystore's certificates: {e}")))?;
    if chain.is_empty() {
        return Err(err("the keystore holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(&keystore)
        .map_err(|e| err(format!("the keystore holds no private key: {e}")))?;

    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        match get("ssl.enabled.protocols") {
            None => vec![&rustls::version::TLS13, &rustls::version::TLS12],
            Some(list) => {
                let mut v = Vec::new();
                for p in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    match p {
                        "TLSv1.3" => v.push(&rustls::version::TLS13),
                        "TLSv1.2" => v.push(&rustls::version::TLS12),
                        other => {
                            return Err(err(format!(
                                "ssl.enabled.protocols: {other} is not offered (TLSv1.2, TLSv1.3)"
                            )))
                        }
                    }
                }
                v
            }
        };

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| err(e.to_string()))?;
    let client_auth = get("ssl.client.auth").unwrap_or_else(|| "none".into());
    let builder = match client_auth.to_ascii_lowercase().as_str() {
        "none" => builder.with_no_client_auth(),
        mode @ ("required" | "requested") => {
            let trusted = match (
                get("ssl.truststore.location"),
                get("ssl.truststore.certificates"),
            ) {
                (Some(path), _) => std::fs::read(&path)
                    .map_err(|e| err(format!("ssl.truststore.location {path}: {e}")))?,
                (None, Some(pem)) => pem.into_bytes(),
                _ => {
                    return Err(err(format!(
                        "ssl.client.auth={mode} needs ssl.truststore.location: a PEM file of \
                         the CAs that client certificates chain to"
                    )))
                }
            };
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&trusted) {
                let cert = cert.map_err(|e| err(format!("reading the truststore: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| err(format!("a truststore certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(err("the truststore holds no certificate".into()));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if mode == "requested" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| err(e.to_string()))?)
        }
        other => {
            return Err(err(format!(
                "ssl.client.auth={other}: use none, requested or required"
            )))
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| err(format!("the keystore's key and certificate: {e}")))?;
    Ok(Arc::new(config))
}
