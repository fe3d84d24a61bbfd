//! `weir consume`: read records from a topic and print one JSON object per record on
//! stdout (Weir's kafka-console-consumer). Without `--group` it reads partitions of its own
//! choosing; with one it joins the group and commits what it printed. Stops after
//! `--max-messages`, after `--timeout-ms` without new data, or on Ctrl-C / SIGTERM.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};
use weir_client::{Consumer, ConsumerRecord, TopicPartition};

use crate::cli::ClientArgs;
use crate::json;

#[derive(clap::Args)]
pub struct Args {
    /// `--bootstrap` and `--property` (any Kafka consumer setting, e.g.
    /// --property isolation.level=read_committed; wins over the flags below).
    #[command(flatten)]
    client: ClientArgs,
    /// The topic to read.
    #[arg(long)]
    topic: String,
    /// Consume as a member of this consumer group (partitions assigned by the group,
    /// offsets committed to it).
    #[arg(long)]
    group: Option<String>,
    /// Start at the beginning (with --group: where the group has no committed offset).
    #[arg(long)]
    from_beginning: bool,
    /// Read only this partition (not with --group).
    #[arg(long)]
    partition: Option<i32>,
    /// Start at this offset (needs --partition).
    #[arg(long)]
    offset: Option<i64>,
    /// Stop after printing this many records.
    #[arg(long, value_name = "N")]
    max_messages: Option<u64>,
    /// Stop after this long without a new record.
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
}

/// How long one poll waits at most, so that a stop request is seen promptly.
const POLL_SLICE: Duration = Duration::from_millis(200);

/// With `--timeout-ms`, how long a group member waits at least for its first assignment.
const JOIN_WAIT: Duration = Duration::from_secs(30);

/// Bound on the final commit and LeaveGroup when stopping.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

fn init_logging() {
    // Records go to stdout; the client's warnings (and anything asked for with RUST_LOG)
    // go to stderr.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Checks the flags that only make sense together; returns the consumer's settings.
fn settings(args: &Args) -> Result<Vec<(String, String)>, String> {
    if args.offset.is_some() && args.partition.is_none() {
        return Err("--offset needs --partition (an offset belongs to one partition)".into());
    }
    if args.offset.is_some_and(|o| o < 0) {
        return Err("--offset must be 0 or more".into());
    }
    if args.partition.is_some_and(|p| p < 0) {
        return Err("--partition must be 0 or more".into());
    }
    if args.group.is_some() && (args.partition.is_some() || args.offset.is_some()) {
        return Err(
            "--partition and --offset cannot be used with --group (the group assigns \
             partitions and starts them at its committed offsets)"
                .into(),
        );
    }
    if args.group.as_deref().is_some_and(|g| g.trim().is_empty()) {
        return Err("--group must not be empty".into());
    }
    if args.topic.trim().is_empty() {
        return Err("--topic must not be empty".into());
    }
    if args.max_messages == Some(0) {
        return Err("--max-messages must be at least 1".into());
    }
    let mut props: Vec<(String, String)> = vec![
        ("client.id".into(), "weir-consume".into()),
        // A typo in --topic should not create a topic.
        ("allow.auto.create.topics".into(), "false".into()),
        // An unreachable broker is reported in seconds, not a minute.
        ("default.api.timeout.ms".into(), "5000".into()),
    ];
    if let Some(g) = &args.group {
        props.push(("group.id".into(), g.clone()));
        if args.from_beginning {
            props.push(("auto.offset.reset".into(), "earliest".into()));
        }
    }
    // Later pairs win: the user's --property over the defaults above.
    props.extend(args.client.settings()?);
    Ok(props)
}

pub fn run(args: Args) -> ExitCode {
    init_logging();
    let props = match settings(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("weir consume: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weir-consume")
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir consume: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(consume(args, props)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir consume: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// One record as a JSON object: key, value and header values as strings when they are
/// UTF-8, `null` when null, `{"base64": ...}` otherwise.
fn record_json(r: &ConsumerRecord) -> Value {
    json!({
        "topic": &*r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": json::bytes(r.key.as_deref()),
        "value": json::bytes(r.value.as_deref()),
        "headers": r
            .headers
            .iter()
            .map(|(k, v)| json!([k, json::bytes(v.as_deref())]))
            .collect::<Vec<_>>(),
    })
}

/// Sets a flag on Ctrl-C or SIGTERM.
fn stop_on_signal(stop: Arc<AtomicBool>) {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        stop.store(true, Ordering::SeqCst);
    });
}

/// Sets a flag when stdout's reader goes away (`weir consume | head -n 5`), so that an idle
/// consumer stops at once rather than at its next write. Nothing to watch when stdout is a
/// file or a terminal.
#[cfg(unix)]
fn stop_when_stdout_closes(stop: Arc<AtomicBool>) {
    use std::os::fd::AsFd;
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;
    let Ok(owned) = std::io::stdout().as_fd().try_clone_to_owned() else {
        return;
    };
    // SAFETY: `owned` is an `OwnedFd` moved into the `AsyncFd`: it stays open, and refers to
    // the same file description, for as long as the `AsyncFd` lives.
    let Ok(fd) = (unsafe { AsyncFd::register_with_interest(owned, Interest::ERROR) }) else {
        return;
    };
    tokio::spawn(async move {
        while let Ok(mut ready) = fd.ready(Interest::ERROR).await {
            if ready.ready().is_error() {
                stop.store(true, Ordering::SeqCst);
                return;
            }
            ready.clear_ready();
        }
    });
}

#[cfg(not(unix))]
fn stop_when_stdout_closes(_stop: Arc<AtomicBool>) {}

async fn consume(args: Args, props: Vec<(String, String)>) -> anyhow::Result<()> {
    let mut consumer = Consumer::from_properties(props).map_err(|e| anyhow!("{e}"))?;
    let topic = args.topic.as_str();
    let partitions = consumer
        .partitions_for(topic)
        .await
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("cannot read topic '{topic}' from {}", args.client.bootstrap))?;
    let grouped = args.group.is_some();
    if grouped {
        consumer
            .subscribe([topic], None)
            .map_err(|e| anyhow!("{e}"))?;
    } else {
        let chosen: Vec<TopicPartition> = match args.partition {
            Some(p) if (p as usize) < partitions.len() => vec![TopicPartition::new(topic, p)],
            Some(p) => bail!(
                "topic '{topic}' has {} partitions (0 to {}); there is no partition {p}",
                partitions.len(),
                partitions.len().saturating_sub(1)
            ),
            None => partitions,
        };
        consumer
            .assign(chosen.clone())
            .map_err(|e| anyhow!("{e}"))?;
        let start = match (args.offset, args.from_beginning) {
            (Some(offset), _) => consumer.seek(&chosen[0], offset),
            (None, true) => consumer.seek_to_beginning(&chosen),
            (None, false) => consumer.seek_to_end(&chosen),
        };
        start.map_err(|e| anyhow!("{e}"))?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    stop_on_signal(stop.clone());
    stop_when_stdout_closes(stop.clone());
    let idle_limit = args.timeout_ms.map(Duration::from_millis);
    // In a group, no data can come before the group assigns partitions (the broker may hold
    // a new group's first rebalance for group.initial.rebalance.delay.ms): the idle clock
    // starts then, and joining gets at least JOIN_WAIT.
    let started = Instant::now();
    let mut assigned = !grouped;
    let mut last_data = Instant::now();
    let mut printed: u64 = 0;
    let mut outcome: anyhow::Result<()> = Ok(());
    let mut line = Vec::with_capacity(64 * 1024);
    loop {
        if stop.load(Ordering::SeqCst) || args.max_messages.is_some_and(|m| printed >= m) {
            break;
        }
        if !assigned {
            if !consumer.assignment().is_empty() {
                assigned = true;
                last_data = Instant::now();
            } else if idle_limit.is_some_and(|l| started.elapsed() >= l.max(JOIN_WAIT)) {
                eprintln!(
                    "weir consume: the group assigned no partition to this consumer within {} ms",
                    started.elapsed().as_millis()
                );
                break;
            }
        }
        let wait = match idle_limit.filter(|_| assigned) {
            Some(limit) => {
                let left = limit.saturating_sub(last_data.elapsed());
                if left.is_zero() {
                    break;
                }
                left.min(POLL_SLICE)
            }
            None => POLL_SLICE,
        };
        let records = match consumer.poll(wait).await {
            Ok(r) => r,
            Err(e) => {
                outcome = Err(anyhow!("{e}"));
                break;
            }
        };
        if records.is_empty() {
            continue;
        }
        last_data = Instant::now();
        let room = args.max_messages.map_or(records.len(), |m| {
            (m - printed).min(records.len() as u64) as usize
        });
        line.clear();
        for r in &records[..room] {
            serde_json::to_writer(&mut line, &record_json(r))?;
            line.push(b'\n');
        }
        printed += room as u64;
        if room < records.len() {
            // Records polled but not printed are read again by the next consumer: move
            // each partition back to its first unprinted record before committing.
            let mut rewind: BTreeMap<TopicPartition, i64> = BTreeMap::new();
            for r in &records[room..] {
                rewind.entry(r.topic_partition()).or_insert(r.offset);
            }
            for (tp, offset) in rewind {
                consumer.seek(&tp, offset).map_err(|e| anyhow!("{e}"))?;
            }
        }
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout.write_all(&line).and_then(|_| stdout.flush()) {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                outcome = Err(anyhow!("writing to stdout: {e}"));
            }
            // None of this poll's records is known to have reached the reader: the group's
            // offsets go back to the first of them, so the next consumer reads them again.
            let mut rewind: BTreeMap<TopicPartition, i64> = BTreeMap::new();
            for r in &records {
                rewind.entry(r.topic_partition()).or_insert(r.offset);
            }
            for (tp, offset) in rewind {
                consumer.seek(&tp, offset).map_err(|e| anyhow!("{e}"))?;
            }
            // A closed pipe (`| head`) is a normal way to stop.
            break;
        }
    }
    if grouped {
        if let Err(e) = consumer.commit_sync(None).await {
            if outcome.is_ok() {
                outcome = Err(anyhow!("committing offsets: {e}"));
            }
        }
    }
    if let Err(e) = consumer.close_with_timeout(CLOSE_TIMEOUT).await {
        if outcome.is_ok() {
            outcome = Err(anyhow!("closing the consumer: {e}"));
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Args {
        let mut all = vec!["consume"];
        all.extend_from_slice(argv);
        Cli::parse_from(all).args
    }

    #[test]
    fn flags_that_need_each_other() {
        let e = settings(&parse(&["--topic", "t", "--offset", "5"])).unwrap_err();
        assert!(e.contains("--offset needs --partition"), "{e}");
        let e = settings(&parse(&[
            "--topic",
            "t",
            "--group",
            "g",
            "--partition",
            "0",
        ]))
        .unwrap_err();
        assert!(e.contains("--group"), "{e}");
        let e = settings(&parse(&["--topic", "t", "--property", "nokey"])).unwrap_err();
        assert!(e.contains("KEY=VALUE"), "{e}");
        let ok = settings(&parse(&[
            "--topic",
            "t",
            "--group",
            "g",
            "--from-beginning",
            "--property",
            "allow.auto.create.topics=true",
        ]))
        .unwrap();
        assert!(ok.contains(&("group.id".into(), "g".into())));
        assert!(ok.contains(&("auto.offset.reset".into(), "earliest".into())));
        // --property comes last, so it wins.
        assert_eq!(
            ok.iter()
                .rev()
                .find(|(k, _)| k == "allow.auto.create.topics")
                .map(|(_, v)| v.as_str()),
            Some("true")
        );
        let a = parse(&["--topic", "t"]);
        assert_eq!(a.client.bootstrap, "127.0.0.1:9092");
    }

    #[test]
    fn record_lines() {
        let r = ConsumerRecord {
            topic: "t".into(),
            partition: 1,
            offset: 7,
            timestamp: 1000,
            timestamp_type: weir_client::TimestampType::CreateTime,
            key: None,
            value: Some(Bytes::from_static(b"hello")),
            headers: vec![
                ("a".into(), Some(Bytes::from_static(&[0xff]))),
                ("b".into(), None),
            ],
            leader_epoch: None,
        };
        assert_eq!(
            serde_json::to_string(&record_json(&r)).unwrap(),
            r#"{"topic":"t","partition":1,"offset":7,"timestamp":1000,"key":null,"value":"hello","headers":[["a",{"base64":"/w=="}],["b",null]]}"#
        );
    }
}
