//! What the broker publishes for Prometheus (off unless `--metrics HOST:PORT`): request
//! counts and latency per API, bytes in and out, connections, and each partition's log
//! figures from the storage engine. Recording is cheap and always on; only the HTTP
//! endpoint is optional.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;

use crate::broker::Broker;

fn api_name(api: ApiKey) -> &'static str {
    static NAMES: OnceLock<HashMap<i16, &'static str>> = OnceLock::new();
    NAMES
        .get_or_init(|| {
            ApiKey::iter()
                .map(|k| (k as i16, &*Box::leak(format!("{k:?}").into_boxed_str())))
                .collect()
        })
        .get(&(api as i16))
        .copied()
        .unwrap_or("Unknown")
}

pub fn request_done(api: ApiKey, elapsed: Duration) {
    let name = api_name(api);
    metrics::counter!("weir_requests_total", "api" => name).increment(1);
    metrics::histogram!("weir_request_latency_seconds", "api" => name)
        .record(elapsed.as_secs_f64());
}

pub fn bytes_in(n: usize) {
    metrics::counter!("weir_bytes_in_total").increment(n as u64);
}

pub fn bytes_out(n: usize) {
    metrics::counter!("weir_bytes_out_total").increment(n as u64);
}

/// A connection muted for `ms` because its client went over a quota.
pub fn throttled(ms: u32) {
    metrics::counter!("weir_throttled_requests_total").increment(1);
    metrics::counter!("weir_throttle_time_ms_total").increment(ms.into());
}

pub fn connections(open: usize) {
    metrics::gauge!("weir_connections").set(open as f64);
}

/// A cluster member's view: whether etcd answers (0 while the broker serves on its last
/// metadata), whether it is the controller (Kafka's ActiveControllerCount), how many live
/// brokers it sees, and the partitions without a live leader (OfflinePartitionsCount).
fn cluster_gauges(broker: &Broker, m: &crate::cluster::Membership) {
    let image = m.image();
    metrics::gauge!("weir_cluster_etcd_connected").set(u8::from(m.session.is_connected()) as f64);
    metrics::gauge!("weir_cluster_active_controller")
        .set(u8::from(m.session.is_controller()) as f64);
    metrics::gauge!("weir_cluster_live_brokers").set(image.brokers.len() as f64);
    metrics::gauge!("weir_cluster_metadata_revision").set(image.revision as f64);
    let offline = broker
        .all_topics()
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter(|v| v.leader().is_none_or(|l| !broker.is_live(l)))
        .count();
    metrics::gauge!("weir_cluster_offline_partitions").set(offline as f64);
}

/// Starts the Prometheus endpoint and a task that copies every partition's log metrics
/// into gauges every few seconds.
pub fn serve(addr: SocketAddr, broker: Arc<Broker>) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&[
            0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        ])
        .map_err(|e| e.to_string())?
        .install()
        .map_err(|e| format!("--metrics {addr}: {e}"))?;
    tokio::spawn(async move {
        let mut shutdown = broker.shutdown.subscribe();
        loop {
            // Kafka's OfflineLogDirectoryCount.
            metrics::gauge!("weir_offline_log_dirs").set(broker.logs.offline_dirs().len() as f64);
            if let Some(m) = &broker.cluster {
                cluster_gauges(&broker, m);
            }
            for (tp, m) in broker.logs.metrics() {
                let labels = [
                    ("topic", tp.topic.to_string()),
                    ("partition", tp.partition.to_string()),
                ];
                metrics::gauge!("weir_log_size_bytes", &labels).set(m.size_bytes as f64);
                metrics::gauge!("weir_log_segments", &labels).set(m.num_segments as f64);
                metrics::gauge!("weir_log_index_bytes", &labels).set(m.index_bytes as f64);
                metrics::gauge!("weir_log_start_offset", &labels).set(m.log_start_offset as f64);
                metrics::gauge!("weir_log_end_offset", &labels).set(m.log_end_offset as f64);
                metrics::gauge!("weir_log_cleaner_dirty_bytes", &labels)
                    .set(m.cleaner_dirty_bytes as f64);
                metrics::gauge!("weir_log_cleaner_lag_ms", &labels).set(m.cleaner_lag_ms as f64);
                metrics::gauge!("weir_log_flushes", &labels).set(m.flush_time.count as f64);
                metrics::gauge!("weir_log_flush_seconds_sum", &labels)
                    .set(m.flush_time.sum_us as f64 / 1e6);
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
    Ok(())
}
