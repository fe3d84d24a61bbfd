//! One client connection: Kafka's framing (a 4-byte size, then the request), the request
//! header, dispatch, and responses written back in request order. Requests are handled one
//! at a time per connection, as Kafka does, while the next ones are already buffered
//! (clients pipeline) and the previous response is still being written. A frame that is
//! too large, truncated or undecodable closes this connection and nothing else.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};
use kafka_protocol::ResponseError as E;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::apis;
use crate::broker::Broker;
use crate::outgoing::Outgoing;

/// What a handler knows about the request it serves.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub api_key: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: String,
    pub peer: SocketAddr,
    /// The listener the client connected through (Metadata advertises that one).
    pub listener: Arc<str>,
}

/// Memory is accounted in KiB permits of the broker's request-memory semaphore.
fn kib(bytes: usize) -> u32 {
    bytes.div_ceil(1024).max(1) as u32
}

/// Serves one connection until the client goes away, errs, idles out, or the broker stops.
pub async fn serve(broker: Arc<Broker>, stream: TcpStream, peer: SocketAddr, listener: Arc<str>) {
    let _ = stream.set_nodelay(true);
    let (rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Outgoing>(32);
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if let Err(e) = frame.write_to(&mut wr).await {
                tracing::debug!(%peer, "closing a connection: writing a response failed: {e}");
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    let idle = Duration::from_millis(broker.config.connections_max_idle_ms.max(1));
    let max = broker.config.socket_request_max_bytes;
    let mut shutdown = broker.shutdown.subscribe();
    loop {
        let size = tokio::select! {
            r = tokio::time::timeout(idle, rd.read_i32()) => match r {
                Err(_) => {
                    tracing::debug!(%peer, "closing an idle connection (connections.max.idle.ms)");
                    break;
                }
                Ok(Err(_)) => break, // closed by the client
                Ok(Ok(n)) => n,
            },
            _ = shutdown.changed() => break,
        };
        if size < 8 || size as usize > max {
            tracing::warn!(%peer, size, max, "closing a connection: request size out of bounds (socket.request.max.bytes)");
            break;
        }
        let size = size as usize;
        // Read the frame as it arrives, taking request memory chunk by chunk: a client that
        // announces a large frame and sends it slowly holds only what it has sent.
        let mut frame = BytesMut::with_capacity(size.min(64 * 1024));
        let mut permit = None::<tokio::sync::OwnedSemaphorePermit>;
        let mut ok = true;
        while frame.len() < size {
            let chunk = (size - frame.len()).min(256 * 1024);
            let p = match broker
                .request_memory
                .clone()
                .acquire_many_owned(kib(chunk))
                .await
            {
                Ok(p) => p,
                Err(_) => {
                    ok = false;
                    break;
                }
            };
            match &mut permit {
                Some(held) => held.merge(p),
                None => permit = Some(p),
            }
            frame.reserve(chunk);
            let mut limited = (&mut rd).take(chunk as u64);
            let read = tokio::time::timeout(idle, async {
                let mut n = 0;
                while n < chunk {
                    let got = limited.read_buf(&mut frame).await?;
                    if got == 0 {
                        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                    }
                    n += got;
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            if !matches!(read, Ok(Ok(()))) {
                ok = false;
                break;
            }
        }
        if !ok {
            tracing::debug!(%peer, "closing a connection: the request frame was cut short");
            break;
        }
        let response = handle_frame(&broker, frame.freeze(), peer, &listener).await;
        drop(permit);
        match response {
            Ok(Some(bytes)) => {
                if tx.send(bytes).await.is_err() {
                    break;
                }
            }
            Ok(None) => {}
            Err(reason) => {
                tracing::warn!(%peer, "closing a connection: {reason}");
                break;
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// A request frame (after its size prefix), decoded.
// Made once per request and taken apart at once: boxing the large variant would cost an
// allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Decoded {
    /// ApiVersions in a version Weir does not serve: answered in v0 with the versions it
    /// does (Kafka's rule), so the client can pick one.
    UnsupportedApiVersions { correlation_id: i32 },
    Request {
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
        header: RequestHeader,
        request: RequestKind,
    },
}

/// Decodes a request frame: the API key, version and correlation id, the header, and the
/// body of any API and version Weir serves. Every input, however hostile, gets a value or
/// an error (`Err`: the connection must close); this is the fuzz target `request_decode`.
pub fn decode_request(mut frame: Bytes) -> Result<Decoded, String> {
    if frame.len() < 8 {
        return Err(format!("a request frame of {} bytes", frame.len()));
    }
    let api_key_raw = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key =
        ApiKey::try_from(api_key_raw).map_err(|_| format!("unknown API key {api_key_raw}"))?;
    if !apis::is_supported(api_key, version) {
        if api_key == ApiKey::ApiVersions {
            return Ok(Decoded::UnsupportedApiVersions { correlation_id });
        }
        return Err(format!("{api_key:?} v{version} is not supported"));
    }
    let header_version = api_key.request_header_version(version);
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| format!("bad request header: {e}"))?;
    let request = RequestKind::decode(api_key, &mut frame, version)
        .map_err(|e| format!("{api_key:?} v{version} could not be decoded: {e}"))?;
    Ok(Decoded::Request {
        api_key,
        version,
        correlation_id,
        header,
        request,
    })
}

/// Decodes, handles and encodes one request. `Ok(None)`: no response is due (acks=0);
/// `Err`: the connection must close.
async fn handle_frame(
    broker: &Arc<Broker>,
    frame: Bytes,
    peer: SocketAddr,
    listener: &Arc<str>,
) -> Result<Option<Outgoing>, String> {
    let (api_key, version, correlation_id, header, request) = match decode_request(frame)? {
        Decoded::UnsupportedApiVersions { correlation_id } => {
            let mut resp = apis::api_versions_response();
            resp.error_code = E::UnsupportedVersion.code();
            return encode(
                ApiKey::ApiVersions,
                0,
                correlation_id,
                &ResponseKind::ApiVersions(resp),
            )
            .map(|b| Some(Outgoing::Frame(b)));
        }
        Decoded::Request {
            api_key,
            version,
            correlation_id,
            header,
            request,
        } => (api_key, version, correlation_id, header, request),
    };
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
    };
    let started = std::time::Instant::now();
    let response = apis::handle(broker, &ctx, request).await?;
    crate::metrics::request_done(api_key, started.elapsed());
    Ok(response)
}

/// One response frame: the size prefix, the response header, the body.
pub(crate) fn encode(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    response: &ResponseKind,
) -> Result<Bytes, String> {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0); // size, filled below
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header
        .encode(&mut buf, api_key.response_header_version(version))
        .map_err(|e| format!("encoding a response header: {e}"))?;
    response
        .encode(&mut buf, version)
        .map_err(|e| format!("encoding the {api_key:?} v{version} response failed: {e}"))?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    crate::metrics::bytes_out(buf.len());
    Ok(buf.freeze())
}
