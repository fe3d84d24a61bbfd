//! Record-format throughput, measured side by side in one run so ratios mean something on
//! a shared machine: building and decoding 16 KiB batches (100-byte and 1 KiB records) in
//! every codec, the raw codecs over the same bytes, and CRC-32C and memcpy as the floor.
//! Throughput is in uncompressed record bytes. `scripts/bench-record.sh` turns the results
//! into the table in BENCHMARKS.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use weir_record::{compression, BatchBuilder, Compression, RecordBatch};

const BATCH_BYTES: usize = 16 * 1024;

/// Deterministic payloads that compress like typical events (a JSON-ish shape with
/// varying digits), so codec figures are neither best nor worst case.
fn payload(i: usize, size: usize) -> Vec<u8> {
    let mut v = format!(
        "{{\"user\":\"u{:06}\",\"event\":\"click\",\"page\":\"/items/{}\",\"ts\":{},\"pad\":\"",
        i * 7919 % 1_000_000,
        i % 977,
        1_700_000_000_000u64 + i as u64 * 13
    )
    .into_bytes();
    let mut x = i as u32 * 2_654_435_761;
    while v.len() < size {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.push(b'a' + (x % 26) as u8);
    }
    v.truncate(size);
    v
}

/// Records of `size` bytes for one batch of about BATCH_BYTES.
fn records(size: usize) -> Vec<Vec<u8>> {
    (0..BATCH_BYTES / (size + 10))
        .map(|i| payload(i, size))
        .collect()
}

fn build(codec: Compression, recs: &[Vec<u8>]) -> Vec<u8> {
    let mut b = BatchBuilder::new(codec, 0, usize::MAX);
    for (i, r) in recs.iter().enumerate() {
        b.append(1_700_000_000_000 + i as i64, None, Some(r), &[])
            .unwrap();
    }
    b.build().unwrap().bytes
}

fn decode(bytes: &[u8]) -> usize {
    let batch = RecordBatch::parse(bytes).unwrap();
    batch.validate_crc().unwrap();
    let records = batch.records(1 << 24).unwrap();
    let mut n = 0;
    for r in records.iter() {
        let r = r.unwrap();
        n += r.value.map_or(0, |v| v.len());
    }
    n
}

fn benches(c: &mut Criterion) {
    for size in [100usize, 1024] {
        let recs = records(size);
        let plain = build(Compression::None, &recs);
        let records_section = plain[61..].to_vec();
        let bytes = records_section.len() as u64;

        let mut g = c.benchmark_group(format!("batch-{size}B"));
        g.throughput(Throughput::Bytes(bytes));
        g.bench_function("crc32c", |b| {
            b.iter(|| weir_record::crc::crc32c(black_box(&plain)))
        });
        let mut dst = vec![0u8; plain.len()];
        g.bench_function("memcpy", |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&plain));
                black_box(&dst);
            })
        });
        g.bench_function("crc32c+memcpy", |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&plain));
                black_box(weir_record::crc::crc32c(&dst))
            })
        });
        for codec in Compression::ALL {
            let built = build(codec, &recs);
            g.bench_with_input(BenchmarkId::new("build", codec), &recs, |b, recs| {
                b.iter(|| build(codec, black_box(recs)))
            });
            g.bench_with_input(BenchmarkId::new("decode", codec), &built, |b, built| {
                b.iter(|| decode(black_box(built)))
            });
            g.bench_with_input(BenchmarkId::new("validate", codec), &built, |b, built| {
                b.iter(|| {
                    let batch = RecordBatch::parse(black_box(built)).unwrap();
                    batch.validate_crc().unwrap();
                    batch.validate_records(1 << 24).unwrap()
                })
            });
            if codec == Compression::None {
                continue;
            }
            let mut compressed = Vec::new();
            compression::compress(codec.into(), &records_section, &mut compressed).unwrap();
            g.bench_with_input(
                BenchmarkId::new("compress", codec),
                &records_section,
                |b, input| {
                    b.iter(|| {
                        let mut out = Vec::with_capacity(input.len());
                        compression::compress(codec.into(), black_box(input), &mut out).unwrap();
                        out
                    })
                },
            );
            g.bench_with_input(
                BenchmarkId::new("decompress", codec),
                &compressed,
                |b, input| {
                    b.iter(|| compression::decompress(codec, black_box(input), 1 << 24).unwrap())
                },
            );
        }
        g.finish();
    }
}

criterion_group! {
    name = record;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = benches
}
criterion_main!(record);
