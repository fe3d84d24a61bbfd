//! `weir bench consume`: N records read from the beginning of every partition; throughput,
//! and how long each poll waited. Only on a broker of our own does it write the records first.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use weir_client::{Consumer, DeliveryListener, Producer, ProducerRecord};

use super::broker::{broker, broker_cpu_since, ensure_topic, OwnBroker};
use super::common::{settings, usage, Common};
use super::cpu::own_cpu_seconds;
use super::load::{payloads, Tally};
use super::report::{histogram, progress, Outcome};

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
async fn fill(bootstrap: &str, topic: &str, n: u64, size: usize) -> anyhow::Result<()> {
    ensure_topic(bootstrap, topic, 1).await?;
    eprintln!("weir bench: writing {n} records of {size} bytes to read back");
    let values = payloads(size, None)?;
    let producer = Producer::from_properties([
        ("bootstrap.servers", bootstrap),
        ("acks", "1"),
        ("linger.ms", "5"),
    ])
    .map_err(|e| anyhow!("{e}"))?;
    let tally = Arc::new(Tally::default());
    let listener: Arc<dyn DeliveryListener> = tally.clone();
    let topic: Arc<str> = topic.into();
    for i in 0..n {
        let mut record = ProducerRecord::new(topic.clone());
        record.value = Some(values[i as usize % values.len()].clone());
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
    tally.check(n).context("filling the topic")
}

pub(super) async fn run(a: ConsumeArgs) -> anyhow::Result<()> {
    if a.records == 0 {
        return Err(usage("--records must be at least 1"));
    }
    let (own, bootstrap) = broker(&a.common)?;
    if own.is_some() {
        fill(&bootstrap, &a.topic, a.records, a.record_size).await?;
    }
    let props = settings(
        &bootstrap,
        &[
            ("client.id", "weir-bench".into()),
            ("allow.auto.create.topics", "false".into()),
        ],
        &a.common,
    )?;
    let mut consumer = Consumer::from_properties(props).map_err(|e| usage(e.to_string()))?;
    let partitions = consumer
        .partitions_for(&a.topic)
        .await
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("reading topic '{}'", a.topic))?;
    consumer
        .assign(partitions.clone())
        .map_err(|e| anyhow!("{e}"))?;
    consumer
        .seek_to_beginning(&partitions)
        .map_err(|e| anyhow!("{e}"))?;

    let done = Arc::new(AtomicU64::new(0));
    let bar = progress(a.records, done.clone());
    let mut latency = histogram();
    let idle_limit = Duration::from_millis(a.timeout_ms);
    let cpu0 = own_cpu_seconds();
    let broker_cpu0 = own.as_ref().and_then(OwnBroker::cpu_seconds);
    let start = Instant::now();
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
    let seconds = start.elapsed().as_secs_f64();
    let cpu = own_cpu_seconds() - cpu0;
    let broker_cpu = broker_cpu_since(&own, broker_cpu0);
    done.store(u64::MAX, Ordering::Relaxed);
    let _ = bar.await;
    let _ = consumer.close_with_timeout(Duration::from_secs(5)).await;
    if records < a.records {
        bail!(
            "only {records} of {} records arrived: topic '{}' had nothing new for {} ms",
            a.records,
            a.topic,
            a.timeout_ms
        );
    }
    let outcome = Outcome {
        mode: "consume",
        records,
        bytes,
        seconds,
        latency,
        request_latency: None,
        cpu_seconds: cpu,
        broker_cpu_seconds: broker_cpu,
    };
    drop(own);
    outcome.report(&a.common)
}
