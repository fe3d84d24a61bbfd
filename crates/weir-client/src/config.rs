//! Client settings under Kafka's names with Kafka's defaults (`ProducerConfig`,
//! `ConsumerConfig`), parsed from key=value pairs and checked: an unknown key or a bad value
//! is an error naming the key, and conflicting idempotence settings follow Kafka's rule
//! (an error if idempotence was asked for explicitly, quietly off if it was only the
//! default).

use std::time::Duration;

use weir_record::{Compression, CompressionConfig};

use crate::cluster::ClusterConfig;
use crate::error::{ClientError, Result};
use crate::props::{bad, Props};

impl Props {
    /// The settings every client shares: `bootstrap.servers`, `client.id`, the timeouts,
    /// `retry.backoff.ms`, and how to reach a secured broker.
    pub(crate) fn cluster(&mut self, default_client_id: &str) -> Result<ClusterConfig> {
        let servers = self.string("bootstrap.servers", "");
        let bootstrap_servers: Vec<String> = servers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if bootstrap_servers.is_empty() {
            return Err(ClientError::Config(
                "bootstrap.servers must name at least one HOST:PORT".into(),
            ));
        }
        Ok(ClusterConfig {
            bootstrap_servers,
            client_id: self.string("client.id", default_client_id),
            request_timeout: Duration::from_millis(self.int("request.timeout.ms", 30_000u64, 1)?),
            connect_timeout: Duration::from_millis(self.int(
                "socket.connection.setup.timeout.ms",
                10_000u64,
                1,
            )?),
            retry_backoff: Duration::from_millis(self.int("retry.backoff.ms", 100u64, 0)?),
            security: self.security()?,
        })
    }
}

/// `acks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    None,
    Leader,
    All,
}

impl Acks {
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// The producer's settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub cluster: ClusterConfig,
    pub acks: Acks,
    pub batch_size: usize,
    pub linger: Duration,
    pub buffer_memory: usize,
    pub max_block: Duration,
    pub compression: CompressionConfig,
    pub max_in_flight: usize,
    pub retries: u32,
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    pub delivery_timeout: Duration,
    pub max_request_size: usize,
    pub enable_idempotence: bool,
    pub partitioner_ignore_keys: bool,
    pub partitioner_adaptive: bool,
    pub metadata_max_age: Duration,
    pub allow_auto_create_topics: bool,
    /// `transactional.id`: set, the producer is transactional (`init_transactions` first).
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`: how long the coordinator lets a transaction stay open
    /// before aborting it.
    pub transaction_timeout: Duration,
}

/// Java-client keys with no meaning for this client.
const PRODUCER_IGNORED: &[&str] = &[
    "key.serializer",
    "value.serializer",
    "partitioner.class",
    "interceptor.classes",
    "metric.reporters",
];

impl ProducerConfig {
    /// Parses Kafka's producer settings.
    pub fn from_properties<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self> {
        let mut p = Props::new(pairs);
        let cluster = p.cluster("weir-producer")?;
        let acks = match p.string("acks", "all").trim() {
            "all" | "-1" => Acks::All,
            "1" => Acks::Leader,
            "0" => Acks::None,
            other => return Err(bad("acks", other, "must be all, -1, 0 or 1")),
        };
        let codec_name = p.string("compression.type", "none");
        let codec: Compression = codec_name
            .parse()
            .map_err(|e: String| bad("compression.type", &codec_name, &e))?;
        let level_key = match codec {
            Compression::Gzip => Some("compression.gzip.level"),
            Compression::Lz4 => Some("compression.lz4.level"),
            Compression::Zstd => Some("compression.zstd.level"),
            _ => None,
        };
        let mut compression = CompressionConfig::new(codec);
        for key in [
            "compression.gzip.level",
            "compression.lz4.level",
            "compression.zstd.level",
        ] {
            let value = p.string(key, "");
            if value.is_empty() || Some(key) != level_key {
                continue;
            }
            let level: i32 = value
                .trim()
                .parse()
                .map_err(|_| bad(key, &value, "not a number"))?;
            compression =
                CompressionConfig::with_level(codec, level).map_err(ClientError::Config)?;
        }
        let idempotence_set = p.is_set("enable.idempotence");
        let mut cfg = ProducerConfig {
            cluster,
            acks,
            batch_size: p.int("batch.size", 16_384usize, 0)?,
            linger: Duration::from_millis(p.int("linger.ms", 5u64, 0)?),
            buffer_memory: p.int("buffer.memory", 33_554_432usize, 1024)?,
            max_block: Duration::from_millis(p.int("max.block.ms", 60_000u64, 0)?),
            compression,
            max_in_flight: p.int("max.in.flight.requests.per.connection", 5usize, 1)?,
            retries: p.int("retries", i32::MAX as u32, 0)?,
            retry_backoff: Duration::from_millis(p.int("retry.backoff.ms", 100u64, 0)?),
            retry_backoff_max: Duration::from_millis(p.int("retry.backoff.max.ms", 1000u64, 0)?),
            delivery_timeout: Duration::from_millis(p.int("delivery.timeout.ms", 120_000u64, 1)?),
            max_request_size: p.int("max.request.size", 1_048_576usize, 1)?,
            enable_idempotence: p.bool("enable.idempotence", true)?,
            partitioner_ignore_keys: p.bool("partitioner.ignore.keys", false)?,
            partitioner_adaptive: p.bool("partitioner.adaptive.partitioning.enable", true)?,
            metadata_max_age: Duration::from_millis(p.int("metadata.max.age.ms", 300_000u64, 0)?),
            allow_auto_create_topics: p.bool("allow.auto.create.topics", true)?,
            transactional_id: Some(p.string("transactional.id", ""))
                .filter(|t| !t.trim().is_empty()),
            transaction_timeout: Duration::from_millis(p.int(
                "transaction.timeout.ms",
                60_000u64,
                1,
            )?),
        };
        if cfg.transaction_timeout.as_millis() > i32::MAX as u128 {
            return Err(bad(
                "transaction.timeout.ms",
                &cfg.transaction_timeout.as_millis().to_string(),
                "must fit in 32 bits",
            ));
        }
        p.string("partitioner.availability.timeout.ms", "0");
        p.finish(PRODUCER_IGNORED)?;
        // Kafka's idempotence rule (ProducerConfig.postProcessAndValidateIdempotenceConfigs).
        let conflicts: Vec<&str> = [
            (cfg.acks != Acks::All, "acks must be all"),
            (cfg.retries == 0, "retries must be above 0"),
            (
                cfg.max_in_flight > 5,
                "max.in.flight.requests.per.connection must be at most 5",
            ),
        ]
        .iter()
        .filter(|(c, _)| *c)
        .map(|(_, m)| *m)
        .collect();
        if cfg.transactional_id.is_some() {
            // A transaction is idempotent: its sequences are how the broker keeps it whole.
            if idempotence_set && !cfg.enable_idempotence {
                return Err(ClientError::Config(
                    "transactional.id needs enable.idempotence=true".into(),
                ));
            }
            if !conflicts.is_empty() {
                return Err(ClientError::Config(format!(
                    "transactional.id needs idempotence, and so: {}",
                    conflicts.join(", ")
                )));
            }
        }
        if cfg.enable_idempotence && !conflicts.is_empty() {
            if idempotence_set {
                return Err(ClientError::Config(format!(
                    "enable.idempotence=true needs: {}",
                    conflicts.join(", ")
                )));
            }
            cfg.enable_idempotence = false;
        }
        let needed = cfg.linger + cfg.cluster.request_timeout;
        if cfg.delivery_timeout < needed {
            return Err(ClientError::Config(format!(
                "delivery.timeout.ms must be at least linger.ms + request.timeout.ms ({} ms)",
                needed.as_millis()
            )));
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<ProducerConfig> {
        let mut all = vec![("bootstrap.servers", "localhost:9092")];
        all.extend_from_slice(pairs);
        ProducerConfig::from_properties(all)
    }

    #[test]
    fn kafka_defaults() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.acks, Acks::All);
        assert_eq!(c.batch_size, 16_384);
        assert_eq!(c.buffer_memory, 32 << 20);
        assert_eq!(c.max_block, Duration::from_secs(60));
        assert_eq!(c.delivery_timeout, Duration::from_secs(120));
        assert_eq!(c.max_in_flight, 5);
        assert!(c.enable_idempotence);
        assert_eq!(c.compression.codec, Compression::None);
    }

    #[test]
    fn idempotence_conflicts_follow_kafka() {
        // Only the default: idempotence quietly goes off.
        assert!(!cfg(&[("acks", "1")]).unwrap().enable_idempotence);
        // Asked for explicitly: an error.
        let e = cfg(&[("acks", "1"), ("enable.idempotence", "true")]).unwrap_err();
        assert!(e.to_string().contains("acks must be all"), "{e}");
    }

    #[test]
    fn a_transactional_id_needs_idempotence() {
        let c = cfg(&[("transactional.id", "etl")]).unwrap();
        assert_eq!(c.transactional_id.as_deref(), Some("etl"));
        assert!(c.enable_idempotence);
        assert_eq!(c.transaction_timeout, Duration::from_secs(60));
        for bad in [
            &[("transactional.id", "etl"), ("acks", "1")][..],
            &[("transactional.id", "etl"), ("enable.idempotence", "false")],
        ] {
            let e = cfg(bad).unwrap_err().to_string();
            assert!(e.contains("transactional.id needs"), "{e}");
        }
        assert!(cfg(&[("transactional.id", "")])
            .unwrap()
            .transactional_id
            .is_none());
    }

    #[test]
    fn mistakes_are_named() {
        assert!(cfg(&[("batch.sise", "1")])
            .unwrap_err()
            .to_string()
            .contains("batch.sise"));
        assert!(cfg(&[("acks", "2")])
            .unwrap_err()
            .to_string()
            .contains("acks=2"));
        assert!(cfg(&[("compression.type", "brotli")])
            .unwrap_err()
            .to_string()
            .contains("brotli"));
        assert!(cfg(&[
            ("compression.type", "zstd"),
            ("compression.zstd.level", "99")
        ])
        .is_err());
        assert!(cfg(&[("delivery.timeout.ms", "100")]).is_err());
        assert!(
            ProducerConfig::from_properties([("acks", "1")]).is_err(),
            "bootstrap.servers is required"
        );
        assert!(cfg(&[(
            "key.serializer",
            "org.apache.kafka.common.serialization.StringSerializer"
        )])
        .is_ok());
    }
}
