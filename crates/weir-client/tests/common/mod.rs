//! A real broker for the client's tests: `weir serve`'s library, started in-process on a
//! free port with a scratch data directory.
#![allow(dead_code)]

use std::collections::BTreeMap;

use weir_broker::{BrokerConfig, RunningBroker};
use weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES;
use weir_record::LogEntries;

pub struct TestBroker {
    pub running: Option<RunningBroker>,
    pub dir: tempfile::TempDir,
    pub bootstrap: String,
}

pub async fn broker(extra: &[(&str, &str)]) -> TestBroker {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let mut props = BTreeMap::new();
    props.insert(
        "listeners".to_string(),
        "PLAINTEXT://127.0.0.1:0".to_string(),
    );
    props.insert("log.dirs".to_string(), dir.path().display().to_string());
    props.insert(
        "group.initial.rebalance.delay.ms".to_string(),
        "0".to_string(),
    );
    props.insert("offsets.topic.num.partitions".to_string(), "4".to_string());
    for (k, v) in extra {
        props.insert(k.to_string(), v.to_string());
    }
    let running = RunningBroker::start(BrokerConfig::from_properties(props).unwrap())
        .await
        .unwrap();
    let bootstrap = running.addrs[0].to_string();
    TestBroker {
        running: Some(running),
        dir,
        bootstrap,
    }
}

/// (offset, key, value) of a record in a partition's log.
pub type StoredRecord = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

impl TestBroker {
    /// Every record of a partition, read from the broker's log: (offset, key, value).
    pub fn records(&self, topic: &str, partition: i32) -> Vec<StoredRecord> {
        let b = &self.running.as_ref().unwrap().broker;
        let p = b.partition(topic, partition).expect("partition exists");
        let log = p.log.lock().unwrap();
        let mut out = Vec::new();
        let mut offset = log.log_start_offset();
        while offset < log.log_end_offset() {
            let data = log.read(offset, 1 << 20, i64::MAX, true).unwrap();
            let Some(slice) = data.slice else { break };
            let bytes = slice.read_to_vec().unwrap();
            let mut next = offset;
            for e in LogEntries::new(&bytes) {
                let Ok((_, e)) = e else { break };
                next = next.max(e.last_offset() + 1);
                for r in e.records(MAX_DECOMPRESSED_BATCH_BYTES).unwrap().iter() {
                    let r = r.unwrap();
                    if r.offset >= offset {
                        out.push((
                            r.offset,
                            r.key.map(|k| k.to_vec()),
                            r.value.map(|v| v.to_vec()),
                        ));
                    }
                }
            }
            offset = next;
        }
        out
    }

    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await.unwrap();
        }
    }
}
