//! The codecs Kafka uses for the records section of a batch: gzip, snappy, lz4 and zstd,
//! each in exactly the stream format Kafka's Java client reads and writes. Decompression is
//! always bounded by a caller-given limit, so a small hostile input can never make us
//! allocate without end.
//!
//! Formats, per codec:
//! - gzip: RFC 1952, concatenated members accepted (as `GZIPInputStream` does).
//! - snappy: the xerial snappy-java stream (`\x82SNAPPY\0`, two BE i32 versions, then
//!   BE i32-length-prefixed raw blocks of at most 32 KiB input) is written, as Java does;
//!   reading accepts it and also a bare raw snappy block, which librdkafka writes.
//! - lz4: the LZ4 frame format with 64 KiB independent blocks and no checksums
//!   (Kafka's `KafkaLZ4BlockOutputStream`). Magic-0 messages carry a frame header checksum
//!   that Kafka computed over the wrong bytes; `decompress_legacy_v0` accepts it.
//! - zstd: standard frames, any level Kafka allows.

use std::fmt;
use std::io::{self, Read, Write};
use std::str::FromStr;

use crate::error::{RecordError, Result};

/// A compression codec, numbered as in the low three bits of a batch's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Compression {
    #[default]
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Compression {
    /// Every codec, in id order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec with this attribute id.
    pub fn from_id(id: u8) -> Result<Self> {
        match id {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(RecordError::UnknownCodec(other)),
        }
    }

    /// The attribute id.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// Kafka's name for it (`compression.type` values).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(Compression::None),
            "gzip" => Ok(Compression::Gzip),
            "snappy" => Ok(Compression::Snappy),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            _ => Err(format!(
                "unknown compression type '{s}': expected one of none, gzip, snappy, lz4, zstd"
            )),
        }
    }
}

/// Kafka's level bounds and defaults (`compression.<codec>.level`, KIP-390).
pub mod level {
    /// gzip: 1..=9; Kafka's default (-1) is zlib's default, 6.
    pub const GZIP_MIN: i32 = 1;
    pub const GZIP_MAX: i32 = 9;
    pub const GZIP_DEFAULT: i32 = 6;
    /// lz4: 1..=17, default 9, which Kafka maps to the fast (non-HC) compressor.
    pub const LZ4_MIN: i32 = 1;
    pub const LZ4_MAX: i32 = 17;
    pub const LZ4_DEFAULT: i32 = 9;
    /// zstd: -131072..=22, default 3.
    pub const ZSTD_MIN: i32 = -131072;
    pub const ZSTD_MAX: i32 = 22;
    pub const ZSTD_DEFAULT: i32 = 3;
}

/// A codec with its level: what a producer or a topic's `compression.type` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompressionConfig {
    pub codec: Compression,
    level: Option<i32>,
}

impl CompressionConfig {
    /// The codec at Kafka's default level.
    pub const fn new(codec: Compression) -> Self {
        CompressionConfig { codec, level: None }
    }

    /// The codec at an explicit level, checked against Kafka's range for that codec.
    pub fn with_level(codec: Compression, level: i32) -> std::result::Result<Self, String> {
        let (min, max) = match codec {
            Compression::Gzip => (level::GZIP_MIN, level::GZIP_MAX),
            Compression::Lz4 => (level::LZ4_MIN, level::LZ4_MAX),
            Compression::Zstd => (level::ZSTD_MIN, level::ZSTD_MAX),
            Compression::None | Compression::Snappy => {
                return Err(format!("compression type {codec} has no level"));
            }
        };
        if codec == Compression::Gzip && level == -1 {
            return Ok(CompressionConfig::new(codec));
        }
        if !(min..=max).contains(&level) {
            return Err(format!(
                "compression.{codec}.level must be between {min} and {max}, got {level}"
            ));
        }
        if codec == Compression::Lz4 && level != level::LZ4_DEFAULT {
            // Kafka uses LZ4's high-compression mode for levels other than 9; the pure-Rust
            // encoder we use has only the fast mode, and answering a different level silently
            // would be a wrong answer.
            return Err(format!(
                "compression.lz4.level={level} is not supported: Weir's LZ4 encoder has only \
                 the fast mode, Kafka's default level {}",
                level::LZ4_DEFAULT
            ));
        }
        Ok(CompressionConfig {
            codec,
            level: Some(level),
        })
    }

    /// The effective level (the codec's default when none was given).
    pub fn level(&self) -> i32 {
        self.level.unwrap_or(match self.codec {
            Compression::Gzip => level::GZIP_DEFAULT,
            Compression::Lz4 => level::LZ4_DEFAULT,
            Compression::Zstd => level::ZSTD_DEFAULT,
            Compression::None | Compression::Snappy => 0,
        })
    }
}

impl From<Compression> for CompressionConfig {
    fn from(codec: Compression) -> Self {
        CompressionConfig::new(codec)
    }
}

const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_LEN: usize = 16;
/// snappy-java's default block size, which Kafka's producer uses.
const XERIAL_BLOCK: usize = 32 * 1024;

/// Appends the compressed form of `input` to `out`.
pub fn compress(config: CompressionConfig, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let codec = config.codec;
    let io_err = |e: io::Error| RecordError::CorruptCompressed {
        codec,
        reason: e.to_string(),
    };
    match codec {
        Compression::None => out.extend_from_slice(input),
        Compression::Gzip => {
            let mut enc =
                flate2::write::GzEncoder::new(out, flate2::Compression::new(config.level() as u32));
            enc.write_all(input).map_err(io_err)?;
            enc.finish().map_err(io_err)?;
        }
        Compression::Snappy => {
            out.extend_from_slice(&XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut encoder = snap::raw::Encoder::new();
            for chunk in input.chunks(XERIAL_BLOCK) {
                let len_at = out.len();
                out.extend_from_slice(&[0; 4]);
                let start = out.len();
                out.resize(start + snap::raw::max_compress_len(chunk.len()), 0);
                let n = encoder.compress(chunk, &mut out[start..]).map_err(|e| {
                    RecordError::CorruptCompressed {
                        codec,
                        reason: e.to_string(),
                    }
                })?;
                out.truncate(start + n);
                out[len_at..len_at + 4].copy_from_slice(&(n as u32).to_be_bytes());
            }
        }
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent)
                .block_checksums(false)
                .content_checksum(false);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            enc.write_all(input).map_err(io_err)?;
            enc.finish().map_err(|e| io_err(e.into()))?;
        }
        Compression::Zstd => {
            let mut enc = zstd::stream::write::Encoder::new(out, config.level()).map_err(io_err)?;
            enc.write_all(input).map_err(io_err)?;
            enc.finish().map_err(io_err)?;
        }
    }
    Ok(())
}

/// Decompresses `input` (the records section of a batch, or a legacy wrapper's value),
/// appending to `out`; fails with `TooLarge` rather than inflate past `limit` bytes.
pub fn decompress_into(
    codec: Compression,
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    match codec {
        Compression::None => {
            check_limit(input.len(), limit)?;
            out.extend_from_slice(input);
            Ok(())
        }
        Compression::Gzip => {
            read_bounded(flate2::read::MultiGzDecoder::new(input), codec, limit, out)
        }
        Compression::Snappy => snappy_decompress(input, limit, out),
        Compression::Lz4 => {
            read_bounded(lz4_flex::frame::FrameDecoder::new(input), codec, limit, out)
        }
        Compression::Zstd => {
            let mut dec = zstd::stream::read::Decoder::with_buffer(input).map_err(|e| {
                RecordError::CorruptCompressed {
                    codec,
                    reason: e.to_string(),
                }
            })?;
            // zstd's default cap on the window (128 MiB), stated so it is a choice.
            dec.window_log_max(27)
                .map_err(|e| RecordError::CorruptCompressed {
                    codec,
                    reason: e.to_string(),
                })?;
            read_bounded(dec, codec, limit, out)
        }
    }
}

/// `decompress_into` to a new vector.
pub fn decompress(codec: Compression, input: &[u8], limit: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    decompress_into(codec, input, limit, &mut out)?;
    Ok(out)
}

/// Decompresses the value of a magic-0 compressed wrapper. Identical to `decompress_into`
/// except for LZ4, where Kafka's v0 writer put a header checksum computed over the frame
/// magic as well as the descriptor; we repair that byte and decode the frame normally.
pub fn decompress_legacy_v0(
    codec: Compression,
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    if codec != Compression::Lz4 {
        return decompress_into(codec, input, limit, out);
    }
    // magic(4) FLG(1) BD(1) [content size(8)] [dict id(4)] HC(1)
    if input.len() < 7 {
        return decompress_into(codec, input, limit, out);
    }
    let flg = input[4];
    let descriptor_len =
        2 + if flg & 0x08 != 0 { 8 } else { 0 } + if flg & 0x01 != 0 { 4 } else { 0 };
    let hc_at = 4 + descriptor_len;
    if input.len() <= hc_at {
        return decompress_into(codec, input, limit, out);
    }
    let mut header = [0u8; 19];
    header[..=hc_at].copy_from_slice(&input[..=hc_at]);
    let hash = twox_hash::XxHash32::oneshot(0, &input[4..hc_at]);
    header[hc_at] = (hash >> 8) as u8;
    let reader = (&header[..=hc_at]).chain(&input[hc_at + 1..]);
    read_bounded(
        lz4_flex::frame::FrameDecoder::new(reader),
        codec,
        limit,
        out,
    )
}

fn check_limit(size: usize, limit: usize) -> Result<()> {
    if size > limit {
        Err(RecordError::TooLarge {
            size: size as u64,
            limit: limit as u64,
        })
    } else {
        Ok(())
    }
}

fn read_bounded<R: Read>(
    reader: R,
    codec: Compression,
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    let start = out.len();
    // One byte past the limit tells "exactly at the limit" from "over it".
    let mut bounded = reader.take(limit as u64 + 1);
    bounded
        .read_to_end(out)
        .map_err(|e| RecordError::CorruptCompressed {
            codec,
            reason: e.to_string(),
        })?;
    let produced = out.len() - start;
    if produced > limit {
        out.truncate(start);
        return Err(RecordError::TooLarge {
            size: produced as u64,
            limit: limit as u64,
        });
    }
    Ok(())
}

fn snappy_decompress(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<()> {
    let corrupt = |reason: String| RecordError::CorruptCompressed {
        codec: Compression::Snappy,
        reason,
    };
    let mut decoder = snap::raw::Decoder::new();
    let mut block = |data: &[u8], out: &mut Vec<u8>| -> Result<()> {
        let len = snap::raw::decompress_len(data).map_err(|e| corrupt(e.to_string()))?;
        let start = out.len();
        check_limit(start + len, limit)?;
        out.resize(start + len, 0);
        let n = decoder
            .decompress(data, &mut out[start..])
            .map_err(|e| corrupt(e.to_string()))?;
        out.truncate(start + n);
        Ok(())
    };
    let base = out.len();
    if input.len() >= XERIAL_MAGIC.len() && input[..XERIAL_MAGIC.len()] == XERIAL_MAGIC {
        if input.len() < XERIAL_HEADER_LEN {
            return Err(corrupt("xerial header cut short".into()));
        }
        let mut rest = &input[XERIAL_HEADER_LEN..];
        while !rest.is_empty() {
            if rest.len() < 4 {
                return Err(corrupt("xerial block length cut short".into()));
            }
            let n = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
            if n < 0 || n as usize > rest.len() - 4 {
                return Err(corrupt(format!("xerial block length {n} out of bounds")));
            }
            let (data, tail) = rest[4..].split_at(n as usize);
            // The limit covers the whole output of this call, not each block.
            block(data, out).map_err(|e| match e {
                RecordError::TooLarge { size, limit } => RecordError::TooLarge {
                    size: size - base as u64,
                    limit,
                },
                other => other,
            })?;
            rest = tail;
        }
        Ok(())
    } else {
        block(input, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Vec<u8> {
        (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect()
    }

    #[test]
    fn round_trip_every_codec() {
        let data = sample();
        for codec in Compression::ALL {
            let mut out = Vec::new();
            compress(codec.into(), &data, &mut out).unwrap();
            assert_eq!(
                decompress(codec, &out, data.len()).unwrap(),
                data,
                "{codec}"
            );
            if codec != Compression::None {
                assert!(
                    out.len() < data.len(),
                    "{codec} should shrink repetitive data"
                );
            }
        }
    }

    #[test]
    fn limit_is_enforced_for_every_codec() {
        let data = vec![0u8; 1 << 20];
        for codec in Compression::ALL {
            let mut out = Vec::new();
            compress(codec.into(), &data, &mut out).unwrap();
            let err = decompress(codec, &out, 1000).unwrap_err();
            assert!(
                matches!(err, RecordError::TooLarge { limit: 1000, .. }),
                "{codec}: {err}"
            );
            assert_eq!(decompress(codec, &out, 1 << 20).unwrap().len(), 1 << 20);
        }
    }

    #[test]
    fn snappy_reads_raw_blocks_as_librdkafka_writes_them() {
        let data = sample();
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(
            decompress(Compression::Snappy, &raw, data.len()).unwrap(),
            data
        );
    }

    #[test]
    fn snappy_writes_xerial_framing() {
        let mut out = Vec::new();
        compress(Compression::Snappy.into(), b"hello hello hello", &mut out).unwrap();
        assert_eq!(&out[..8], &XERIAL_MAGIC);
        assert_eq!(&out[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
    }

    #[test]
    fn lz4_frame_matches_kafka_settings() {
        let mut out = Vec::new();
        compress(Compression::Lz4.into(), b"abc", &mut out).unwrap();
        assert_eq!(&out[..4], &[0x04, 0x22, 0x4d, 0x18], "LZ4 frame magic");
        // FLG: version 01, block independence, no checksums, no content size.
        assert_eq!(out[4], 0b0110_0000);
        // BD: 64 KiB maximum block size.
        assert_eq!(out[5], 0b0100_0000);
    }

    #[test]
    fn lz4_v0_broken_header_checksum_is_accepted() {
        let mut out = Vec::new();
        compress(Compression::Lz4.into(), b"legacy payload", &mut out).unwrap();
        // Kafka's magic-0 writer hashed the frame magic too.
        let broken = twox_hash::XxHash32::oneshot(0, &out[..6]);
        out[6] = (broken >> 8) as u8;
        assert!(decompress(Compression::Lz4, &out, 100).is_err());
        let mut v = Vec::new();
        decompress_legacy_v0(Compression::Lz4, &out, 100, &mut v).unwrap();
        assert_eq!(v, b"legacy payload");
    }

    #[test]
    fn levels_follow_kafka_ranges() {
        assert!(CompressionConfig::with_level(Compression::Gzip, 9).is_ok());
        assert!(CompressionConfig::with_level(Compression::Gzip, 10).is_err());
        assert!(CompressionConfig::with_level(Compression::Zstd, -5).is_ok());
        assert!(CompressionConfig::with_level(Compression::Zstd, 23).is_err());
        assert!(CompressionConfig::with_level(Compression::Snappy, 1).is_err());
        assert!(CompressionConfig::with_level(Compression::Lz4, 9).is_ok());
        assert!(CompressionConfig::with_level(Compression::Lz4, 12).is_err());
        let data = sample();
        for level in [1, 9] {
            let cfg = CompressionConfig::with_level(Compression::Gzip, level).unwrap();
            let mut out = Vec::new();
            compress(cfg, &data, &mut out).unwrap();
            assert_eq!(
                decompress(Compression::Gzip, &out, data.len()).unwrap(),
                data
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn garbage_never_panics(codec in 0u8..5, bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let codec = Compression::from_id(codec).unwrap();
            let _ = decompress(codec, &bytes, 1 << 16);
            let mut out = Vec::new();
            let _ = decompress_legacy_v0(codec, &bytes, 1 << 16, &mut out);
        }

        #[test]
        fn round_trip_any_bytes(codec in 0u8..5, bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let codec = Compression::from_id(codec).unwrap();
            let mut out = Vec::new();
            compress(codec.into(), &bytes, &mut out).unwrap();
            prop_assert_eq!(decompress(codec, &out, bytes.len()).unwrap(), bytes);
        }
    }
}
