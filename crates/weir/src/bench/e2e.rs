//! `weir bench e2e`: produce at a fixed rate while consuming the same topic; latency from
//! send to receive, carried in the first 8 bytes of each value (see mod.rs's front doc).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use weir_client::{DeliveryListener, ProducerRecord};

use super::broker::Broker;
use super::common::{assigned_consumer, new_producer, usage, Common};
use super::load::{check_delivered, check_rate, pace};
use super::report::{histogram, record_latency, Meter, Outcome, Progress};
use crate::tally::Tally;

#[derive(clap::Args)]
pub(super) struct E2eArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// The topic; created with --partitions if it does not exist.
    #[arg(long)]
    topic: String,
    /// Records per second.
    #[arg(long, value_name = "R")]
    rate: f64,
    /// How long to produce.
    #[arg(long, value_name = "D")]
    seconds: f64,
    /// Bytes per record value (at least 8: the send time).
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    record_size: usize,
    /// compression.type.
    #[arg(long, default_value = "none")]
    compression: String,
    /// acks: 0, 1 or all.
    #[arg(long, default_value = "1")]
    acks: String,
    /// linger.ms (0: each record leaves at once, as a latency test wants).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    linger_ms: u64,
    /// Partitions of the topic when it has to be created.
    #[arg(long, value_name = "P", default_value_t = 1)]
    partitions: i32,
}

pub(super) async fn run(a: E2eArgs) -> anyhow::Result<Outcome> {
    check_rate(a.rate)?;
    if !(a.seconds > 0.0 && a.seconds.is_finite()) {
        return Err(usage("--seconds must be a positive number"));
    }
    if a.record_size < 8 {
        return Err(usage(
            "--record-size must be at least 8 (the send time travels in the value)",
        ));
    }
    let total = (a.rate * a.seconds).round().max(1.0) as u64;
    let broker = Broker::resolve(&a.common)?;
    broker.ensure_topic(&a.topic, a.partitions).await?;
    let producer = new_producer(
        &broker.bootstrap,
        &[
            ("compression.type", a.compression.clone()),
            ("acks", a.acks.clone()),
            ("linger.ms", a.linger_ms.to_string()),
        ],
        &a.common,
    )?;
    let (mut consumer, partitions) = assigned_consumer(
        &broker.bootstrap,
        &a.topic,
        // Every record as soon as it is there.
        &[("fetch.min.bytes", "1".into())],
        &a.common,
    )
    .await?;
    // Only what this run sends: start at the current end of every partition.
    let ends = consumer
        .end_offsets(&partitions)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    for (tp, end) in &ends {
        consumer.seek(tp, *end).map_err(|e| anyhow!("{e}"))?;
    }
    // Positions are resolved before the clock starts.
    for tp in &partitions {
        consumer.position(tp).await.map_err(|e| anyhow!("{e}"))?;
    }

    let base = Instant::now();
    let progress = Progress::start(total);
    let received = progress.count();
    let reader = tokio::spawn(async move {
        let mut latency = histogram();
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut last_data = Instant::now();
        while n < total {
            let batch = consumer.poll(Duration::from_millis(100)).await?;
            let now = base.elapsed().as_nanos() as u64;
            if batch.is_empty() {
                if last_data.elapsed() > Duration::from_secs(10) {
                    break;
                }
                continue;
            }
            last_data = Instant::now();
            for r in &batch {
                // Records too short to carry a send time are not ours.
                let Some(v) = r.value.as_ref() else {
                    continue;
                };
                let Some(sent) = v.first_chunk::<8>() else {
                    continue;
                };
                let sent = u64::from_be_bytes(*sent);
                record_latency(&mut latency, sent, now);
                bytes += v.len() as u64;
                n += 1;
            }
            received.store(n, Ordering::Relaxed);
        }
        let _ = consumer.close_with_timeout(Duration::from_secs(5)).await;
        Ok::<_, weir_client::ClientError>((n, bytes, latency))
    });

    let tally = Arc::new(Tally::default());
    let listener: Arc<dyn DeliveryListener> = tally.clone();
    let filler: Vec<u8> = (0..a.record_size - 8)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let meter = Meter::start(&broker);
    let topic: Arc<str> = a.topic.as_str().into();
    for i in 0..total {
        pace(meter.start, i, a.rate).await;
        let mut value = Vec::with_capacity(a.record_size);
        value.extend_from_slice(&(base.elapsed().as_nanos() as u64).to_be_bytes());
        value.extend_from_slice(&filler);
        let record = ProducerRecord::new(topic.clone()).value(value);
        producer
            .send_with_listener(record, &listener, i)
            .await
            .map_err(|e| anyhow!("record {i} was not sent: {e}"))?;
    }
    producer.flush().await.map_err(|e| anyhow!("{e}"))?;
    let _ = producer.close(Duration::from_secs(30)).await;
    let (n, bytes, latency) = reader
        .await
        .map_err(|e| anyhow!("the consumer task failed: {e}"))?
        .map_err(|e| anyhow!("consuming: {e}"))?;
    let spent = meter.stop(&broker);
    progress.finish().await;
    check_delivered(&tally, total)?;
    if n < total {
        bail!("{total} records were acknowledged but only {n} arrived at the consumer");
    }
    Ok(Outcome {
        mode: "e2e",
        records: n,
        bytes,
        latency,
        request_latency: None,
        commit_latency: None,
        spent,
    })
}
