//! `weir produce`: one record per line of stdin (Kafka's console producer), split into key
//! and value at the first `--key-separator` when given. It exits 0 only once every record
//! is acknowledged; otherwise it says how many failed and why, and exits 1.
//!
//! With `--property transactional.id=ID` what it reads is committed as one transaction, or
//! as one every `--transaction-size N` lines; on any failure the open transaction is
//! aborted (read_committed consumers never see it) and it exits 1, saying how many records
//! earlier transactions committed.

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
    /// With transactional.id: commit every N lines instead of all of stdin at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    transaction_size: Option<u64>,
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
    let transactional = producer.config().transactional_id.is_some();
    if args.transaction_size.is_some() && !transactional {
        return usage("--transaction-size needs --property transactional.id=ID");
    }
    if transactional {
        if let Err(e) = producer.init_transactions().await {
            eprintln!("weir produce: initializing transactions: {e}");
            let _ = producer.close(Duration::ZERO).await;
            return ExitCode::FAILURE;
        }
    }
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
    // Transactional: records in the open transaction, and those earlier ones committed.
    let mut in_transaction = 0u64;
    let mut committed = 0u64;
    let mut aborted = false;
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
        // A transaction opens with its first record, so that none is ever empty.
        if transactional && in_transaction == 0 {
            if let Err(e) = producer.begin_transaction() {
                stopped = Some(format!("beginning a transaction: {e}"));
                break;
            }
        }
        let sent = producer.send_with_listener(record, &listener, number).await;
        if let Err(e) = sent {
            stopped = Some(format!("record {number} was not sent: {e}"));
            break;
        }
        if transactional {
            in_transaction += 1;
            if Some(in_transaction) == args.transaction_size {
                if let Err(e) = producer.commit_transaction().await {
                    stopped = Some(format!(
                        "committing lines {}..={number}: {e}",
                        number - in_transaction + 1
                    ));
                    break;
                }
                committed += in_transaction;
                in_transaction = 0;
            }
        }
    }
    if transactional && in_transaction > 0 {
        let ended = if stopped.is_none() {
            producer.commit_transaction().await.map_err(|e| {
                format!(
                    "committing lines {}..={number}: {e}",
                    number - in_transaction + 1
                )
            })
        } else {
            Err(String::new())
        };
        match ended {
            Ok(()) => committed += in_transaction,
            Err(why) => {
                if stopped.is_none() {
                    stopped = Some(why);
                }
                // What the transaction sent is aborted: read_committed readers never see it.
                match producer.abort_transaction().await {
                    Ok(()) => aborted = true,
                    Err(e) => eprintln!("weir produce: aborting the open transaction: {e}"),
                }
            }
        }
    }
    // Whatever was sent gets its chance to be acknowledged before we report.
    let _ = producer.flush().await;
    let close_wait = producer.config().delivery_timeout + Duration::from_secs(1);
    let _ = producer.close(close_wait).await;
    if transactional {
        return match stopped {
            None => ExitCode::SUCCESS,
            Some(why) => {
                let open = if aborted {
                    "; the open transaction was aborted"
                } else {
                    ""
                };
                eprintln!("weir produce: {why}{open} ({committed} records committed before it)");
                ExitCode::FAILURE
            }
        };
    }
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
