//! Kafka's framing, both ways, in one place: a request frame (after its 4-byte size) is
//! decoded into the API, version, header and body; a handler's answer is encoded into a
//! response frame with its size prefix and header. Fetch responses are spliced around file
//! ranges (`fetch`), and frames go to the socket as `outgoing` pieces. Nothing here knows
//! the broker's state.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::request::{RequestContext, Response};

mod fetch;
pub mod outgoing;

pub use outgoing::{Outgoing, Part};

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
    if !crate::versions::is_supported(api_key, version) {
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

/// The answer to `ctx`'s request as a frame, or `None` when no response is due. An error
/// means the response could not be encoded, and the connection must close.
pub fn encode(ctx: &RequestContext, response: Response) -> Result<Option<Outgoing>, String> {
    match response {
        Response::Message(m) => encode_frame(ctx.api_key, ctx.version, ctx.correlation_id, &m)
            .map(|b| Some(Outgoing::Frame(b))),
        Response::Fetch(reply) => fetch::encode(reply, ctx.version, ctx.correlation_id).map(Some),
        Response::None => Ok(None),
    }
}

/// A SASL token after a v0 SaslHandshake: no header, only the size prefix.
pub fn bare_frame(bytes: &[u8]) -> Outgoing {
    let mut out = BytesMut::with_capacity(4 + bytes.len());
    out.put_i32(bytes.len() as i32);
    out.extend_from_slice(bytes);
    Outgoing::Frame(out.freeze())
}

/// One response frame: the size prefix, the response header, the body.
pub fn encode_frame(
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
