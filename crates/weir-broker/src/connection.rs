//! One client connection: Kafka's framing (a 4-byte size, then the request), the request
//! header, dispatch, and responses written back in request order. Requests are handled one
//! at a time per connection, as Kafka does, while the next ones are already buffered
//! (clients pipeline) and the previous responses are still being written. Request bytes
//! in memory are bounded over all connections by `queued.max.request.bytes` (charged as
//! they arrive, and to a quarter of it before a connection has proved itself), before SASL
//! authentication by `sasl.server.max.receive.size` per frame, and the responses waiting
//! for a client to read them per connection. A frame that is too large, truncated or
//! undecodable closes this connection and nothing else.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::ResponseError as E;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use weir_security::Session;

use crate::apis;
use crate::broker::Broker;
use crate::memory::{Held, RequestMemory};
use crate::request::{RequestContext, Response};
use crate::request_quota;
use crate::versions::api_versions_response;
use crate::wire::{self, Decoded, Outgoing};

/// How long a client over its quota waits: its connection is not read for `ms`. Clients
/// from before KIP-219 (Produce below v6, Fetch below v8) do not back off by themselves,
/// so their response waits too, as Kafka delays it.
#[derive(Debug, Default, Clone, Copy)]
struct Mute {
    ms: u32,
    delay_response: bool,
}

/// The room a connection's first read after a pause makes: the read buffer every
/// connection may hold, which may hold several small pipelined requests at once. A request
/// that does not fit in it gets a buffer of its own, charged to the request memory.
const FIRST_READ: usize = 8 * 1024;
/// KiB of responses that may wait for one connection's client to read them; a larger
/// response waits alone.
const RESPONSE_QUEUE_KIB: usize = 1024;

/// Why a connection stops reading.
enum Stop {
    /// The client closed, or the broker is shutting down.
    Quiet,
    Idle,
    BadSize(i32),
    Cut,
}

/// A client connection as accepted: plain TCP, or TLS over it (an `SSL` listener).
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// The reading half of a connection.
enum ReadSide {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for ReadSide {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ReadSide::Plain(r) => Pin::new(r).poll_read(cx, buf),
            ReadSide::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

/// The writing half of a connection.
enum WriteSide {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl WriteSide {
    /// Writes one response: file ranges go with sendfile on plain TCP; TLS must encrypt
    /// them, so they are read into memory first.
    async fn send(&mut self, out: &Outgoing) -> std::io::Result<()> {
        match self {
            WriteSide::Plain(w) => out.write_to(w).await,
            WriteSide::Tls(w) => {
                w.write_all(&out.to_bytes()?).await?;
                w.flush().await
            }
        }
    }

    async fn shutdown(&mut self) {
        let _ = match self {
            WriteSide::Plain(w) => w.shutdown().await,
            WriteSide::Tls(w) => w.shutdown().await,
        };
    }
}

/// Reads request frames off a connection. It holds no buffer while the connection is
/// idle, and memory for a frame only as the frame's bytes arrive: a read buffer of at most
/// `FIRST_READ` bytes that every connection may hold, and past that a buffer of the
/// frame's own that grows (doubling) only once its bytes have filled it, each growth taken
/// from the request memory first. So neither ten thousand idle connections nor clients
/// that announce large frames and send them slowly, or not at all, hold more than about
/// twice the bytes they have actually sent.
struct FrameReader {
    rd: ReadSide,
    buf: BytesMut,
    idle: Duration,
}

impl FrameReader {
    /// Waits (at most `idle`) for bytes, then reads what has arrived into `buf`, making
    /// room for `room` bytes if it has none.
    async fn fill(&mut self, room: usize) -> Result<(), Stop> {
        let rd = match &mut self.rd {
            ReadSide::Plain(rd) => rd,
            ReadSide::Tls(rd) => {
                // TLS decrypts into its own buffers: here the room is made before the wait.
                if self.buf.capacity() == self.buf.len() {
                    self.buf.reserve(room);
                }
                return match tokio::time::timeout(self.idle, rd.read_buf(&mut self.buf)).await {
                    Err(_) => Err(Stop::Idle),
                    Ok(Ok(0)) => Err(Stop::Cut),
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(_)) => Err(Stop::Quiet),
                };
            }
        };
        loop {
            match tokio::time::timeout(self.idle, rd.readable()).await {
                Err(_) => return Err(Stop::Idle),
                Ok(Err(_)) => return Err(Stop::Quiet),
                Ok(Ok(())) => {}
            }
            if self.buf.capacity() == self.buf.len() {
                self.buf.reserve(room);
            }
            match rd.try_read_buf(&mut self.buf) {
                Ok(0) => return Err(Stop::Cut),
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return Err(Stop::Quiet),
            }
        }
    }

    /// Waits (at most `idle`) until bytes can be read. Plain TCP can wait without a
    /// buffer; TLS cannot, and returns at once.
    async fn readable(&mut self) -> Result<(), Stop> {
        match &mut self.rd {
            ReadSide::Plain(rd) => match tokio::time::timeout(self.idle, rd.readable()).await {
                Err(_) => Err(Stop::Idle),
                Ok(Err(_)) => Err(Stop::Quiet),
                Ok(Ok(())) => Ok(()),
            },
            ReadSide::Tls(_) => Ok(()),
        }
    }

    /// The next request frame (after its size prefix), with the request memory it holds.
    /// A size prefix below 8 or above `max` stops the connection before anything is held
    /// for it. `proven`: whether the connection has proved itself (see `memory`).
    async fn next(
        &mut self,
        memory: &RequestMemory,
        proven: bool,
        max: usize,
    ) -> Result<(Bytes, Held), Stop> {
        while self.buf.len() < 4 {
            // A small first read: most requests are small, and a closing connection wakes
            // this too.
            match self.fill(FIRST_READ).await {
                // Closed between requests: the normal end of a connection.
                Err(Stop::Cut) if self.buf.is_empty() => return Err(Stop::Quiet),
                r => r?,
            }
        }
        let size = i32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        if size < 8 || size as usize > max {
            return Err(Stop::BadSize(size));
        }
        let size = size as usize;
        self.buf.advance(4);
        if self.buf.len() >= size {
            // Whole in the read buffer, which every connection may hold: nothing to wait for.
            let frame = self.buf.split_to(size).freeze();
            if self.buf.is_empty() {
                // Let the allocation go with the frame: an idle connection holds nothing.
                self.buf = BytesMut::new();
            }
            return Ok((frame, Held::nothing()));
        }
        // The rest is still to come. What the read buffer holds is all this frame's (it
        // is shorter than the frame); it becomes the frame's own buffer, and is charged.
        let mut frame = std::mem::take(&mut self.buf);
        let mut held = Held::nothing();
        let mut charged = 0;
        if frame.is_empty() {
            // Only the size prefix came: hold nothing until more does.
            frame = BytesMut::new();
        } else {
            charged = frame.capacity();
            held = memory.take(charged, proven).await.ok_or(Stop::Quiet)?;
        }
        while frame.len() < size {
            if frame.len() == frame.capacity() {
                // Bytes first, then the room for them, and the memory before the room.
                self.readable().await?;
                let grown = if frame.capacity() == 0 {
                    FIRST_READ
                } else {
                    frame.capacity() * 2
                }
                .min(size);
                let more = memory
                    .take(grown.saturating_sub(charged), proven)
                    .await
                    .ok_or(Stop::Quiet)?;
                held.merge(more);
                frame.reserve(grown - frame.len());
                charged = charged.max(grown);
            }
            let want = (size - frame.len()) as u64;
            let read =
                tokio::time::timeout(self.idle, (&mut self.rd).take(want).read_buf(&mut frame))
                    .await;
            match read {
                Err(_) => return Err(Stop::Idle),
                Ok(Ok(0)) => return Err(Stop::Cut),
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return Err(Stop::Quiet),
            }
        }
        // The read buffer held less than one frame, so nothing of the next is in `frame`.
        Ok((frame.freeze(), held))
    }
}

/// Serves one connection until the client goes away, errs, idles out, or the broker stops.
pub async fn serve(broker: Arc<Broker>, stream: Stream, peer: SocketAddr, listener: Arc<str>) {
    let mut session = Session::new(broker.config.sasl.get(&*listener).cloned(), peer);
    // On an SSL listener a client certificate names the principal, as in Kafka; one the
    // mapping rules cannot name is refused, like a failed authentication.
    if let (Stream::Tls(s), Some(mapper)) = (&stream, broker.config.ssl_principals.get(&*listener))
    {
        if let Some(cert) = s.get_ref().1.peer_certificates().and_then(|c| c.first()) {
            let named = weir_security::principal::subject_dn(cert).and_then(|dn| mapper.name(&dn));
            match named {
                Ok(name) => session.principal = Arc::from(format!("User:{name}")),
                Err(e) => {
                    tracing::info!(%peer, "closing a TLS connection: {e}");
                    return;
                }
            }
        }
    }
    let (rd, mut wr) = match stream {
        Stream::Plain(s) => {
            let _ = s.set_nodelay(true);
            let (rd, wr) = s.into_split();
            (ReadSide::Plain(rd), WriteSide::Plain(wr))
        }
        Stream::Tls(s) => {
            let _ = s.get_ref().0.set_nodelay(true);
            let (rd, wr) = tokio::io::split(*s);
            (ReadSide::Tls(rd), WriteSide::Tls(wr))
        }
    };
    // Under TLS a response's file ranges are read into memory to be encrypted.
    let tls = matches!(wr, WriteSide::Tls(_));
    // Responses wait here until written, holding this connection's response allowance:
    // a client that stops reading stops being read once RESPONSE_QUEUE bytes wait for it,
    // as Kafka mutes a connection until its response is sent.
    let (tx, mut rx) = mpsc::channel::<(Outgoing, OwnedSemaphorePermit)>(32);
    let allowance = Arc::new(Semaphore::new(RESPONSE_QUEUE_KIB));
    let writer = tokio::spawn(async move {
        while let Some((frame, _memory)) = rx.recv().await {
            // Boxed, like the handlers below: the writer's state is large while it writes.
            if let Err(e) = Box::pin(wr.send(&frame)).await {
                tracing::debug!(%peer, "closing a connection: writing a response failed: {e}");
                break;
            }
        }
        wr.shutdown().await;
    });
    let mut reader = FrameReader {
        rd,
        buf: BytesMut::new(),
        idle: Duration::from_millis(broker.config.connections_max_idle_ms.max(1)),
    };
    let sasl = broker.config.sasl.contains_key(&*listener);
    // Whether this connection has sent a whole request and had it handled.
    let mut served_one = false;
    let mut shutdown = broker.shutdown.subscribe();
    loop {
        // Before SASL authentication a frame is bounded by sasl.server.max.receive.size,
        // as in Kafka; a connection is proven once authenticated (on a SASL listener) or
        // once it has had a request served (on any other).
        let authenticated = !sasl || session.allows(ApiKey::Produce);
        let proven = served_one && authenticated;
        let max = if authenticated {
            broker.config.socket_request_max_bytes
        } else {
            broker
                .config
                .sasl_server_max_receive_size
                .min(broker.config.socket_request_max_bytes)
        };
        let next = tokio::select! {
            r = reader.next(&broker.request_memory, proven, max) => r,
            _ = shutdown.changed() => Err(Stop::Quiet),
        };
        let (frame, permit) = match next {
            Ok(f) => f,
            Err(Stop::Quiet) => break,
            Err(Stop::Idle) => {
                tracing::debug!(%peer, "closing an idle connection (connections.max.idle.ms)");
                break;
            }
            Err(Stop::BadSize(size)) if !authenticated => {
                tracing::info!(%peer, size, max, "closing a connection: a frame before SASL authentication out of bounds (sasl.server.max.receive.size)");
                break;
            }
            Err(Stop::BadSize(size)) => {
                tracing::warn!(%peer, size, max, "closing a connection: request size out of bounds (socket.request.max.bytes)");
                break;
            }
            Err(Stop::Cut) => {
                tracing::debug!(%peer, "closing a connection: the request frame was cut short");
                break;
            }
        };
        // Boxed: the handlers' state is large, and an idle connection should not carry it.
        let response = if session.expects_bare_token() {
            let (out, close) = bare_sasl_token(&broker, &mut session, &frame);
            Ok((out, close, Mute::default()))
        } else {
            Box::pin(handle_frame(&broker, frame, peer, &listener, &mut session)).await
        };
        drop(permit);
        served_one = true;
        let close = matches!(response, Ok((_, true, _)));
        let mute = response.as_ref().map_or(Mute::default(), |r| r.2);
        if mute.delay_response && !pause(mute.ms, &mut shutdown).await {
            break;
        }
        match response.map(|(out, _, _)| out) {
            Ok(Some(out)) => {
                let held = if tls {
                    out.wire_len()
                } else {
                    out.memory_len()
                };
                let kib = held.div_ceil(1024).clamp(1, RESPONSE_QUEUE_KIB);
                let Ok(queued) = allowance.clone().acquire_many_owned(kib as u32).await else {
                    break;
                };
                if tx.send((out, queued)).await.is_err() {
                    break;
                }
                if close {
                    tracing::debug!(%peer, "closing a connection after a failed SASL authentication");
                    break;
                }
            }
            Ok(None) if close => break,
            Ok(None) => {}
            Err(reason) => {
                tracing::warn!(%peer, "closing a connection: {reason}");
                break;
            }
        }
        // Over its quota: the answer is on its way, and nothing more is read until the
        // throttle time has passed.
        if mute.ms > 0 && !mute.delay_response && !pause(mute.ms, &mut shutdown).await {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// Waits out a throttle; false if the broker is shutting down meanwhile.
async fn pause(ms: u32, shutdown: &mut tokio::sync::watch::Receiver<bool>) -> bool {
    crate::metrics::throttled(ms);
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms.into())) => true,
        _ = shutdown.changed() => false,
    }
}

/// A SASL token after a v0 SaslHandshake: the answer goes back bare too, size-prefixed.
fn bare_sasl_token(
    broker: &Broker,
    session: &mut Session,
    token: &[u8],
) -> (Option<Outgoing>, bool) {
    let a = session.authenticate(token, &broker.users);
    if a.error != 0 {
        // No way to say why in this framing: the connection closes, as Kafka's does.
        tracing::info!(
            "SASL authentication failed: {}",
            a.message.unwrap_or_default()
        );
        return (None, true);
    }
    (Some(wire::bare_frame(&a.bytes)), false)
}

/// Decodes, handles and encodes one request. `Ok(None)`: no response is due (acks=0);
/// `Ok((_, true))`: close once the response is written; `Err`: the connection must close.
async fn handle_frame(
    broker: &Arc<Broker>,
    frame: Bytes,
    peer: SocketAddr,
    listener: &Arc<str>,
    session: &mut Session,
) -> Result<(Option<Outgoing>, bool, Mute), String> {
    let size = frame.len();
    let (api_key, version, correlation_id, header, request) = match wire::decode_request(frame)? {
        Decoded::UnsupportedApiVersions { correlation_id } => {
            let mut resp = api_versions_response();
            resp.error_code = E::UnsupportedVersion.code();
            return wire::encode_frame(
                ApiKey::ApiVersions,
                0,
                correlation_id,
                &ResponseKind::ApiVersions(resp),
            )
            .map(|b| (Some(Outgoing::Frame(b)), false, Mute::default()));
        }
        Decoded::Request {
            api_key,
            version,
            correlation_id,
            header,
            request,
        } => (api_key, version, correlation_id, header, request),
    };
    if session.expired(std::time::Instant::now())
        && !matches!(
            api_key,
            ApiKey::SaslHandshake | ApiKey::SaslAuthenticate | ApiKey::ApiVersions
        )
    {
        return Err(format!(
            "{}'s SASL session expired (connections.max.reauth.ms) without a \
             re-authentication",
            session.principal
        ));
    }
    if !session.allows(api_key) {
        return Err(format!(
            "a {api_key:?} request before SASL authentication (only ApiVersions, SaslHandshake \
             and SaslAuthenticate are served until then)"
        ));
    }
    let ctx = RequestContext {
        api_key,
        version,
        correlation_id,
        client_id: header
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default(),
        peer,
        listener: listener.clone(),
        principal: session.principal.clone(),
        host: session.host.clone(),
        size,
        throttle_ms: Default::default(),
    };
    let started = std::time::Instant::now();
    let response = match request {
        RequestKind::SaslHandshake(r) => apis::sasl::handshake(&ctx, session, r),
        RequestKind::SaslAuthenticate(r) => apis::sasl::authenticate(broker, &ctx, session, r),
        request if !request_quota::exempt(&request) && broker.quotas.any_request_quota() => {
            let mut timed = request_quota::PollTimed::new(apis::handle(broker, &ctx, request));
            let mut answer = (&mut timed).await?;
            request_quota::apply(broker, &ctx, &mut answer, timed.nanos);
            (answer, false)
        }
        request => (apis::handle(broker, &ctx, request).await?, false),
    };
    let response: (Response, bool) = response;
    let out = wire::encode(&ctx, response.0)?;
    crate::metrics::request_done(api_key, started.elapsed());
    let ms = ctx.throttle_ms.into_inner();
    let mute = Mute {
        ms,
        delay_response: ms > 0
            && match api_key {
                ApiKey::Produce => version < 6,
                ApiKey::Fetch => version < 8,
                _ => false,
            },
    };
    Ok((out, response.1, mute))
}
