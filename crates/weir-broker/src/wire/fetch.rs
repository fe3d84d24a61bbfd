//! The Fetch response on the wire. Each partition is encoded by kafka-protocol with an
//! empty record set, whose encoding is then replaced by the file range's length and the
//! range itself, so the records go from the segment files to the socket with sendfile and
//! never through Weir's memory (see `outgoing`). Anything the splice does not cover is
//! encoded whole in memory instead.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Encodable;

use super::outgoing::{Outgoing, Part};
use crate::request::FetchReply;

/// Encodes a fetch response frame around its file ranges. Each partition is encoded by
/// kafka-protocol with an empty record set, whose encoding (and, in flexible versions, the
/// empty tagged-field section after it) is then replaced by the range's length and the
/// range itself; the few fields around the partitions are written here. Anything this
/// splice does not cover falls back to reading the ranges and encoding it all in memory.
pub fn encode(reply: FetchReply, version: i16, correlation_id: i32) -> Result<Outgoing, String> {
    let spliceable = (4..=12).contains(&version)
        && reply.response.unknown_tagged_fields.is_empty()
        && reply.response.responses.len() == reply.records.len()
        && reply
            .response
            .responses
            .iter()
            .zip(&reply.records)
            .all(|(t, r)| {
                t.unknown_tagged_fields.is_empty()
                    && t.partitions.len() == r.len()
                    && t.partitions.iter().all(|p| {
                        p.records.as_ref().is_some_and(|b| b.is_empty())
                            && p.diverging_epoch == Default::default()
                            && p.current_leader == Default::default()
                            && p.snapshot_id == Default::default()
                            && p.unknown_tagged_fields.is_empty()
                    })
            });
    if !spliceable {
        return encode_in_memory(reply, version, correlation_id);
    }
    let flexible = version >= 12;
    let err = |e: anyhow::Error| format!("encoding the Fetch v{version} response failed: {e}");
    // The first piece stays mutable until the frame's size is known.
    let mut head: Option<BytesMut> = None;
    let mut parts = Vec::new();
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0); // the frame size, patched below
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header
        .encode(&mut buf, ApiKey::Fetch.response_header_version(version))
        .map_err(err)?;
    let r = &reply.response;
    buf.put_i32(r.throttle_time_ms);
    if version >= 7 {
        buf.put_i16(r.error_code);
        buf.put_i32(r.session_id);
    }
    put_len(&mut buf, flexible, r.responses.len());
    for (t, slices) in r.responses.iter().zip(&reply.records) {
        let name: &str = &t.topic;
        if flexible {
            put_len(&mut buf, true, name.len());
        } else {
            buf.put_i16(name.len() as i16); // topic names are at most 249 bytes
        }
        buf.put_slice(name.as_bytes());
        put_len(&mut buf, flexible, t.partitions.len());
        for (p, slice) in t.partitions.iter().zip(slices) {
            p.encode(&mut buf, version).map_err(err)?;
            let Some(slice) = slice else { continue };
            // Take back the empty record set (and the empty tagged fields after it).
            let empty: &[u8] = if flexible { &[1, 0] } else { &[0, 0, 0, 0] };
            if !buf.ends_with(empty) {
                return Err(format!("Fetch v{version}: unexpected partition encoding"));
            }
            buf.truncate(buf.len() - empty.len());
            put_len(&mut buf, flexible, slice.len);
            let piece = buf.split();
            match head {
                None => head = Some(piece),
                Some(_) => parts.push(Part::Bytes(piece.freeze())),
            }
            parts.push(Part::File(slice.clone()));
            if flexible {
                buf.put_u8(0); // the partition's tagged fields: none
            }
        }
        if flexible {
            buf.put_u8(0); // the topic's tagged fields
        }
    }
    if flexible {
        buf.put_u8(0); // the response's tagged fields
    }
    let mut head = match head {
        Some(h) => {
            parts.push(Part::Bytes(buf.freeze()));
            h
        }
        None => buf, // no file ranges: the whole frame is one piece
    };
    let size = head.len() - 4 + parts.iter().map(Part::wire_len).sum::<usize>();
    let size = i32::try_from(size).map_err(|_| format!("a fetch response of {size} bytes"))?;
    head[..4].copy_from_slice(&size.to_be_bytes());
    parts.insert(0, Part::Bytes(head.freeze()));
    let out = Outgoing::Parts(parts);
    crate::metrics::bytes_out(out.wire_len());
    Ok(out)
}

/// A Kafka array or bytes length: INT32 before flexible versions, an unsigned varint of
/// length + 1 in them. Written here because kafka-protocol keeps its primitive encoders
/// (`types::UnsignedVarInt` and the rest) private to the crate, and weir-record's varints
/// are the zigzag kind records use.
fn put_len(buf: &mut BytesMut, flexible: bool, len: usize) {
    if flexible {
        let mut v = len as u64 + 1;
        while v >= 0x80 {
            buf.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        buf.put_u8(v as u8);
    } else {
        buf.put_i32(len as i32);
    }
}

/// The whole response in one buffer, the ranges read into memory.
fn encode_in_memory(
    mut reply: FetchReply,
    version: i16,
    correlation_id: i32,
) -> Result<Outgoing, String> {
    for (t, slices) in reply.response.responses.iter_mut().zip(&reply.records) {
        for (p, slice) in t.partitions.iter_mut().zip(slices) {
            if let Some(slice) = slice {
                let bytes = slice
                    .read_to_vec()
                    .map_err(|e| format!("reading a segment for a fetch response failed: {e}"))?;
                p.records = Some(Bytes::from(bytes));
            }
        }
    }
    super::encode_frame(
        ApiKey::Fetch,
        version,
        correlation_id,
        &ResponseKind::Fetch(reply.response),
    )
    .map(Outgoing::Frame)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use kafka_protocol::messages::fetch_response::AbortedTransaction;
    use kafka_protocol::messages::{ResponseKind, TopicName};
    use kafka_protocol::protocol::{Decodable, StrBytes};

    use std::sync::Arc;

    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{BrokerId, FetchResponse};
    use kafka_protocol::ResponseError as E;
    use weir_log::FileSlice;

    use super::*;

    /// A response over three partitions of two topics: one with records from the file, one
    /// empty, one in error; aborted transactions present as read_committed leaves them.
    fn reply(file: &Arc<std::fs::File>, v: i16) -> FetchReply {
        let mut response = FetchResponse::default();
        response.throttle_time_ms = 7;
        let mut records = Vec::new();
        for (t, name) in ["events", "a-much-longer-topic-name.with_dots"]
            .iter()
            .enumerate()
        {
            let mut tr = FetchableTopicResponse::default();
            tr.topic = TopicName(StrBytes::from_string(name.to_string()));
            let mut slices = Vec::new();
            for p in 0..3 {
                let mut pd = PartitionData::default();
                pd.partition_index = p;
                pd.high_watermark = 1000 + p as i64;
                pd.last_stable_offset = 1000 + p as i64;
                if v >= 5 {
                    pd.log_start_offset = 5;
                }
                pd.records = Some(Bytes::new());
                if v >= 11 {
                    pd.preferred_read_replica = BrokerId(-1);
                }
                pd.aborted_transactions = Some(vec![AbortedTransaction::default()]);
                let slice = match p {
                    0 => Some(FileSlice::new(file.clone(), 3 + t as u64, 300 + t)),
                    1 => None,
                    _ => {
                        pd.error_code = E::OffsetOutOfRange.code();
                        None
                    }
                };
                tr.partitions.push(pd);
                slices.push(slice);
            }
            response.responses.push(tr);
            records.push(slices);
        }
        FetchReply { response, records }
    }

    #[test]
    fn the_spliced_response_is_byte_for_byte_what_kafka_protocol_encodes() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let file = Arc::new(f);
        for v in 4..=12 {
            let spliced = encode(reply(&file, v), v, 42).unwrap();
            assert!(
                matches!(spliced, Outgoing::Parts(_)),
                "v{v} took the fallback"
            );
            let spliced = spliced.to_bytes().unwrap();
            let mut expected = reply(&file, v);
            for (t, slices) in expected
                .response
                .responses
                .iter_mut()
                .zip(&expected.records)
            {
                for (p, s) in t.partitions.iter_mut().zip(slices) {
                    if let Some(s) = s {
                        p.records = Some(Bytes::from(s.read_to_vec().unwrap()));
                    }
                }
            }
            let whole = crate::wire::encode_frame(
                ApiKey::Fetch,
                v,
                42,
                &ResponseKind::Fetch(expected.response.clone()),
            )
            .unwrap();
            assert_eq!(spliced, whole, "Fetch v{v}");
            // And it reads back as the response it was built from.
            let mut body = spliced.slice(4..);
            ResponseHeader::decode(&mut body, ApiKey::Fetch.response_header_version(v)).unwrap();
            let decoded = FetchResponse::decode(&mut body, v).unwrap();
            assert_eq!(decoded, expected.response, "Fetch v{v}");
            assert_eq!(
                decoded.responses[1].partitions[0].records.as_deref(),
                Some(&data[4..304 + 1])
            );
        }
    }

    #[test]
    fn a_response_without_file_ranges_is_one_piece_and_still_kafka_protocols_bytes() {
        let file = Arc::new(tempfile::tempfile().unwrap());
        for v in [4, 11, 12] {
            let mut r = reply(&file, v);
            for slices in &mut r.records {
                slices.iter_mut().for_each(|s| *s = None);
            }
            let expected = crate::wire::encode_frame(
                ApiKey::Fetch,
                v,
                9,
                &ResponseKind::Fetch(r.response.clone()),
            )
            .unwrap();
            let out = encode(r, v, 9).unwrap();
            assert!(matches!(&out, Outgoing::Parts(p) if p.len() == 1), "v{v}");
            assert_eq!(out.to_bytes().unwrap(), expected, "Fetch v{v}");
        }
    }

    #[test]
    fn a_range_that_shrank_is_an_error_not_a_short_frame() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[1u8; 100]).unwrap();
        let file = Arc::new(f);
        let out = encode(reply(&file, 12), 12, 1).unwrap();
        file.set_len(50).unwrap();
        assert!(out.to_bytes().is_err());
    }

    #[test]
    fn a_partition_with_tagged_fields_falls_back_to_encoding_in_memory() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[9u8; 400]).unwrap();
        let file = Arc::new(f);
        let mut r = reply(&file, 12);
        r.response.responses[0].partitions[0].diverging_epoch.epoch = 3;
        let out = encode(r, 12, 1).unwrap();
        let Outgoing::Frame(bytes) = out else {
            panic!("expected the in-memory encoding")
        };
        let mut body = bytes.slice(4..);
        ResponseHeader::decode(&mut body, 1).unwrap();
        let decoded = FetchResponse::decode(&mut body, 12).unwrap();
        assert_eq!(decoded.responses[0].partitions[0].diverging_epoch.epoch, 3);
        assert_eq!(
            decoded.responses[0].partitions[0]
                .records
                .as_ref()
                .unwrap()
                .len(),
            300
        );
    }
}
