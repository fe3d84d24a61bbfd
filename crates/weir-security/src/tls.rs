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
//!
//! A listener's keystore and truststore can be replaced while the broker runs, as Kafka's
//! `kafka-configs --entity-type brokers --alter` replaces them (KIP-226): a new
//! [`ListenerTls`] is built from the new settings and checked against the one in use by
//! [`ListenerTls::ensure_compatible`] (Kafka's rule: the same subject and at least the same
//! subject alternative names, unless `ssl.allow.dn.changes`/`ssl.allow.san.changes`), and new
//! connections get it; open ones keep the one they shook hands with.

use std::collections::{BTreeMap, BTreeSet};
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
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
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
];

/// Whether `key` is one of the settings a listener's TLS is rebuilt from when they change
/// while the broker runs: every one read here but the principal mapping rules, which are
/// read once, at start.
pub fn is_reloadable(key: &str) -> bool {
    key != "ssl.principal.mapping.rules" && HONOURED.contains(&key)
}

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

/// A listener's TLS: the rustls configuration new connections shake hands with, and what it
/// was built from.
pub struct ListenerTls {
    pub config: Arc<ServerConfig>,
    /// The listener's reloadable settings and the bytes of the files they name: the same
    /// again is no change.
    built_from: (BTreeMap<String, String>, Vec<u8>, Vec<u8>),
    /// The subject of the keystore's own certificate (RFC 2253, as Java names it).
    pub subject: String,
    /// Its subject alternative names, as Java lists them (`[2, localhost]`, `[7, 127.0.0.1]`).
    pub alt_names: BTreeSet<String>,
    /// Whether a replacement may change the subject, and drop alternative names.
    allow_dn_changes: bool,
    allow_san_changes: bool,
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerTls")
            .field("subject", &self.subject)
            .field("alt_names", &self.alt_names)
            .finish_non_exhaustive()
    }
}

/// Why a listener's TLS could not be built: its keystore does not load (the file is missing
/// or holds no key and certificate), or another setting is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsError {
    Keystore { source: String, why: String },
    Setting(String),
}

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsError::Keystore { why, .. } | TlsError::Setting(why) => f.write_str(why),
        }
    }
}

impl ListenerTls {
    /// Whether `settings` (the broker's properties as they now apply) would build this
    /// same TLS: the same reloadable settings, and files with the same bytes.
    pub fn same_as(&self, name: &str, props: &BTreeMap<String, String>) -> bool {
        inputs(name, props).is_ok_and(|i| i == self.built_from)
    }

    /// Whether `props` hold the same reloadable settings (whatever the files now hold).
    pub fn same_settings(&self, name: &str, props: &BTreeMap<String, String>) -> bool {
        settings_of(name, props) == self.built_from.0
    }

    /// Kafka's check of a replacement keystore against the one in use (SslFactory's): the
    /// same subject (compared as Java compares principals, ignoring case), unless
    /// `ssl.allow.dn.changes`; every alternative name kept, unless `ssl.allow.san.changes`.
    /// The error is Kafka's wording.
    pub fn ensure_compatible(&self, new: &ListenerTls) -> Result<(), String> {
        if !new.allow_dn_changes && !self.subject.eq_ignore_ascii_case(&new.subject) {
            return Err(format!(
                "Keystore DistinguishedName does not match:  existing={{alias=kafka, DN={}}}, \
                 new={{alias=kafka, DN={}}}",
                self.subject, new.subject
            ));
        }
        if !new.allow_san_changes && !new.alt_names.is_superset(&self.alt_names) {
            let list = |s: &BTreeSet<String>| {
                format!("[{}]", s.iter().cloned().collect::<Vec<_>>().join(", "))
            };
            return Err(format!(
                "Keystore SubjectAltNames do not match:  existing={{alias=kafka, SAN={}}}, \
                 new={{alias=kafka, SAN={}}}",
                list(&self.alt_names),
                list(&new.alt_names)
            ));
        }
        Ok(())
    }
}

/// A listener's reloadable settings, and the keystore's and truststore's bytes.
type Inputs = (BTreeMap<String, String>, Vec<u8>, Vec<u8>);

fn settings_of(name: &str, props: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    HONOURED
        .iter()
        .filter(|k| is_reloadable(k))
        .filter_map(|k| setting(name, props, k).map(|v| (k.to_string(), v)))
        .collect()
}

fn inputs(name: &str, props: &BTreeMap<String, String>) -> Result<Inputs, TlsError> {
    let settings = settings_of(name, props);
    let read = |key: &str| -> Result<Vec<u8>, String> {
        match settings.get(key) {
            Some(path) => std::fs::read(path).map_err(|e| format!("{key} {path}: {e}")),
            None => Ok(Vec::new()),
        }
    };
    let keystore = read("ssl.keystore.location").map_err(|why| TlsError::Keystore {
        source: settings["ssl.keystore.location"].clone(),
        why: format!("listener {name} (SSL): {why}"),
    })?;
    let truststore = read("ssl.truststore.location")
        .map_err(|why| TlsError::Setting(format!("listener {name} (SSL): {why}")))?;
    Ok((settings, keystore, truststore))
}

/// The TLS configuration of listener `name`, from the broker's properties.
pub fn server_config(
    name: &str,
    props: &BTreeMap<String, String>,
) -> Result<Arc<ServerConfig>, String> {
    listener_tls(name, props)
        .map(|t| t.config)
        .map_err(|e| e.to_string())
}

/// Listener `name`'s TLS, from the broker's properties.
pub fn listener_tls(name: &str, props: &BTreeMap<String, String>) -> Result<ListenerTls, TlsError> {
    let err = |msg: String| TlsError::Setting(format!("listener {name} (SSL): {msg}"));
    // The store types first: a JKS file is better told how to convert than that it is
    // missing or does not parse.
    let settings = settings_of(name, props);
    for (key, what) in [
        ("ssl.keystore.type", "keystore"),
        ("ssl.truststore.type", "truststore"),
    ] {
        if let Some(t) = settings.get(key) {
            if !t.eq_ignore_ascii_case("PEM") {
                return Err(err(format!(
                    "{key}={t}: Weir reads PEM {what}s only; convert it, e.g. \
                     `keytool -importkeystore -srckeystore X.jks -destkeystore X.p12 \
                     -deststoretype PKCS12` then `openssl pkcs12 -in X.p12 -nodes -out X.pem`"
                )));
            }
        }
    }
    let built_from = inputs(name, props)?;
    let get = |key: &str| built_from.0.get(key).cloned();
    let keystore_source = get("ssl.keystore.location").unwrap_or_else(|| "ssl.keystore.key".into());
    let bad_keystore = |msg: String| TlsError::Keystore {
        source: keystore_source.clone(),
        why: format!("listener {name} (SSL): {msg}"),
    };

    let keystore = match (
        get("ssl.keystore.location"),
        get("ssl.keystore.key"),
        get("ssl.keystore.certificate.chain"),
    ) {
        (Some(_), _, _) => built_from.1.clone(),
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
        return Err(bad_keystore(
            "the private key is encrypted (ssl.key.password), which Weir cannot read; \
             decrypt it with `openssl pkcs8 -in key.pem -out plain-key.pem`"
                .into(),
        ));
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&keystore)
        .collect::<Result<_, _>>()
        .map_err(|e| bad_keystore(format!("reading the keystore's certificates: {e}")))?;
    let Some(leaf) = chain.first() else {
        return Err(bad_keystore("the keystore holds no certificate".into()));
    };
    let subject = crate::principal::subject_dn(leaf)
        .map_err(|e| bad_keystore(format!("the keystore's certificate: {e}")))?;
    let alt_names = crate::principal::subject_alt_names(leaf)
        .map_err(|e| bad_keystore(format!("the keystore's certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(&keystore)
        .map_err(|e| bad_keystore(format!("the keystore holds no private key: {e}")))?;

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
                (Some(_), _) => built_from.2.clone(),
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
        .map_err(|e| bad_keystore(format!("the keystore's key and certificate: {e}")))?;
    let flag = |key: &str| -> Result<bool, TlsError> {
        match get(key) {
            None => Ok(false),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(err(format!("{key}={v}: use true or false"))),
        }
    };
    Ok(ListenerTls {
        config: Arc::new(config),
        subject,
        alt_names,
        allow_dn_changes: flag("ssl.allow.dn.changes")?,
        allow_san_changes: flag("ssl.allow.san.changes")?,
        built_from,
    })
}
