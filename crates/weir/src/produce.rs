//! `weir produce`: one record per line of stdin (Kafka's console producer), split into key
//! and value at the first `--key-separator` when given. It exits 0 only once every record
//! is acknowledged; otherwise it says how many failed and why, and exits 1.

use std::io::BufRead;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use weir_client::{DeliveryListener, Producer, ProducerRecord};

use crate::cli::ClientArgs;
use crate::tally::Tally;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    client: ClientArgs,
    /// The topic to write to.
    #[arg(long)]
    topic: String,
    /// Split each line into key and value at the first SEP (lines without it are an
    /// error); without it every line is a value with a null key.
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// none, gzip, snappy, lz4 or zstd (compression.type).
    #[arg(long, value_name = "CODEC")]
    compression: Option<String>,
    /// 0, 1 or all (acks).
    #[arg(long, value_name = "ACKS")]
    acks: Option<String>,
    /// Write every record to this partition instead of letting the partitioner choose.
    #[arg(long)]
    partition: Option<i32>,
}

pub fn run(args: Args) -> ExitCode {
    let mut settings = match args.client.settings() {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    // The dedicated flags win over the same key given with --property.
    for (key, value) in [
        ("compression.type", &args.compression),
        ("acks", &args.acks),
    ] {
        if let Some(v) = value {
            settings.retain(|(k, _)| k != key);
            settings.push((key.to_string(), v.clone()));
        }
    }
    if args.key_separator.as_deref() == Some("") {
        return usage("--key-separator must not be empty");
    }
    // The producer's I/O runs on its own worker thread while this thread reads stdin and
    // fills batches, as librdkafka keeps its broker I/O on threads of its own.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir produce: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(produce(args, settings))
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("weir produce: {msg}");
    ExitCode::from(2)
}

async fn produce(args: Args, settings: Vec<(String, String)>) -> ExitCode {
    let producer = match Producer::from_properties(settings) {
        Ok(p) => p,
        Err(e) => return usage(&e.to_string()),
    };
    let outcome = Arc::new(Tally::default());
    let listener: Arc<dyn DeliveryListener> = outcome.clone();
    let sep = args.key_separator.as_deref().map(str::as_bytes);
    // Plain blocking reads: this future runs on the calling thread (block_on), not on the
    // runtime's worker, so waiting for input never holds up the producer's I/O.
    let mut stdin = std::io::BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let mut line = Vec::new();
    let topic: std::sync::Arc<str> = args.topic.as_str().into();
    let mut number = 0u64;
    let mut stopped: Option<String> = None;
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                stopped = Some(format!("reading stdin: {e}"));
                break;
            }
        }
        number += 1;
        // Like readLine: the line ends at \n, \r\n being one line end too.
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        }
        let mut record = ProducerRecord::new(topic.clone());
        match sep {
            Some(sep) => match find(&line, sep) {
                Some(at) => {
                    record.key = Some(Bytes::copy_from_slice(&line[..at]));
                    record.value = Some(Bytes::copy_from_slice(&line[at + sep.len()..]));
                }
                None => {
                    stopped = Some(format!(
                        "line {number} has no key separator '{}'",
                        args.key_separator.as_deref().unwrap_or_default()
                    ));
                    break;
                }
            },
            None => record.value = Some(Bytes::copy_from_slice(&line)),
        }
        record.partition = args.partition;
        let sent = producer.send_with_listener(record, &listener, number).await;
        if let Err(e) = sent {
            stopped = Some(format!("record {number} was not sent: {e}"));
            break;
        }
    }
    // Whatever was sent gets its chance to be acknowledged before we report.
    let _ = producer.flush().await;
    let close_wait = producer.config().delivery_timeout + Duration::from_secs(1);
    let _ = producer.close(close_wait).await;
    let (acked, failed) = (outcome.acked(), outcome.failed());
    let first = outcome
        .first_error()
        .map(|(line, e)| format!("line {line}: {e}"));
    if let Some(why) = stopped {
        eprintln!("weir produce: {why} ({acked} records acknowledged before it)");
        return ExitCode::FAILURE;
    }
    if failed > 0 {
        eprintln!(
            "weir produce: {failed} of {} records failed (first: {})",
            acked + failed,
            first.unwrap_or_default()
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::find;

    #[test]
    fn the_first_separator_splits() {
        assert_eq!(find(b"k:v:w", b":"), Some(1));
        assert_eq!(find(b"k::v", b"::"), Some(1));
        assert_eq!(find(b"kv", b":"), None);
        assert_eq!(find(b"", b":"), None);
    }
}
