//! `weir bench produce`: N records from K producers, as fast as they go or at --rate;
//! throughput and send-to-acknowledgement latency. It reads nothing back.
//!
//! With `--transaction-duration-ms` (or `--transactional-id`) each producer sends in
//! transactions and commits one every so many milliseconds, as Kafka's
//! `kafka-producer-perf-test --transaction-duration-ms` does, and the report adds how long
//! each `commit_transaction` took.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::anyhow;
use hdrhistogram::Histogram;
use weir_client::{DeliveryListener, ProducerRecord, RecordMetadata};

use super::broker::Broker;
use super::common::{new_producer, usage, Common};
use super::load::{check_delivered, check_rate, pace, payloads};
use super::report::{histogram, record_latency, Meter, Outcome, Progress};
use crate::tally::Tally;

#[derive(clap::Args)]
pub(super) struct ProduceArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// The topic; created with --partitions if it does not exist.
    #[arg(long)]
    topic: String,
    /// How many records to send in all.
    #[arg(long, value_name = "N")]
    records: u64,
    /// Bytes per record value (random letters, as Kafka's perf test writes).
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    record_size: usize,
    /// Take record values from this file instead, one per line, in turn.
    #[arg(long, value_name = "FILE", conflicts_with = "record_size")]
    payload_file: Option<PathBuf>,
    /// compression.type: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
    /// acks: 0, 1 or all.
    #[arg(long, default_value = "all")]
    acks: String,
    /// batch.size in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 16384)]
    batch_size: usize,
    /// linger.ms.
    #[arg(long, value_name = "MS", default_value_t = 5)]
    linger_ms: u64,
    /// Partitions of the topic when it has to be created.
    #[arg(long, value_name = "P", default_value_t = 1)]
    partitions: i32,
    /// Independent producers (each its own connections), sharing the records.
    #[arg(long, value_name = "K", default_value_t = 1)]
    producers: u32,
    /// Records per second in all; as fast as possible without it.
    #[arg(long, value_name = "R")]
    rate: Option<f64>,
    /// Send in transactions and commit one every MS milliseconds (default 3000 when only
    /// --transactional-id is given, as in Kafka's perf test).
    #[arg(long, value_name = "MS")]
    transaction_duration_ms: Option<u64>,
    /// The transactional.id (sends in transactions); with several producers, producer k
    /// uses ID-k. Default with --transaction-duration-ms: weir-bench-<process id>.
    #[arg(long, value_name = "ID")]
    transactional_id: Option<String>,
}

/// How long a transaction stays open when only --transactional-id asks for transactions:
/// Kafka's ProducerPerformance default.
const DEFAULT_TRANSACTION_DURATION_MS: u64 = 3000;

/// The transactional.id of producer `k` of `producers`, each its own: two producers with
/// one id would fence each other.
fn transactional_id(base: &str, k: u32, producers: u32) -> String {
    if producers == 1 {
        base.to_string()
    } else {
        format!("{base}-{k}")
    }
}

/// What the producers' acknowledgements add up to: counts, the first error, and the
/// send-to-acknowledgement latency of each record (its token is its send time). Times are
/// read from the time stamp counter (`quanta`): two per record, and at millions of records a
/// second the system clock's read shows in the client's profile.
struct Acks {
    clock: quanta::Clock,
    tally: Tally,
    latency: Mutex<Histogram<u64>>,
    /// Acknowledged or failed: the progress bar's count.
    done: Arc<AtomicU64>,
}

impl DeliveryListener for Acks {
    fn on_delivery(&self, sent_at: u64, result: weir_client::Result<RecordMetadata>) {
        if result.is_ok() {
            let waited = self.clock.delta_as_nanos(sent_at, self.clock.raw());
            if let Ok(mut h) = self.latency.lock() {
                record_latency(&mut h, 0, waited);
            }
        }
        self.tally.count(sent_at, &result);
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// A batch's records were all answered at this moment: one clock read, one lock and
    /// one count for all of them.
    fn on_deliveries(
        &self,
        outcomes: &mut dyn Iterator<Item = (u64, weir_client::Result<RecordMetadata>)>,
    ) {
        let now = self.clock.raw();
        let mut acked = 0;
        let mut all = 0;
        let mut latency = self.latency.lock().ok();
        for (sent_at, result) in outcomes {
            all += 1;
            if result.is_ok() {
                acked += 1;
                if let Some(h) = latency.as_mut() {
                    record_latency(h, 0, self.clock.delta_as_nanos(sent_at, now));
                }
            } else {
                self.tally.count(sent_at, &result);
            }
        }
        drop(latency);
        self.tally.count_acked(acked);
        self.done.fetch_add(all, Ordering::Relaxed);
    }
}

pub(super) async fn run(a: ProduceArgs) -> anyhow::Result<Outcome> {
    if a.records == 0 {
        return Err(usage("--records must be at least 1"));
    }
    if a.producers == 0 {
        return Err(usage("--producers must be at least 1"));
    }
    if a.partitions < 1 {
        return Err(usage("--partitions must be at least 1"));
    }
    if let Some(rate) = a.rate {
        check_rate(rate)?;
    }
    let transaction_ms = a.transaction_duration_ms.or(a
        .transactional_id
        .is_some()
        .then_some(DEFAULT_TRANSACTION_DURATION_MS));
    if transaction_ms == Some(0) {
        return Err(usage("--transaction-duration-ms must be at least 1"));
    }
    let given_id = a.common.properties.iter().any(|p| {
        crate::cli::key_value(p, "--property").is_ok_and(|(k, _)| k == "transactional.id")
    });
    if given_id {
        return Err(usage(
            "give the transactional id with --transactional-id, so that each producer gets its own",
        ));
    }
    let values = payloads(a.record_size, a.payload_file.as_deref())?;
    let broker = Broker::resolve(&a.common)?;
    broker.ensure_topic(&a.topic, a.partitions).await?;
    let base_id = a
        .transactional_id
        .clone()
        .unwrap_or_else(|| format!("weir-bench-{}", std::process::id()));
    let producers = (0..a.producers)
        .map(|k| {
            let mut ours = vec![
                ("compression.type", a.compression.clone()),
                ("acks", a.acks.clone()),
                ("batch.size", a.batch_size.to_string()),
                ("linger.ms", a.linger_ms.to_string()),
            ];
            if transaction_ms.is_some() {
                ours.push((
                    "transactional.id",
                    transactional_id(&base_id, k, a.producers),
                ));
            }
            new_producer(&broker.bootstrap, &ours, &a.common)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Readied before the clock starts, as Kafka's perf test does: finding the coordinator
    // and fencing older epochs is not the throughput being measured.
    if transaction_ms.is_some() {
        for p in &producers {
            if let Err(e) = p.init_transactions().await {
                for p in &producers {
                    let _ = p.close(Duration::from_secs(5)).await;
                }
                return Err(anyhow!("initializing transactions: {e}"));
            }
        }
    }

    let progress = Progress::start(a.records);
    let outcomes = Arc::new(Acks {
        clock: quanta::Clock::new(),
        tally: Tally::default(),
        latency: Mutex::new(histogram()),
        done: progress.count(),
    });
    let listener: Arc<dyn DeliveryListener> = outcomes.clone();
    let topic: Arc<str> = a.topic.as_str().into();
    let values = Arc::new(values);
    let meter = Meter::start(&broker);
    let start = meter.start;
    let mut tasks = Vec::new();
    for (k, producer) in producers.into_iter().enumerate() {
        // Records k, k+K, k+2K, ... go through producer k.
        let share =
            a.records / a.producers as u64 + u64::from((k as u64) < a.records % a.producers as u64);
        let rate = a.rate.map(|r| r / a.producers as f64);
        let (listener, topic, values, clock) = (
            listener.clone(),
            topic.clone(),
            values.clone(),
            outcomes.clock.clone(),
        );
        let transaction_nanos = transaction_ms.map(|ms| ms * 1_000_000);
        tasks.push(tokio::spawn(async move {
            let mut commits = histogram();
            // When the open transaction began (a `clock.raw()`); it opens with its first
            // record, so none is ever empty.
            let mut opened: Option<u64> = None;
            let mut sent: anyhow::Result<()> = async {
                for i in 0..share {
                    if let Some(rate) = rate {
                        pace(start, i, rate).await;
                    }
                    let value = values[(i as usize + k) % values.len()].clone();
                    let record = ProducerRecord::new(topic.clone()).value(value);
                    // The token is the send time, so the listener can tell each latency.
                    let sent_at = clock.raw();
                    if transaction_nanos.is_some() && opened.is_none() {
                        producer
                            .begin_transaction()
                            .map_err(|e| anyhow!("beginning a transaction: {e}"))?;
                        opened = Some(sent_at);
                    }
                    producer
                        .send_with_listener(record, &listener, sent_at)
                        .await
                        .map_err(|e| anyhow!("record {i} was not sent: {e}"))?;
                    if let (Some(every), Some(began)) = (transaction_nanos, opened) {
                        if clock.delta_as_nanos(began, clock.raw()) >= every {
                            commit(&producer, &clock, &mut commits).await?;
                            opened = None;
                        }
                    }
                }
                if opened.is_some() {
                    commit(&producer, &clock, &mut commits).await?;
                    opened = None;
                }
                producer.flush().await.map_err(|e| anyhow!("{e}"))
            }
            .await;
            if sent.is_err() && opened.is_some() {
                // What the open transaction sent is aborted, so a read_committed reader
                // of the topic never sees it.
                if let Err(e) = producer.abort_transaction().await {
                    sent = sent.map_err(|s| anyhow!("{s}; aborting the open transaction: {e}"));
                }
            }
            if let Err(e) = sent {
                let _ = producer.close(Duration::from_secs(5)).await;
                return Err(e);
            }
            let requests = producer.request_latency();
            producer
                .close(Duration::from_secs(30))
                .await
                .map_err(|e| anyhow!("{e}"))?;
            Ok((requests, commits))
        }));
    }
    let mut failure = None;
    let mut request_latency = histogram();
    let mut commit_latency = histogram();
    for t in tasks {
        match t.await {
            Ok(Ok((requests, commits))) => {
                if let Err(e) = request_latency
                    .add(&requests)
                    .and_then(|()| commit_latency.add(&commits))
                {
                    failure = failure.or(Some(anyhow!("adding up latencies: {e}")));
                }
            }
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(anyhow!("a producer task failed: {e}"))),
        }
    }
    let spent = meter.stop(&broker);
    progress.finish().await;
    if let Some(e) = failure {
        return Err(e);
    }
    check_delivered(&outcomes.tally, a.records)?;
    let acked = outcomes.tally.acked();
    let bytes: u64 = (0..acked)
        .map(|i| values[i as usize % values.len()].len() as u64)
        .sum::<u64>();
    let latency = std::mem::replace(
        &mut *outcomes.latency.lock().unwrap_or_else(|p| p.into_inner()),
        histogram(),
    );
    Ok(Outcome {
        mode: "produce",
        records: acked,
        bytes,
        latency,
        request_latency: (!request_latency.is_empty()).then_some(request_latency),
        commit_latency: transaction_ms.is_some().then_some(commit_latency),
        spent,
    })
}

/// Commits the open transaction and records how long `commit_transaction` took: the flush
/// of what the producer still holds, AddPartitionsToTxn for partitions not yet added, and
/// EndTxn.
async fn commit(
    producer: &weir_client::Producer,
    clock: &quanta::Clock,
    took: &mut Histogram<u64>,
) -> anyhow::Result<()> {
    let began = clock.raw();
    producer
        .commit_transaction()
        .await
        .map_err(|e| anyhow!("committing a transaction: {e}"))?;
    record_latency(took, 0, clock.delta_as_nanos(began, clock.raw()));
    Ok(())
}
