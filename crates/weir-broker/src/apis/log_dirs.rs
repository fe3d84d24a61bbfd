//! DescribeLogDirs: this broker's data directories (`log.dirs`), each with its total and
//! usable bytes and the replicas it holds with their size, as Kafka's `kafka-log-dirs
//! --describe` and `kafka-reassign-partitions` (which asks it since Kafka 4.2) read them.
//! Needs DESCRIBE on the cluster, as in Kafka. Weir has no future replicas (a replica
//! moving between directories, AlterReplicaLogDirs): each replica is its current one, and
//! its offset lag is Kafka's for one, the high watermark past its log end (so 0).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use weir_kafka::acl::Operation;
use weir_kafka::TopicPartition;

use crate::broker::Broker;
use crate::request::RequestContext;

pub fn describe_log_dirs(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    let mut resp = DescribeLogDirsResponse::default();
    if !broker.allowed_on_cluster(ctx, Operation::Describe) {
        // v1 and v2 have no top-level error: an empty answer, as Kafka gives them.
        resp.error_code = E::ClusterAuthorizationFailed.code();
        return resp;
    }
    // A null topic list asks for every replica; otherwise just those named.
    let wanted: Option<HashMap<String, HashSet<i32>>> = req.topics.map(|topics| {
        let mut w: HashMap<String, HashSet<i32>> = HashMap::new();
        for t in topics {
            w.entry(t.topic.to_string())
                .or_default()
                .extend(t.partitions);
        }
        w
    });
    let reports = super::off_worker(|| {
        broker.logs.describe_dirs(|tp: &TopicPartition| {
            wanted.as_ref().is_none_or(|w| {
                w.get(&*tp.topic)
                    .is_some_and(|ps| ps.contains(&tp.partition))
            })
        })
    });
    for dir in reports {
        let mut result = DescribeLogDirsResult::default();
        result.log_dir = StrBytes::from_string(absolute(&dir.path));
        if dir.offline {
            result.error_code = E::KafkaStorageError.code();
            resp.results.push(result);
            continue;
        }
        match space(&dir.path) {
            Ok((total, usable)) => {
                result.total_bytes = total;
                result.usable_bytes = usable;
            }
            Err(e) => {
                tracing::warn!(dir = %dir.path.display(), "describing a data directory: {e}");
                result.error_code = E::KafkaStorageError.code();
                resp.results.push(result);
                continue;
            }
        }
        let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
        for p in dir.partitions {
            let mut d = DescribeLogDirsPartition::default();
            d.partition_index = p.tp.partition;
            d.partition_size = p.size_bytes.min(i64::MAX as u64) as i64;
            d.offset_lag = (p.high_watermark - p.log_end_offset).max(0);
            topics.entry(p.tp.topic.to_string()).or_default().push(d);
        }
        result.topics = topics
            .into_iter()
            .map(|(name, partitions)| {
                let mut t = DescribeLogDirsTopic::default();
                t.name = TopicName(StrBytes::from_string(name));
                t.partitions = partitions;
                t
            })
            .collect();
        resp.results.push(result);
    }
    resp
}

/// The directory as Kafka names it: absolute.
fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// The file system's total and usable bytes (usable: what an unprivileged writer may
/// still take), as Java's FileStore gives them to Kafka.
fn space(path: &Path) -> std::io::Result<(i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a statvfs the call fills in.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let bytes =
        |blocks: u64| i64::try_from(blocks.saturating_mul(st.f_frsize as u64)).unwrap_or(i64::MAX);
    Ok((bytes(st.f_blocks as u64), bytes(st.f_bavail as u64)))
}
