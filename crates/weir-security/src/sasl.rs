//! SASL authentication, as Kafka's `SASL_PLAINTEXT` and `SASL_SSL` listeners do it: the
//! PLAIN mechanism and SCRAM-SHA-256/512 (RFC 5802, RFC 7677), the users' SCRAM
//! credentials (salted and hashed, never the password), and one client's exchange.
//!
//! SCRAM is written here because it is a few HMACs over RustCrypto's primitives and no
//! maintained crate offers the server side as Kafka speaks it (its extension attributes,
//! its errors). PLAIN checks a password against the listener's JAAS `user_<name>` entries,
//! as Kafka's PlainLoginModule does, and otherwise against the user's SCRAM credential.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::state_file::{Doc, FileStore, Store};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};
use weir_kafka::ErrorCode;

/// The file of SCRAM credentials, in the first data directory.
pub const USERS_FILE: &str = "weir-users.json";
/// Kafka's bounds on SCRAM iterations.
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Scram {
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl Scram {
    pub fn name(self) -> &'static str {
        match self {
            Scram::Sha256 => "SCRAM-SHA-256",
            Scram::Sha512 => "SCRAM-SHA-512",
        }
    }
    pub fn from_name(name: &str) -> Option<Scram> {
        match name {
            "SCRAM-SHA-256" => Some(Scram::Sha256),
            "SCRAM-SHA-512" => Some(Scram::Sha512),
            _ => None,
        }
    }
    /// Kafka's `ScramMechanism` id in the credential APIs.
    pub fn id(self) -> i8 {
        match self {
            Scram::Sha256 => 1,
            Scram::Sha512 => 2,
        }
    }
    pub fn from_id(id: i8) -> Option<Scram> {
        match id {
            1 => Some(Scram::Sha256),
            2 => Some(Scram::Sha512),
            _ => None,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Scram::Sha256 => {
                let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Scram::Sha512 => {
                let mut m = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes any key");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Scram::Sha256 => Sha256::digest(data).to_vec(),
            Scram::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// Hi(password, salt, iterations): PBKDF2 with this mechanism's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Scram::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            Scram::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// What the broker keeps of a user's password for one mechanism (RFC 5802 section 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    #[serde(with = "b64")]
    pub salt: Vec<u8>,
    #[serde(with = "b64")]
    pub stored_key: Vec<u8>,
    #[serde(with = "b64")]
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl Credential {
    /// From the salted password, as AlterUserScramCredentials sends it.
    pub fn from_salted(mech: Scram, salted: &[u8], salt: Vec<u8>, iterations: u32) -> Credential {
        let client_key = mech.hmac(salted, b"Client Key");
        Credential {
            salt,
            stored_key: mech.hash(&client_key),
            server_key: mech.hmac(salted, b"Server Key"),
            iterations,
        }
    }

    /// From a password, with a new random salt.
    pub fn from_password(
        mech: Scram,
        password: &str,
        iterations: u32,
    ) -> Result<Credential, String> {
        let salt = random_bytes(32)?;
        let salted = mech.salted_password(password.as_bytes(), &salt, iterations);
        Ok(Credential::from_salted(mech, &salted, salt, iterations))
    }

    fn accepts_password(&self, mech: Scram, password: &str) -> bool {
        let salted = mech.salted_password(password.as_bytes(), &self.salt, self.iterations);
        let stored = mech.hash(&mech.hmac(&salted, b"Client Key"));
        constant_time_eq(&stored, &self.stored_key)
    }
}

mod b64 {
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(v))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        B64.decode(s).map_err(serde::de::Error::custom)
    }
}

/// `n` bytes from the operating system's random source (salts, nonces).
fn random_bytes(n: usize) -> Result<Vec<u8>, String> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| format!("the operating system's random source: {e}"))?;
    Ok(b)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct UsersFile {
    users: BTreeMap<String, BTreeMap<Scram, Credential>>,
}

type UserMap = BTreeMap<String, BTreeMap<Scram, Credential>>;

/// Every user's SCRAM credentials: in `weir-users.json` (written atomically) for one
/// broker, in the cluster's metadata for a cluster.
#[derive(Debug)]
pub struct Users {
    store: Box<dyn Store>,
    users: RwLock<Doc<UserMap>>,
}

fn decode_users(bytes: &[u8]) -> Result<UserMap, String> {
    crate::state_file::decode::<UsersFile>(bytes).map(|f| f.users)
}

impl Users {
    /// Loads the users of data directory `dir` (none if it has no users file).
    pub fn load(dir: &Path) -> Result<Users, String> {
        let path = dir.join(USERS_FILE);
        let users = crate::state_file::read::<UsersFile>(&path)?
            .map(|f| f.users)
            .unwrap_or_default();
        Ok(Users {
            store: Box::new(FileStore(path)),
            users: RwLock::new(Doc {
                value: users,
                revision: 0,
            }),
        })
    }

    /// The users of a document kept in `store`, as it stands (`None`: no users yet).
    pub fn from_document(
        store: Box<dyn Store>,
        current: Option<(&[u8], i64)>,
    ) -> Result<Users, String> {
        let (value, revision) = match current {
            Some((bytes, rev)) => (decode_users(bytes)?, rev),
            None => (UserMap::new(), 0),
        };
        Ok(Users {
            store,
            users: RwLock::new(Doc { value, revision }),
        })
    }

    /// Takes the document another broker saved (`None`: removed), seen at `revision`.
    pub fn install(&self, bytes: Option<&[u8]>, revision: i64) -> Result<bool, String> {
        let value = bytes.map(decode_users).transpose()?.unwrap_or_default();
        Ok(crate::state_file::install(&self.users, value, revision))
    }

    pub fn get(&self, user: &str, mech: Scram) -> Option<Credential> {
        let users = self.users.read().unwrap_or_else(|e| e.into_inner());
        users.value.get(user).and_then(|m| m.get(&mech)).cloned()
    }

    /// Each user with the mechanisms and iterations it has credentials for.
    pub fn describe(&self) -> BTreeMap<String, Vec<(Scram, u32)>> {
        let users = self.users.read().unwrap_or_else(|e| e.into_inner());
        users
            .value
            .iter()
            .map(|(u, m)| {
                (
                    u.clone(),
                    m.iter().map(|(k, c)| (*k, c.iterations)).collect(),
                )
            })
            .collect()
    }

    /// Applies upsertions and deletions, and saves them, all or nothing.
    pub fn change(
        &self,
        upsert: Vec<(String, Scram, Credential)>,
        delete: Vec<(String, Scram)>,
    ) -> Result<(), String> {
        crate::state_file::update(
            &self.users,
            &*self.store,
            |users| {
                crate::state_file::encode(&UsersFile {
                    users: users.clone(),
                })
            },
            decode_users,
            UserMap::new,
            |current| {
                let mut next = current.clone();
                for (user, mech) in &delete {
                    if let Some(m) = next.get_mut(user) {
                        m.remove(mech);
                        if m.is_empty() {
                            next.remove(user);
                        }
                    }
                }
                for (user, mech, cred) in &upsert {
                    next.entry(user.clone())
                        .or_default()
                        .insert(*mech, cred.clone());
                }
                Ok((Some(next), ()))
            },
        )
    }
}

/// Why an authentication failed: the message goes to the client with
/// SASL_AUTHENTICATION_FAILED, and the connection closes.
#[derive(Debug)]
pub struct AuthFailed(pub String);

/// One step of an exchange.
pub enum Step {
    /// Send these bytes and wait for the client's next message.
    Continue(Vec<u8>),
    /// Authenticated as `user` (Kafka's principal `User:<user>`); send these bytes last.
    Done { user: String, last: Vec<u8> },
}

/// One client's exchange in progress.
pub enum Exchange {
    Plain,
    ScramFirst(Scram),
    ScramFinal {
        mech: Scram,
        user: String,
        credential: Credential,
        nonce: String,
        client_first_bare: String,
        server_first: String,
        gs2_header: String,
    },
}

impl Exchange {
    /// The exchange for a mechanism this listener enables.
    pub fn start(mechanism: &str) -> Option<Exchange> {
        match mechanism {
            "PLAIN" => Some(Exchange::Plain),
            m => Scram::from_name(m).map(Exchange::ScramFirst),
        }
    }

    /// Takes the client's next message.
    pub fn step(
        &mut self,
        token: &[u8],
        users: &Users,
        plain_users: &BTreeMap<String, String>,
    ) -> Result<Step, AuthFailed> {
        let failed = || AuthFailed("Authentication failed: Invalid username or password".into());
        match std::mem::replace(self, Exchange::Plain) {
            Exchange::Plain => {
                // [authzid] NUL authcid NUL passwd
                let parts: Vec<&[u8]> = token.split(|b| *b == 0).collect();
                let [authzid, user, password] = parts[..] else {
                    return Err(AuthFailed("Invalid SASL/PLAIN message".into()));
                };
                let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| failed());
                let (authzid, user, password) = (text(authzid)?, text(user)?, text(password)?);
                if !authzid.is_empty() && authzid != user {
                    return Err(AuthFailed(
                        "Authentication failed: Client requested an authorization id that is \
                         different from username"
                            .into(),
                    ));
                }
                let ok = match plain_users.get(&user) {
                    Some(expected) => constant_time_eq(expected.as_bytes(), password.as_bytes()),
                    None => [Scram::Sha512, Scram::Sha256].into_iter().any(|m| {
                        users
                            .get(&user, m)
                            .is_some_and(|c| c.accepts_password(m, &password))
                    }),
                };
                if !ok {
                    return Err(failed());
                }
                Ok(Step::Done {
                    user,
                    last: Vec::new(),
                })
            }
            Exchange::ScramFirst(mech) => {
                let msg = std::str::from_utf8(token)
                    .map_err(|_| AuthFailed("Invalid SCRAM client-first message".into()))?;
                // gs2-header: "n,," or "y,," (no channel binding), with an optional a=authzid.
                let mut it = msg.splitn(3, ',');
                let (cb, authz) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
                let client_first_bare = it
                    .next()
                    .ok_or_else(|| AuthFailed("Invalid SCRAM client-first message".into()))?;
                if cb != "n" && cb != "y" {
                    return Err(AuthFailed("SCRAM channel binding is not supported".into()));
                }
                let mut user = None;
                let mut client_nonce = None;
                for attr in client_first_bare.split(',') {
                    match attr.split_once('=') {
                        Some(("n", v)) => user = Some(v.replace("=2C", ",").replace("=3D", "=")),
                        Some(("r", v)) => client_nonce = Some(v.to_string()),
                        Some(("tokenauth", _)) => {
                            return Err(AuthFailed(
                                "Delegation tokens are not supported by Weir".into(),
                            ))
                        }
                        _ => {}
                    }
                }
                let (Some(user), Some(client_nonce)) = (user, client_nonce) else {
                    return Err(AuthFailed("Invalid SCRAM client-first message".into()));
                };
                if let Some(a) = authz.strip_prefix("a=") {
                    if a != user {
                        return Err(AuthFailed(
                            "Authentication failed: authorization id differs from username".into(),
                        ));
                    }
                }
                let credential = users.get(&user, mech).ok_or_else(failed)?;
                let ours = random_bytes(24).map_err(AuthFailed)?;
                let nonce = format!("{client_nonce}{}", B64.encode(ours));
                let server_first = format!(
                    "r={nonce},s={},i={}",
                    B64.encode(&credential.salt),
                    credential.iterations
                );
                *self = Exchange::ScramFinal {
                    mech,
                    user,
                    credential,
                    nonce,
                    client_first_bare: client_first_bare.to_string(),
                    server_first: server_first.clone(),
                    gs2_header: format!("{cb},{authz},"),
                };
                Ok(Step::Continue(server_first.into_bytes()))
            }
            Exchange::ScramFinal {
                mech,
                user,
                credential,
                nonce,
                client_first_bare,
                server_first,
                gs2_header,
            } => {
                let msg = std::str::from_utf8(token)
                    .map_err(|_| AuthFailed("Invalid SCRAM client-final message".into()))?;
                let (without_proof, proof) = msg
                    .rsplit_once(",p=")
                    .ok_or_else(|| AuthFailed("Invalid SCRAM client-final message".into()))?;
                let mut binding = None;
                let mut got_nonce = None;
                for attr in without_proof.split(',') {
                    match attr.split_once('=') {
                        Some(("c", v)) => binding = Some(v),
                        Some(("r", v)) => got_nonce = Some(v),
                        _ => {}
                    }
                }
                if binding != Some(B64.encode(&gs2_header).as_str()) {
                    return Err(AuthFailed("Invalid SCRAM channel binding".into()));
                }
                // Kafka checks that the client's nonce ends with the server's: librdkafka
                // sends its own nonce once more in front.
                if !got_nonce.is_some_and(|n| n.ends_with(nonce.as_str())) {
                    return Err(AuthFailed("Invalid SCRAM nonce".into()));
                }
                let proof = B64.decode(proof).map_err(|_| failed())?;
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let signature = mech.hmac(&credential.stored_key, auth_message.as_bytes());
                if proof.len() != signature.len() {
                    return Err(failed());
                }
                let client_key: Vec<u8> =
                    proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
                if !constant_time_eq(&mech.hash(&client_key), &credential.stored_key) {
                    return Err(failed());
                }
                let server_signature = mech.hmac(&credential.server_key, auth_message.as_bytes());
                Ok(Step::Done {
                    user,
                    last: format!("v={}", B64.encode(server_signature)).into_bytes(),
                })
            }
        }
    }
}

/// The `user_<name>="<password>"` entries of a PlainLoginModule JAAS configuration.
pub fn jaas_plain_users(jaas: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = jaas;
    while let Some(at) = rest.find("user_") {
        rest = &rest[at + 5..];
        let Some((name, after)) = rest.split_once('=') else {
            break;
        };
        let after = after.trim_start();
        let Some(value) = after.strip_prefix('"') else {
            continue;
        };
        let Some(end) = value.find('"') else { break };
        out.insert(name.trim().to_string(), value[..end].to_string());
        rest = &value[end + 1..];
    }
    out
}

/// A SASL listener: the mechanisms it offers, and PLAIN's users from its JAAS
/// configuration (`user_<name>="<password>"`, as Kafka's PlainLoginModule).
#[derive(Debug, Clone, Default)]
pub struct SaslListener {
    pub mechanisms: Vec<String>,
    pub plain_users: BTreeMap<String, String>,
    /// `connections.max.reauth.ms`: how long an authentication lasts (KIP-368); 0, for
    /// ever.
    pub reauth_ms: u64,
}

impl SaslListener {
    /// The SASL setup of listener `name` from the broker's properties (`listener.name.<name>.`
    /// keys first, then the plain ones).
    pub fn from_properties(name: &str, props: &BTreeMap<String, String>) -> Result<Self, String> {
        let prefix = format!("listener.name.{}.", name.to_ascii_lowercase());
        let get = |key: &str| {
            props
                .get(&format!("{prefix}{key}"))
                .or_else(|| props.get(key))
        };
        let mechanisms: Vec<String> = match get("sasl.enabled.mechanisms") {
            // Kafka's default is GSSAPI, which Weir does not offer: SCRAM instead.
            None => vec!["SCRAM-SHA-256".into(), "SCRAM-SHA-512".into()],
            Some(list) => list
                .split(',')
                .map(|m| m.trim().to_ascii_uppercase())
                .filter(|m| !m.is_empty())
                .collect(),
        };
        for m in &mechanisms {
            if Exchange::start(m).is_none() {
                return Err(format!(
                    "listener {name}: SASL mechanism {m} is not offered (PLAIN, SCRAM-SHA-256, \
                     SCRAM-SHA-512)"
                ));
            }
        }
        if mechanisms.is_empty() {
            return Err(format!("listener {name}: sasl.enabled.mechanisms is empty"));
        }
        let jaas = get("plain.sasl.jaas.config").or_else(|| get("sasl.jaas.config"));
        let reauth_ms = match get("connections.max.reauth.ms") {
            None => 0,
            Some(v) => v.trim().parse::<i64>().map_err(|_| {
                format!("connections.max.reauth.ms={v}: not a number of milliseconds")
            })?,
        };
        Ok(SaslListener {
            reauth_ms: reauth_ms.max(0) as u64,
            mechanisms,
            plain_users: jaas.map(|j| jaas_plain_users(j)).unwrap_or_default(),
        })
    }
}

/// Where a connection stands with SASL. On a listener without SASL, every request is
/// served and the principal is `User:ANONYMOUS`, as in Kafka. On a SASL listener, only
/// ApiVersions, SaslHandshake and SaslAuthenticate are served until the client has
/// authenticated; anything else closes the connection.
pub struct Session {
    listener: Option<SaslListener>,
    state: SessionState,
    /// A v0 handshake: the tokens come as bare frames, not in SaslAuthenticate requests.
    bare_tokens: bool,
    /// Kafka's principal: `User:<name>` once authenticated.
    pub principal: Arc<str>,
    /// The client's address, as ACLs name hosts: with the principal, who is asking.
    pub host: Arc<str>,
    /// When the authentication runs out (`connections.max.reauth.ms`): after it, the
    /// client must authenticate again before anything else is served (KIP-368).
    expires: Option<std::time::Instant>,
    /// A re-authentication is under way: it must name the same principal.
    reauthenticating: bool,
}

enum SessionState {
    Start,
    // Boxed: an idle connection holds a Session, and most never authenticate twice.
    Exchanging(Box<Exchange>),
    Done,
}

/// The answer to a SaslHandshake or SaslAuthenticate: an error code with its message, the
/// bytes for the client, and whether the connection closes after it.
pub struct Answer {
    pub error: i16,
    pub message: Option<String>,
    pub bytes: Vec<u8>,
    pub mechanisms: Vec<String>,
    pub close: bool,
}

const ILLEGAL_SASL_STATE: i16 = ErrorCode::IllegalSaslState.code();
const UNSUPPORTED_SASL_MECHANISM: i16 = ErrorCode::UnsupportedSaslMechanism.code();
const SASL_AUTHENTICATION_FAILED: i16 = ErrorCode::SaslAuthenticationFailed.code();

impl Session {
    pub fn new(listener: Option<SaslListener>, peer: std::net::SocketAddr) -> Session {
        Session {
            listener,
            state: SessionState::Start,
            bare_tokens: false,
            principal: Arc::from("User:ANONYMOUS"),
            // An IPv4 client of a dual-stack listener is named by its IPv4 address.
            host: Arc::from(peer.ip().to_canonical().to_string()),
            expires: None,
            reauthenticating: false,
        }
    }

    /// Whether the authentication has run out (a re-authentication is due, and not
    /// under way).
    pub fn expired(&self, now: std::time::Instant) -> bool {
        matches!(self.state, SessionState::Done) && self.expires.is_some_and(|e| now >= e)
    }

    /// How long the authentication lasts, for SaslAuthenticate's `session_lifetime_ms`
    /// (0: for ever).
    pub fn lifetime_ms(&self) -> i64 {
        self.listener
            .as_ref()
            .map_or(0, |l| l.reauth_ms.min(i64::MAX as u64) as i64)
    }

    /// Whether a request of `api` may be served now.
    pub fn allows(&self, api: kafka_protocol::messages::ApiKey) -> bool {
        use kafka_protocol::messages::ApiKey;
        self.listener.is_none()
            || matches!(self.state, SessionState::Done)
            || matches!(
                api,
                ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
            )
    }

    fn answer(error: i16, message: impl Into<String>, close: bool) -> Answer {
        Answer {
            error,
            message: Some(message.into()),
            bytes: Vec::new(),
            mechanisms: Vec::new(),
            close,
        }
    }

    /// Whether the next frame is a bare SASL token (after a v0 handshake).
    pub fn expects_bare_token(&self) -> bool {
        self.bare_tokens && matches!(self.state, SessionState::Exchanging(_))
    }

    /// SaslHandshake: picks the mechanism. After a v0 handshake the tokens come bare.
    pub fn handshake(&mut self, mechanism: &str, version: i16) -> Answer {
        let Some(listener) = &self.listener else {
            return Session::answer(
                ILLEGAL_SASL_STATE,
                "SASL is not enabled on this listener",
                false,
            );
        };
        // A handshake after authenticating starts a re-authentication (KIP-368), which
        // only SaslAuthenticate requests (v1 and later) can carry.
        let reauth = matches!(self.state, SessionState::Done) && version >= 1;
        if !matches!(self.state, SessionState::Start) && !reauth {
            let close = !matches!(self.state, SessionState::Done);
            return Session::answer(ILLEGAL_SASL_STATE, "SaslHandshake was already done", close);
        }
        let offered = listener.mechanisms.clone();
        if !offered.iter().any(|m| m == mechanism) {
            let mut a = Session::answer(
                UNSUPPORTED_SASL_MECHANISM,
                format!("mechanism {mechanism} is not enabled on this listener"),
                false,
            );
            a.mechanisms = offered;
            return a;
        }
        // The listener's mechanisms were each checked against `Exchange::start` when the
        // configuration was read.
        let Some(exchange) = Exchange::start(mechanism) else {
            return Session::answer(
                UNSUPPORTED_SASL_MECHANISM,
                format!("mechanism {mechanism} is not offered"),
                false,
            );
        };
        self.reauthenticating = reauth;
        self.state = SessionState::Exchanging(Box::new(exchange));
        self.bare_tokens = version == 0;
        Answer {
            error: 0,
            message: None,
            bytes: Vec::new(),
            mechanisms: offered,
            close: false,
        }
    }

    /// SaslAuthenticate: one message of the exchange. A failure closes the connection.
    pub fn authenticate(&mut self, token: &[u8], users: &Users) -> Answer {
        let SessionState::Exchanging(exchange) = &mut self.state else {
            // Out of turn: before a handshake on a SASL listener the connection closes; on
            // a listener without SASL, or after authenticating, it is only an error.
            let close = self.listener.is_some() && matches!(self.state, SessionState::Start);
            return Session::answer(
                ILLEGAL_SASL_STATE,
                "SaslAuthenticate is not expected now",
                close,
            );
        };
        let plain_users = self
            .listener
            .as_ref()
            .map(|l| l.plain_users.clone())
            .unwrap_or_default();
        match exchange.step(token, users, &plain_users) {
            Ok(Step::Continue(bytes)) => Answer {
                error: 0,
                message: None,
                bytes,
                mechanisms: Vec::new(),
                close: false,
            },
            Ok(Step::Done { user, last }) => {
                let principal = format!("User:{user}");
                // A re-authentication must be of the same principal, as in Kafka.
                if self.reauthenticating && *self.principal != principal {
                    self.state = SessionState::Start;
                    return Session::answer(
                        SASL_AUTHENTICATION_FAILED,
                        format!("re-authenticated as {principal}, not {}", self.principal),
                        true,
                    );
                }
                if self.reauthenticating {
                    tracing::info!(principal = %principal, "SASL re-authentication");
                }
                self.reauthenticating = false;
                self.principal = Arc::from(principal);
                self.state = SessionState::Done;
                let lifetime = self.lifetime_ms();
                if lifetime > 0 {
                    self.expires = Some(
                        std::time::Instant::now()
                            + std::time::Duration::from_millis(lifetime as u64),
                    );
                }
                Answer {
                    error: 0,
                    message: None,
                    bytes: last,
                    mechanisms: Vec::new(),
                    close: false,
                }
            }
            Err(AuthFailed(message)) => {
                self.state = SessionState::Start;
                Session::answer(SASL_AUTHENTICATION_FAILED, message, true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: the SCRAM-SHA-256 example exchange, byte for byte.
    #[test]
    fn rfc7677_example() {
        let mech = Scram::Sha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = mech.salted_password(b"pencil", &salt, 4096);
        let cred = Credential::from_salted(mech, &salted, salt, 4096);
        let dir = tempfile::tempdir().unwrap();
        let users = Users::load(dir.path()).unwrap();
        users
            .change(vec![("user".into(), mech, cred)], vec![])
            .unwrap();
        let mut ex = Exchange::start("SCRAM-SHA-256").unwrap();
        let Step::Continue(first) = ex
            .step(
                b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                &users,
                &BTreeMap::new(),
            )
            .ok()
            .unwrap()
        else {
            panic!("expected a server-first message")
        };
        let first = String::from_utf8(first).unwrap();
        assert!(first.starts_with("r=rOprNGfwEbeRWgbNEkqO"), "{first}");
        assert!(
            first.ends_with(",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"),
            "{first}"
        );
        // Replay the RFC's exchange with its server nonce.
        if let Exchange::ScramFinal {
            nonce,
            server_first,
            ..
        } = &mut ex
        {
            *nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into();
            *server_first = format!("r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
        }
        let final_msg = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                         p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        match ex.step(final_msg.as_bytes(), &users, &BTreeMap::new()) {
            Ok(Step::Done { user, last }) => {
                assert_eq!(user, "user");
                assert_eq!(
                    String::from_utf8(last).unwrap(),
                    "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
                );
            }
            Ok(_) => panic!("not done"),
            Err(e) => panic!("{}", e.0),
        }
    }

    #[test]
    fn plain_checks_jaas_users_then_scram_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let users = Users::load(dir.path()).unwrap();
        let cred = Credential::from_password(Scram::Sha512, "s3cret", 4096).unwrap();
        users
            .change(vec![("bob".into(), Scram::Sha512, cred)], vec![])
            .unwrap();
        let jaas = jaas_plain_users(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required
               username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice pw";"#,
        );
        assert_eq!(jaas.get("alice").map(String::as_str), Some("alice pw"));
        let try_plain = |msg: &[u8]| Exchange::Plain.step(msg, &users, &jaas);
        assert!(matches!(
            try_plain(b"\0alice\0alice pw"),
            Ok(Step::Done { .. })
        ));
        assert!(try_plain(b"\0alice\0wrong").is_err());
        assert!(matches!(try_plain(b"\0bob\0s3cret"), Ok(Step::Done { .. })));
        assert!(try_plain(b"\0bob\0nope").is_err());
        assert!(try_plain(b"\0nobody\0x").is_err());
        // Reloaded from the file.
        let again = Users::load(dir.path()).unwrap();
        assert!(again.get("bob", Scram::Sha512).is_some());
    }
}
