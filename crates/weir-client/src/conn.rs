//! One connection to one broker: Kafka's framing, the ApiVersions handshake (so each request
//! goes out at the highest version both sides speak), and pipelining — many requests in
//! flight, responses matched to requests in order. A response goes to the task waiting for
//! it, or — for the producer — to a callback run on the reading task itself, which saves a
//! hop between tasks per request. A broken connection fails every waiting request at once;
//! the caller reconnects.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_kafka::limits::MAX_CLIENT_RESPONSE_BYTES;
use weir_kafka::ErrorCode;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::error::{ClientError, Result};
use crate::security::{Exchange, Sasl, Security};

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// What becomes of a response when it arrives.
enum Reply {
    /// It goes to the task that sent the request (which times the request out itself).
    Channel(oneshot::Sender<Result<Bytes>>),
    /// This runs with it on the reading task; if it has not arrived by `deadline`, the
    /// connection is given up (as Kafka's clients drop a connection whose request timed
    /// out) and this runs with the error.
    Callback {
        deadline: Instant,
        run: Box<dyn FnOnce(Result<Bytes>) + Send>,
    },
}

impl Reply {
    fn send(self, r: Result<Bytes>) {
        match self {
            Reply::Channel(tx) => {
                let _ = tx.send(r);
            }
            Reply::Callback { run, .. } => run(r),
        }
    }
}

type Waiter = (i32, Reply);

/// How often the reading task looks at the deadline of a waiting callback.
const DEADLINE_CHECK: Duration = Duration::from_millis(100);

/// The buffer responses are read through. A response larger than it is read straight into
/// its own buffer, so it bounds only what small responses cost in system calls.
const RESPONSE_READ_BUFFER: usize = 64 * 1024;

/// A connection to one broker.
pub struct BrokerConnection {
    addr: String,
    client_id: Option<StrBytes>,
    versions: HashMap<i16, (i16, i16)>,
    writer: tokio::sync::Mutex<Writer>,
    pending: Arc<Mutex<VecDeque<Waiter>>>,
    next_correlation: AtomicI32,
    broken: Arc<AtomicBool>,
    /// Wakes the reading task to find the connection broken.
    give_up: Arc<tokio::sync::Notify>,
    request_timeout: Duration,
}

/// The task that reads one connection: each response goes to the oldest waiting request
/// (Kafka answers in order). It ends when the connection fails, is given up, or a waiting
/// callback's deadline passes; then every request still waiting fails with the reason.
async fn read_responses(
    rd: Reader,
    pending: Arc<Mutex<VecDeque<Waiter>>>,
    broken: Arc<AtomicBool>,
    give_up: Arc<tokio::sync::Notify>,
    addr: String,
) {
    // Buffered: a small response's size and body (and often the next response) come in
    // one read, not two.
    let mut rd = tokio::io::BufReader::with_capacity(RESPONSE_READ_BUFFER, rd);
    let failure = 'connection: loop {
        // Kept across the waits below, so that looking at a deadline never cuts a read
        // short.
        let read = read_frame(&mut rd);
        tokio::pin!(read);
        let frame = loop {
            tokio::select! {
                biased;
                r = &mut read => break r,
                _ = tokio::time::sleep(DEADLINE_CHECK) => {}
                _ = give_up.notified() => {}
            }
            if broken.load(Ordering::SeqCst) {
                break 'connection "the connection was given up".to_string();
            }
            let overdue = pending.lock().ok().is_some_and(|p| {
                matches!(p.front(), Some((_, Reply::Callback { deadline, .. }))
                    if *deadline <= Instant::now())
            });
            if overdue {
                break 'connection "a request timed out (request.timeout.ms)".to_string();
            }
        };
        let frame = match frame {
            Ok(f) => f,
            Err(e) => break e,
        };
        let corr = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let waiter = pending.lock().ok().and_then(|mut p| p.pop_front());
        match waiter {
            Some((expected, reply)) if expected == corr => reply.send(Ok(frame)),
            Some((expected, reply)) => {
                reply.send(Err(conn_error(
                    &addr,
                    format!("response {corr} arrived where {expected} was due"),
                )));
                break "responses out of order".to_string();
            }
            None => break format!("an unexpected response {corr}"),
        }
    };
    broken.store(true, Ordering::SeqCst);
    let waiting: Vec<Waiter> = pending
        .lock()
        .map(|mut p| p.drain(..).collect())
        .unwrap_or_default();
    for (_, reply) in waiting {
        reply.send(Err(conn_error(&addr, &failure)));
    }
}

/// One response frame (after its size prefix, which must be within bounds).
async fn read_frame(rd: &mut tokio::io::BufReader<Reader>) -> std::result::Result<Bytes, String> {
    let size = match rd.read_i32().await {
        Ok(n) if n >= 4 && (n as usize) <= MAX_CLIENT_RESPONSE_BYTES => n as usize,
        Ok(n) => return Err(format!("bad response size {n}")),
        Err(e) => return Err(e.to_string()),
    };
    let mut buf = BytesMut::with_capacity(size);
    buf.resize(size, 0);
    rd.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

fn conn_error(addr: &str, reason: impl std::fmt::Display) -> ClientError {
    ClientError::Connection {
        broker: addr.to_string(),
        reason: reason.to_string(),
    }
}

impl BrokerConnection {
    /// Connects (with TLS and SASL as `security` says) and learns which API versions the
    /// broker serves.
    pub async fn connect(
        addr: &str,
        client_id: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
        security: &Security,
    ) -> Result<Arc<Self>> {
        let timed_out = || ClientError::Timeout {
            what: format!("connecting to {addr}"),
            ms: connect_timeout.as_millis() as u64,
        };
        let stream = tokio::time::timeout(connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| conn_error(addr, e))?;
        let _ = stream.set_nodelay(true);
        let (rd, wr): (Reader, Writer) = match &security.tls {
            None => {
                let (rd, wr) = stream.into_split();
                (Box::new(rd), Box::new(wr))
            }
            Some(tls) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| conn_error(addr, format!("'{host}' as a TLS name: {e}")))?;
                let connector = tokio_rustls::TlsConnector::from(tls.clone());
                let stream = tokio::time::timeout(connect_timeout, connector.connect(name, stream))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| conn_error(addr, format!("TLS handshake: {e}")))?;
                let (rd, wr) = tokio::io::split(stream);
                (Box::new(rd), Box::new(wr))
            }
        };
        let pending: Arc<Mutex<VecDeque<Waiter>>> = Arc::new(Mutex::new(VecDeque::new()));
        let broken = Arc::new(AtomicBool::new(false));
        let give_up = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(read_responses(
            rd,
            pending.clone(),
            broken.clone(),
            give_up.clone(),
            addr.to_string(),
        ));
        let mut conn = BrokerConnection {
            addr: addr.to_string(),
            client_id: Some(StrBytes::from_string(client_id.to_string())),
            versions: HashMap::new(),
            writer: tokio::sync::Mutex::new(wr),
            pending,
            next_correlation: AtomicI32::new(1),
            broken,
            give_up,
            request_timeout,
        };
        // ApiVersions: v3 first; an older broker answers UNSUPPORTED_VERSION in v0.
        let mut req = ApiVersionsRequest::default();
        req.client_software_name = StrBytes::from_static_str("weir");
        req.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
        let resp: ApiVersionsResponse = match conn.request(&req, 3).await {
            Ok(r) if r.error_code == 0 => r,
            Ok(r) if r.error_code == ErrorCode::UnsupportedVersion.code() => {
                conn.request(&ApiVersionsRequest::default(), 0).await?
            }
            Ok(r) => return Err(ClientError::kafka(r.error_code, Some("ApiVersions".into()))),
            Err(e) => return Err(e),
        };
        conn.versions = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        if let Some(sasl) = &security.sasl {
            conn.authenticate(sasl).await?;
        }
        Ok(Arc::new(conn))
    }

    /// SaslHandshake v1, then SaslAuthenticate until the exchange is done.
    async fn authenticate(&self, sasl: &Sasl) -> Result<()> {
        let v = self.version_for(ApiKey::SaslHandshake, (1, 1))?;
        let mut hs = SaslHandshakeRequest::default();
        hs.mechanism = StrBytes::from_static_str(sasl.mechanism.name());
        let resp = self.request(&hs, v).await?;
        if resp.error_code != 0 {
            let offered: Vec<&str> = resp.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(ClientError::kafka(
                resp.error_code,
                Some(format!(
                    "{} does not offer {} (it offers {})",
                    self.addr,
                    sasl.mechanism.name(),
                    offered.join(", ")
                )),
            ));
        }
        let v = self.version_for(ApiKey::SaslAuthenticate, (0, 2))?;
        let (mut exchange, mut token) =
            Exchange::start(sasl).map_err(|e| conn_error(&self.addr, e))?;
        loop {
            let mut req = SaslAuthenticateRequest::default();
            req.auth_bytes = Bytes::from(token);
            let resp = self.request(&req, v).await?;
            if resp.error_code != 0 {
                return Err(ClientError::kafka(
                    resp.error_code,
                    resp.error_message.map(|m| m.to_string()),
                ));
            }
            match exchange.step(sasl, &resp.auth_bytes) {
                Ok(Some(next)) => token = next,
                Ok(None) => return Ok(()),
                Err(e) => {
                    return Err(ClientError::kafka(
                        ErrorCode::SaslAuthenticationFailed.code(),
                        Some(e),
                    ))
                }
            }
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    /// The highest version of `api` in both the broker's range and `ours`.
    pub fn version_for(&self, api: ApiKey, ours: (i16, i16)) -> Result<i16> {
        let (lo, hi) = self.versions.get(&(api as i16)).copied().ok_or_else(|| {
            ClientError::Protocol(format!("{} does not serve {api:?}", self.addr))
        })?;
        let v = hi.min(ours.1);
        if v < lo.max(ours.0) {
            return Err(ClientError::Protocol(format!(
                "{} serves {api:?} v{lo}-{hi}; this client speaks v{}-{}",
                self.addr, ours.0, ours.1
            )));
        }
        Ok(v)
    }

    fn encode<R: Request>(&self, req: &R, version: i16, correlation_id: i32) -> Result<Bytes> {
        let api = ApiKey::try_from(R::KEY)
            .map_err(|_| ClientError::Protocol(format!("unknown API key {}", R::KEY)))?;
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = correlation_id;
        header.client_id = self.client_id.clone();
        let mut buf = BytesMut::with_capacity(256);
        buf.put_i32(0);
        header
            .encode(&mut buf, api.request_header_version(version))
            .and_then(|_| req.encode(&mut buf, version))
            .map_err(|e| ClientError::Protocol(format!("encoding {api:?} v{version}: {e}")))?;
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        Ok(buf.freeze())
    }

    /// Sends a request at `version` and waits for its response.
    pub async fn request<R: Request>(&self, req: &R, version: i16) -> Result<R::Response> {
        if self.is_broken() {
            return Err(conn_error(&self.addr, "the connection is closed"));
        }
        let corr = self.next_correlation.fetch_add(1, Ordering::Relaxed);
        let frame = self.encode(req, version, corr)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut w = self.writer.lock().await;
            self.pending
                .lock()
                .map_err(|_| conn_error(&self.addr, "poisoned"))?
                .push_back((corr, Reply::Channel(tx)));
            if let Err(e) = w.write_all(&frame).await {
                self.broken.store(true, Ordering::SeqCst);
                return Err(conn_error(&self.addr, e));
            }
        }
        let mut frame = match tokio::time::timeout(self.request_timeout, rx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(conn_error(&self.addr, "the connection closed")),
            Err(_) => {
                // Kafka's clients drop a connection whose request timed out.
                self.broken.store(true, Ordering::SeqCst);
                return Err(ClientError::Timeout {
                    what: format!("{:?} to {}", ApiKey::try_from(R::KEY).ok(), self.addr),
                    ms: self.request_timeout.as_millis() as u64,
                });
            }
        };
        let api = ApiKey::try_from(R::KEY)
            .map_err(|_| ClientError::Protocol("unknown API key".into()))?;
        ResponseHeader::decode(&mut frame, api.response_header_version(version))
            .map_err(|e| ClientError::Protocol(format!("response header: {e}")))?;
        R::Response::decode(&mut frame, version)
            .map_err(|e| ClientError::Protocol(format!("decoding {api:?} v{version}: {e}")))
    }

    /// Sends a request and returns once it is written. `on_response` runs exactly once:
    /// later, on the task that reads this connection, with the decoded response or the
    /// reason there is none (the connection broke, or no answer came within
    /// `request.timeout.ms`, which gives the connection up) — or at once, here, if the
    /// request could not be sent.
    pub async fn request_with_callback<R: Request>(
        &self,
        req: &R,
        version: i16,
        on_response: impl FnOnce(Result<R::Response>) + Send + 'static,
    ) {
        if self.is_broken() {
            return on_response(Err(conn_error(&self.addr, "the connection is closed")));
        }
        let Ok(api) = ApiKey::try_from(R::KEY) else {
            return on_response(Err(ClientError::Protocol(format!(
                "unknown API key {}",
                R::KEY
            ))));
        };
        let corr = self.next_correlation.fetch_add(1, Ordering::Relaxed);
        let frame = match self.encode(req, version, corr) {
            Ok(f) => f,
            Err(e) => return on_response(Err(e)),
        };
        let run = move |r: Result<Bytes>| {
            on_response(r.and_then(|mut frame| {
                ResponseHeader::decode(&mut frame, api.response_header_version(version))
                    .map_err(|e| ClientError::Protocol(format!("response header: {e}")))?;
                R::Response::decode(&mut frame, version)
                    .map_err(|e| ClientError::Protocol(format!("decoding {api:?} v{version}: {e}")))
            }))
        };
        let mut w = self.writer.lock().await;
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back((
                corr,
                Reply::Callback {
                    deadline: Instant::now() + self.request_timeout,
                    run: Box::new(run),
                },
            ));
        if let Err(e) = w.write_all(&frame).await {
            // The request is queued: the reading task, woken, fails it with the rest.
            self.broken.store(true, Ordering::SeqCst);
            self.give_up.notify_one();
            tracing::debug!(broker = %self.addr, "writing a request failed: {e}");
        }
    }

    /// Sends a request that gets no response (Produce with acks=0).
    pub async fn send_oneway<R: Request>(&self, req: &R, version: i16) -> Result<()> {
        if self.is_broken() {
            return Err(conn_error(&self.addr, "the connection is closed"));
        }
        let corr = self.next_correlation.fetch_add(1, Ordering::Relaxed);
        let frame = self.encode(req, version, corr)?;
        let mut w = self.writer.lock().await;
        w.write_all(&frame).await.map_err(|e| {
            self.broken.store(true, Ordering::SeqCst);
            conn_error(&self.addr, e)
        })
    }
}
