//! `weir bench consume`: N records read from the beginning of every partition; throughput,
//! and how long each poll waited. Only on a broker of our own does it write the records first.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use weir_client::{DeliveryListener, Producer, ProducerRecord};

use super::broker::Broker;
use super::common::{assigned_consumer, usage, Common};
use super::load::{check_delivered, payloads};
use super::report::{histogram, Meter, Outcome, Progress};
use crate::tally::Tally;

#[derive(clap::Args)]
pub(super) struct ConsumeArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// The topic, read from the beginning of every partition.
    #[arg(long)]
    topic: String,
    /// How many records to read.
    #[arg(long, value_name = "N")]
    records: u64,
    /// Bytes per record when the topic is first filled (only without --bootstrap: our
    /// own broker starts empty, so N records are produced before the clock starts).
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    record_size: usize,
    /// Give up after this long without a new record.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    timeout_ms: u64,
}

/// Writes `n` records of `size` bytes into a new one-partition topic (before a consume run
/// on our own, empty broker).
async fn fill(broker: &Broker, topic: &str, n: u64, size: usize) -> anyhow::Result<()> {
    broker.ensure_topic(topic, 1).await?;
    eprintln!("weir bench: writing {n} records of {size} bytes to read back");
    let values = payloads(size, None)?;
    let producer = Producer::from_properties([
        ("bootstrap.servers", broker.bootstrap.as_str()),
        ("acks", "1"),
        ("linger.ms", "5"),
    ])
    .map_err(|e| anyhow!("{e}"))?;
    let tally = Arc::new(Tally::default());
    let listener: Arc<dyn DeliveryListener> = tally.clone();
    let topic: Arc<str> = topic.into();
    for i in 0..n {
        let record =
            ProducerRecord::new(topic.clone()).value(values[i as usize % values.len()].clone());
        producer
            .send_with_listener(record, &listener, i)
            .await
            .map_err(|e| anyhow!("filling the topic: {e}"))?;
    }
    producer.flush().await.map_err(|e| anyhow!("{e}"))?;
    producer
        .close(Duration::from_secs(30))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    check_delivered(&tally, n).context("filling the topic")
}

pub(super) async fn run(a: ConsumeArgs) -> anyhow::Result<Outcome> {
    if a.records == 0 {
        return Err(usage("--records must be at least 1"));
    }
    let broker = Broker::resolve(&a.common)?;
    if broker.is_own() {
        fill(&broker, &a.topic, a.records, a.record_size).await?;
    }
    let (mut consumer, partitions) =
        assigned_consumer(&broker.bootstrap, &a.topic, &[], &a.common).await?;
    consumer
        .seek_to_beginning(&partitions)
        .map_err(|e| anyhow!("{e}"))?;

    let progress = Progress::start(a.records);
    let done = progress.count();
    let mut latency = histogram();
    let idle_limit = Duration::from_millis(a.timeout_ms);
    let meter = Meter::start(&broker);
    let mut last_data = Instant::now();
    let (mut records, mut bytes) = (0u64, 0u64);
    while records < a.records {
        let asked = Instant::now();
        let batch = consumer
            .poll(Duration::from_millis(200))
            .await
            .map_err(|e| anyhow!("{e}"))?;
        if batch.is_empty() {
            if last_data.elapsed() >= idle_limit {
                break;
            }
            continue;
        }
        latency.saturating_record((asked.elapsed().as_micros() as u64).max(1));
        last_data = Instant::now();
        for r in batch.iter().take((a.records - records) as usize) {
            bytes += r.value.as_ref().map_or(0, |v| v.len() as u64)
                + r.key.as_ref().map_or(0, |k| k.len() as u64);
            records += 1;
        }
        done.store(records, Ordering::Relaxed);
    }
    let spent = meter.stop(&broker);
    progress.finish().await;
    let _ = consumer.close_with_timeout(Duration::from_secs(5)).await;
    if records < a.records {
        bail!(
            "only {records} of {} records arrived: topic '{}' had nothing new for {} ms",
            a.records,
            a.topic,
            a.timeout_ms
        );
    }
    Ok(Outcome {
        mode: "consume",
        records,
        bytes,
        latency,
        request_latency: None,
        commit_latency: None,
        spent,
    })
}
