//! How the client reaches a secured broker, with Kafka's client settings:
//! `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); TLS from PEM files
//! (`ssl.truststore.*`, and `ssl.keystore.*` for a client certificate); SASL/PLAIN and
//! SASL/SCRAM-SHA-256/512 with the user and password of `sasl.jaas.config`, as Java
//! clients give them.
//!
//! TLS is rustls (ring provider). The SCRAM client (RFC 5802) is written here over
//! RustCrypto's primitives: the client never depends on the broker crate, whose server
//! side is the other half of the same exchange.

use std::sync::Arc;

use base64::Engine;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use sha2::{Digest, Sha256, Sha512};

use crate::error::{ClientError, Result};
use crate::props::Props;

/// Where a system keeps its CA certificates (Debian, Ubuntu, Alpine; Fedora, RHEL), for
/// a truststore not given.
const SYSTEM_CAS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// A SASL mechanism the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// SASL credentials.
#[derive(Clone)]
pub struct Sasl {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Sasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sasl")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// TLS and SASL for every connection of a client.
#[derive(Clone, Default)]
pub struct Security {
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub sasl: Option<Sasl>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .finish()
    }
}

fn config_error(msg: impl Into<String>) -> ClientError {
    ClientError::Config(msg.into())
}

impl Props {
    /// `security.protocol` and the `ssl.*` / `sasl.*` settings it needs.
    pub(crate) fn security(&mut self) -> Result<Security> {
        let protocol = self
            .string("security.protocol", "PLAINTEXT")
            .to_ascii_uppercase();
        let (tls, sasl) = match protocol.as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => {
                return Err(config_error(format!(
                    "security.protocol={other}: use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
                )))
            }
        };
        // Read every key, so that ones set for the other protocols are not "unknown".
        let settings: Vec<(&'static str, String)> = [
            "ssl.truststore.type",
            "ssl.truststore.location",
            "ssl.truststore.certificates",
            "ssl.keystore.type",
            "ssl.keystore.location",
            "ssl.keystore.key",
            "ssl.keystore.certificate.chain",
            "ssl.endpoint.identification.algorithm",
            "sasl.mechanism",
            "sasl.jaas.config",
        ]
        .into_iter()
        .map(|k| (k, self.string(k, "").trim().to_string()))
        .collect();
        let get = |key: &str| {
            settings
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        // Kafka's default, "https", checks that the certificate names the broker's host;
        // set empty, it does not.
        let verify_host = match get("ssl.endpoint.identification.algorithm") {
            Some(a) if a.eq_ignore_ascii_case("https") => true,
            Some(a) => {
                return Err(config_error(format!(
                    "ssl.endpoint.identification.algorithm={a}: use https, or empty"
                )))
            }
            None => !self.is_set("ssl.endpoint.identification.algorithm"),
        };
        let tls = if tls {
            Some(Arc::new(tls_config(&get, verify_host)?))
        } else {
            None
        };
        let sasl = if sasl { Some(sasl_config(&get)?) } else { None };
        Ok(Security { tls, sasl })
    }
}

fn tls_config(
    get: &dyn Fn(&str) -> Option<String>,
    verify_host: bool,
) -> Result<rustls::ClientConfig> {
    for key in ["ssl.truststore.type", "ssl.keystore.type"] {
        if let Some(t) = get(key).filter(|t| !t.eq_ignore_ascii_case("PEM")) {
            return Err(config_error(format!(
                "{key}={t}: Weir's client reads PEM only (convert with keytool and openssl)"
            )));
        }
    }
    let trusted = match (
        get("ssl.truststore.location"),
        get("ssl.truststore.certificates"),
    ) {
        (Some(path), _) => std::fs::read(&path)
            .map_err(|e| config_error(format!("ssl.truststore.location {path}: {e}")))?,
        (None, Some(pem)) => pem.into_bytes(),
        (None, None) => {
            let path = SYSTEM_CAS
                .iter()
                .find(|p| std::path::Path::new(p).exists())
                .ok_or_else(|| {
                    config_error(
                        "set ssl.truststore.location to a PEM file of the CAs the broker's \
                         certificate chains to (no system CA file was found)",
                    )
                })?;
            std::fs::read(path).map_err(|e| config_error(format!("{path}: {e}")))?
        }
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&trusted) {
        let cert = cert.map_err(|e| config_error(format!("reading the truststore: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| config_error(format!("a truststore certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(config_error("the truststore holds no certificate"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error(e.to_string()))?;
    let roots = Arc::new(roots);
    let builder = if verify_host {
        builder.with_root_certificates(roots)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyHostName(
                rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| config_error(e.to_string()))?,
            )))
    };
    let keystore = match (
        get("ssl.keystore.location"),
        get("ssl.keystore.key"),
        get("ssl.keystore.certificate.chain"),
    ) {
        (Some(path), _, _) => Some(
            std::fs::read(&path)
                .map_err(|e| config_error(format!("ssl.keystore.location {path}: {e}")))?,
        ),
        (None, Some(key), Some(chain)) => Some(format!("{key}\n{chain}").into_bytes()),
        _ => None,
    };
    match keystore {
        None => Ok(builder.with_no_client_auth()),
        Some(pem) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| config_error(format!("reading the keystore: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(&pem)
                .map_err(|e| config_error(format!("the keystore holds no private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| config_error(format!("the keystore: {e}")))
        }
    }
}

/// Checks the broker's chain but not that it names the host, as Kafka clients do with
/// `ssl.endpoint.identification.algorithm` set empty.
#[derive(Debug)]
struct AnyHostName(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn sasl_config(get: &dyn Fn(&str) -> Option<String>) -> Result<Sasl> {
    let mechanism = match get("sasl.mechanism")
        .map(|m| m.to_ascii_uppercase())
        .as_deref()
    {
        Some("PLAIN") => SaslMechanism::Plain,
        Some("SCRAM-SHA-256") => SaslMechanism::ScramSha256,
        Some("SCRAM-SHA-512") => SaslMechanism::ScramSha512,
        Some(other) => {
            return Err(config_error(format!(
            "sasl.mechanism={other}: Weir's client speaks PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512"
        )))
        }
        None => {
            return Err(config_error(
                "set sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512); Kafka's default, \
                 GSSAPI, is not supported",
            ))
        }
    };
    let jaas = get("sasl.jaas.config").ok_or_else(|| {
        config_error(
            "set sasl.jaas.config, e.g. org.apache.kafka.common.security.scram.ScramLoginModule \
             required username=\"alice\" password=\"secret\";",
        )
    })?;
    let field = |name: &str| -> Option<String> {
        let at = jaas.find(&format!("{name}=\""))? + name.len() + 2;
        let end = jaas[at..].find('"')?;
        Some(jaas[at..at + end].to_string())
    };
    match (field("username"), field("password")) {
        (Some(username), Some(password)) => Ok(Sasl {
            mechanism,
            username,
            password,
        }),
        _ => Err(config_error(
            "sasl.jaas.config needs username=\"…\" and password=\"…\"",
        )),
    }
}

/// One client side of a SASL exchange: the first token, then an answer to each of the
/// server's, until the server's last is checked.
pub(crate) enum Exchange {
    Plain,
    Scram {
        mechanism: SaslMechanism,
        nonce: String,
        client_first_bare: String,
        /// The server signature to expect, once the proof is sent.
        expected: Option<Vec<u8>>,
    },
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// RFC 5802's saslname: `=` and `,` escaped.
fn saslname(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

impl Exchange {
    /// The exchange and the client's first token; an error only when the OS has no random
    /// bytes for a SCRAM nonce.
    pub(crate) fn start(sasl: &Sasl) -> std::result::Result<(Exchange, Vec<u8>), String> {
        match sasl.mechanism {
            SaslMechanism::Plain => {
                let token = format!("\0{}\0{}", sasl.username, sasl.password);
                Ok((Exchange::Plain, token.into_bytes()))
            }
            mechanism => {
                let mut raw = [0u8; 24];
                getrandom::fill(&mut raw)
                    .map_err(|e| format!("no random bytes from the OS for the SCRAM nonce: {e}"))?;
                let nonce = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
                let client_first_bare = format!("n={},r={nonce}", saslname(&sasl.username));
                let token = format!("n,,{client_first_bare}").into_bytes();
                let ex = Exchange::Scram {
                    mechanism,
                    nonce,
                    client_first_bare,
                    expected: None,
                };
                Ok((ex, token))
            }
        }
    }

    /// The answer to the server's token, or `None` when the exchange is complete.
    pub(crate) fn step(
        &mut self,
        sasl: &Sasl,
        server: &[u8],
    ) -> std::result::Result<Option<Vec<u8>>, String> {
        match self {
            Exchange::Plain => Ok(None),
            Exchange::Scram {
                mechanism,
                nonce,
                client_first_bare,
                expected,
            } => {
                let server =
                    std::str::from_utf8(server).map_err(|_| "a non-UTF-8 SCRAM message")?;
                let attr = |name: char| {
                    server
                        .split(',')
                        .find_map(|p| p.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
                };
                if let Some(want) = expected.take() {
                    if let Some(e) = attr('e') {
                        return Err(format!("the broker refused the proof: {e}"));
                    }
                    let v = attr('v').ok_or("the broker's final SCRAM message has no signature")?;
                    let got = b64().decode(v).map_err(|_| "a bad server signature")?;
                    if got != want {
                        return Err("the broker's SCRAM signature is wrong: it does not know \
                                    the password"
                            .into());
                    }
                    return Ok(None);
                }
                let r = attr('r').ok_or("the broker's first SCRAM message has no nonce")?;
                if !r.starts_with(nonce.as_str()) || r.len() == nonce.len() {
                    return Err("the broker's SCRAM nonce does not extend ours".into());
                }
                let salt = b64()
                    .decode(attr('s').ok_or("no salt")?)
                    .map_err(|_| "a bad salt")?;
                let iterations: u32 = attr('i')
                    .and_then(|i| i.parse().ok())
                    .filter(|i| *i >= 1)
                    .ok_or("a bad iteration count")?;
                let m = *mechanism;
                let salted = salted_password(m, sasl.password.as_bytes(), &salt, iterations);
                let client_key = hmac(m, &salted, b"Client Key");
                let stored_key = hash(m, &client_key);
                let without_proof = format!("c=biws,r={r}");
                let auth_message = format!("{client_first_bare},{server},{without_proof}");
                let signature = hmac(m, &stored_key, auth_message.as_bytes());
                let proof: Vec<u8> = client_key
                    .iter()
                    .zip(&signature)
                    .map(|(a, b)| a ^ b)
                    .collect();
                let server_key = hmac(m, &salted, b"Server Key");
                *expected = Some(hmac(m, &server_key, auth_message.as_bytes()));
                Ok(Some(
                    format!("{without_proof},p={}", b64().encode(proof)).into_bytes(),
                ))
            }
        }
    }
}

fn hmac(m: SaslMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    fn mac<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
        // RFC 2104: HMAC takes a key of any length (a longer one is hashed first).
        let Ok(mut h) = <M as KeyInit>::new_from_slice(key) else {
            unreachable!("HMAC refused a key of {} bytes", key.len())
        };
        h.update(data);
        h.finalize().into_bytes().to_vec()
    }
    if m == SaslMechanism::ScramSha512 {
        mac::<Hmac<Sha512>>(key, data)
    } else {
        mac::<Hmac<Sha256>>(key, data)
    }
}

fn hash(m: SaslMechanism, data: &[u8]) -> Vec<u8> {
    if m == SaslMechanism::ScramSha512 {
        Sha512::digest(data).to_vec()
    } else {
        Sha256::digest(data).to_vec()
    }
}

fn salted_password(m: SaslMechanism, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    if m == SaslMechanism::ScramSha512 {
        pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
    } else {
        pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example exchange, with the client nonce it uses.
    #[test]
    fn scram_sha_256_matches_rfc_7677() {
        let sasl = Sasl {
            mechanism: SaslMechanism::ScramSha256,
            username: "user".into(),
            password: "pencil".into(),
        };
        let mut ex = Exchange::Scram {
            mechanism: SaslMechanism::ScramSha256,
            nonce: "rOprNGfwEbeRWgbNEkqO".into(),
            client_first_bare: "n=user,r=rOprNGfwEbeRWgbNEkqO".into(),
            expected: None,
        };
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
            s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let final_msg = ex.step(&sasl, server_first).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(final_msg).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            ex.step(&sasl, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .unwrap(),
            None
        );
    }

    #[test]
    fn a_server_that_does_not_know_the_password_is_caught() {
        let sasl = Sasl {
            mechanism: SaslMechanism::ScramSha256,
            username: "user".into(),
            password: "pencil".into(),
        };
        let (mut ex, first) = Exchange::start(&sasl).unwrap();
        let first = String::from_utf8(first).unwrap();
        let nonce = first.rsplit("r=").next().unwrap();
        let server_first = format!("r={nonce}server,s=c2FsdA==,i=4096");
        ex.step(&sasl, server_first.as_bytes()).unwrap().unwrap();
        let forged = format!("v={}", b64().encode([0u8; 32]));
        assert!(ex
            .step(&sasl, forged.as_bytes())
            .unwrap_err()
            .contains("wrong"));
        let (mut ex, _) = Exchange::start(&sasl).unwrap();
        assert!(ex.step(&sasl, b"r=someone-else,s=c2FsdA==,i=4096").is_err());
    }

    #[test]
    fn settings_are_kafka_s_and_mistakes_say_what_to_fix() {
        let sec = |pairs: &[(&str, &str)]| Props::new(pairs.iter().copied()).security();
        assert!(sec(&[]).unwrap().sasl.is_none());
        let s = sec(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            (
                "sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required \
                 username=\"alice\" password=\"s3cret\";",
            ),
        ])
        .unwrap();
        let sasl = s.sasl.unwrap();
        assert_eq!(
            (sasl.username.as_str(), sasl.password.as_str()),
            ("alice", "s3cret")
        );
        assert!(
            !format!("{sasl:?}").contains("s3cret"),
            "the password is never printed"
        );
        let e = |pairs: &[(&str, &str)]| sec(pairs).unwrap_err().to_string();
        assert!(e(&[("security.protocol", "SASL_SSL")]).contains("sasl.mechanism"));
        assert!(e(&[("security.protocol", "TLS")]).contains("PLAINTEXT, SSL"));
        assert!(e(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
        ])
        .contains("sasl.jaas.config"));
        assert!(
            e(&[("security.protocol", "SSL"), ("ssl.truststore.type", "JKS"),])
                .contains("PEM only")
        );
    }
}
