//! What every `weir bench` mode shares: the common flags, the usage error (exit code 2)
//! that a mistake in any flag becomes, and the clients made from the flags. It measures
//! nothing and sends no records.

use std::path::PathBuf;

use anyhow::{anyhow, Context};
use weir_client::{Consumer, Producer, TopicPartition};

/// What every mode shares.
#[derive(clap::Args, Clone)]
pub(super) struct Common {
    /// A Kafka-compatible broker, HOST:PORT. Without it, a `weir serve` of our own is started
    /// on a temporary data directory and stopped at the end.
    #[arg(long, value_name = "HOST:PORT")]
    pub(super) bootstrap: Option<String>,
    /// Any Kafka client setting for the producer and consumer, e.g. --property
    /// max.in.flight.requests.per.connection=1 (repeatable; wins over the flags).
    #[arg(long = "property", value_name = "KEY=VALUE")]
    pub(super) properties: Vec<String>,
    /// Print the result as one JSON object on the last line of stdout.
    #[arg(long)]
    pub(super) json: bool,
    /// Draw the latency distribution as an SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub(super) plot: Option<PathBuf>,
}

impl Common {
    /// What can be told wrong before a run starts: --plot must name an SVG file.
    pub(super) fn check(&self) -> anyhow::Result<()> {
        match &self.plot {
            Some(p) if !p.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg")) => {
                Err(usage("--plot draws SVG: give a file name ending in .svg"))
            }
            _ => Ok(()),
        }
    }
}

/// A mistake in the flags (exit code 2).
#[derive(Debug)]
pub(super) struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

pub(super) fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(msg.into()))
}

/// Client settings: the bench's client id, ours, then the user's --property pairs (later
/// ones win).
fn settings(
    bootstrap: &str,
    ours: &[(&str, String)],
    common: &Common,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = vec![
        ("bootstrap.servers".to_string(), bootstrap.to_string()),
        ("client.id".to_string(), "weir-bench".to_string()),
    ];
    out.extend(ours.iter().map(|(k, v)| (k.to_string(), v.clone())));
    for p in &common.properties {
        let (k, v) = crate::cli::key_value(p, "--property").map_err(usage)?;
        out.retain(|(key, _)| *key != k);
        out.push((k, v));
    }
    Ok(out)
}

/// A producer with `ours` and the user's settings; a setting the client refuses is a
/// mistake in the flags.
pub(super) fn new_producer(
    bootstrap: &str,
    ours: &[(&str, String)],
    common: &Common,
) -> anyhow::Result<Producer> {
    Producer::from_properties(settings(bootstrap, ours, common)?).map_err(|e| usage(e.to_string()))
}

/// A consumer of every partition of `topic`, assigned by hand (no group, no topic created
/// by asking for it), with `ours` and the user's settings; and those partitions.
pub(super) async fn assigned_consumer(
    bootstrap: &str,
    topic: &str,
    ours: &[(&str, String)],
    common: &Common,
) -> anyhow::Result<(Consumer, Vec<TopicPartition>)> {
    let mut all = vec![("allow.auto.create.topics", "false".to_string())];
    all.extend_from_slice(ours);
    let mut consumer = Consumer::from_properties(settings(bootstrap, &all, common)?)
        .map_err(|e| usage(e.to_string()))?;
    let partitions = consumer
        .partitions_for(topic)
        .await
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("reading topic '{topic}'"))?;
    consumer
        .assign(partitions.clone())
        .map_err(|e| anyhow!("{e}"))?;
    Ok((consumer, partitions))
}
