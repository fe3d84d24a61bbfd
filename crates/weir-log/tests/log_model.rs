//! Model-based test of PartitionLog: random sequences of append, read, timestamp lookup,
//! truncate, roll, DeleteRecords and restart (clean and unclean) are applied both to the
//! log on real files and to a plain Vec of records; after every step the log must agree
//! with the model.

mod common;

use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use weir_kafka::TopicPartition;
use weir_log::{AppendOrigin, LoadParams, LogConfig, PartitionLog};
use weir_record::Compression;

#[derive(Debug, Clone)]
enum Op {
    Append {
        n: usize,
        codec: u8,
        value_len: usize,
        ts_jump: i64,
    },
    Read {
        at: proptest::sample::Index,
        max_bytes: usize,
    },
    Lookup {
        ts: proptest::sample::Index,
    },
    Truncate {
        at: proptest::sample::Index,
    },
    Roll,
    DeleteRecords {
        at: proptest::sample::Index,
    },
    Restart {
        clean: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..12, 0u8..5, 0usize..200, -50i64..500)
            .prop_map(|(n, codec, value_len, ts_jump)| Op::Append { n, codec, value_len, ts_jump }),
        3 => (any::<proptest::sample::Index>(), 1usize..3000).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        2 => any::<proptest::sample::Index>().prop_map(|ts| Op::Lookup { ts }),
        1 => any::<proptest::sample::Index>().prop_map(|at| Op::Truncate { at }),
        1 => Just(Op::Roll),
        1 => any::<proptest::sample::Index>().prop_map(|at| Op::DeleteRecords { at }),
        1 => any::<bool>().prop_map(|clean| Op::Restart { clean }),
    ]
}

struct Harness {
    _dir: tempfile::TempDir,
    pdir: std::path::PathBuf,
    config: Arc<LogConfig>,
    log: Option<PartitionLog>,
    /// Every record, by offset; batches as (first, last) offset ranges.
    model: Vec<Rec>,
    batches: Vec<(i64, i64)>,
    log_start: i64,
    next_ts: i64,
    counter: usize,
}

impl Harness {
    fn new(config: Arc<LogConfig>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pdir = dir.path().join("m-0");
        let log = PartitionLog::create(
            &pdir,
            TopicPartition::new("m", 0),
            uuid::Uuid::new_v4(),
            config.clone(),
            NOW,
        )
        .unwrap();
        Harness {
            _dir: dir,
            pdir,
            config,
            log: Some(log),
            model: Vec::new(),
            batches: Vec::new(),
            log_start: 0,
            next_ts: NOW,
            counter: 0,
        }
    }

    fn log(&mut self) -> &mut PartitionLog {
        self.log.as_mut().unwrap()
    }

    fn leo(&self) -> i64 {
        self.batches
            .last()
            .map_or(self.log_start, |b| b.1 + 1)
            .max(self.log_start)
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Append {
                n,
                codec,
                value_len,
                ts_jump,
            } => {
                let codec = Compression::from_id(*codec).unwrap();
                self.next_ts = (self.next_ts + ts_jump).max(0);
                let mut recs = Vec::new();
                for i in 0..*n {
                    self.counter += 1;
                    let value = format!("{}-", self.counter)
                        .repeat(1 + value_len / 8)
                        .into_bytes();
                    let key = (!self.counter.is_multiple_of(3))
                        .then(|| format!("k{}", self.counter % 7).into_bytes());
                    recs.push((self.next_ts + i as i64, key, Some(value)));
                }
                let view: Vec<RecIn<'_>> = recs
                    .iter()
                    .map(|(t, k, v)| (*t, k.as_deref(), v.as_deref()))
                    .collect();
                let leo = self.leo();
                let bytes = batch(codec, &view);
                if bytes.len() as u64 > self.config.segment_bytes {
                    let err = self
                        .log()
                        .append_as_leader(bytes, 0, NOW, AppendOrigin::Client)
                        .unwrap_err();
                    assert_eq!(err.kafka_error_code(), 18, "RECORD_LIST_TOO_LARGE");
                    return;
                }
                let info = self
                    .log()
                    .append_as_leader(bytes, 0, NOW, AppendOrigin::Client)
                    .unwrap();
                assert_eq!(info.first_offset, leo);
                for (i, (t, k, v)) in recs.into_iter().enumerate() {
                    self.model.push(Rec {
                        offset: leo + i as i64,
                        timestamp: t,
                        key: k,
                        value: v,
                    });
                }
                self.batches.push((leo, leo + *n as i64 - 1));
            }
            Op::Read { at, max_bytes } => {
                let (start, leo) = (self.log_start, self.leo());
                let offset = start + at.index((leo - start + 1) as usize) as i64;
                let data = self.log().read(offset, *max_bytes, i64::MAX, true).unwrap();
                let got: Vec<Rec> = match data.slice {
                    None => Vec::new(),
                    Some(s) => decode(&s.read_to_vec().unwrap())
                        .into_iter()
                        .filter(|r| r.offset >= offset)
                        .collect(),
                };
                if offset < leo {
                    assert!(
                        !got.is_empty(),
                        "a read below the end returns the batch holding {offset}"
                    );
                }
                let want: Vec<&Rec> = self
                    .model
                    .iter()
                    .filter(|r| r.offset >= offset)
                    .take(got.len())
                    .collect();
                assert_eq!(got.iter().collect::<Vec<_>>(), want);
            }
            Op::Lookup { ts } => {
                let max_ts = self.model.iter().map(|r| r.timestamp).max().unwrap_or(NOW) + 10;
                let target = NOW - 100 + ts.index((max_ts - NOW + 100) as usize) as i64;
                let start = self.log_start;
                let want = self
                    .model
                    .iter()
                    .find(|r| r.offset >= start && r.timestamp >= target)
                    .map(|r| (r.offset, r.timestamp));
                let got = self
                    .log()
                    .offset_for_timestamp(target)
                    .unwrap()
                    .map(|t| (t.offset, t.timestamp));
                assert_eq!(got, want, "lookup of {target}");
            }
            Op::Truncate { at } => {
                if self.batches.is_empty() {
                    return;
                }
                // At a batch boundary, as a broker truncates.
                let b = self.batches[at.index(self.batches.len())];
                if b.0 < self.log_start {
                    return;
                }
                self.log().truncate_to(b.0, NOW).unwrap();
                self.model.retain(|r| r.offset < b.0);
                self.batches.retain(|x| x.0 < b.0);
            }
            Op::Roll => self.log().roll(None, NOW).unwrap(),
            Op::DeleteRecords { at } => {
                let (start, leo) = (self.log_start, self.leo());
                let offset = start + at.index((leo - start + 1) as usize) as i64;
                self.log().delete_records_before(offset).unwrap();
                self.log_start = offset;
                self.log().delete_old_segments(NOW).unwrap();
            }
            Op::Restart { clean } => {
                let mut log = self.log.take().unwrap();
                let rp = log.recovery_point();
                let ls = log.log_start_offset();
                if *clean {
                    log.close(NOW).unwrap();
                }
                drop(log);
                let params = LoadParams {
                    recovery_point: Some(rp),
                    log_start_offset: Some(ls),
                    had_clean_shutdown: *clean,
                    now_ms: NOW,
                };
                let (log, _) = PartitionLog::open(
                    &self.pdir,
                    TopicPartition::new("m", 0),
                    self.config.clone(),
                    params,
                )
                .unwrap();
                self.log = Some(log);
            }
        }
        self.check();
    }

    fn check(&mut self) {
        let leo = self.leo();
        let start = self.log_start;
        let log = self.log.as_ref().unwrap();
        assert_eq!(log.log_end_offset(), leo);
        assert_eq!(log.log_start_offset(), start);
        let want: Vec<Rec> = self
            .model
            .iter()
            .filter(|r| r.offset >= start)
            .cloned()
            .collect();
        assert_eq!(read_all(log), want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..60),
                         segment_bytes in 300u64..3000, index_bytes in 24u32..200, interval in 0u32..600) {
        let config = Arc::new(LogConfig {
            segment_bytes,
            segment_index_bytes: index_bytes,
            index_interval_bytes: interval,
            retention_ms: -1,
            file_delete_delay_ms: 0,
            ..LogConfig::default()
        });
        let mut h = Harness::new(config);
        for op in &ops {
            h.apply(op);
        }
    }
}
