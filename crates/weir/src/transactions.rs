//! `weir transactions`: the transactions the coordinators know, one transactional id's
//! state, and the producers (with their open transactions) a partition's leader knows —
//! Kafka's kafka-transactions.sh list, describe and describe-producers, against any
//! Kafka-compatible broker. Tables for people, `--json` for scripts.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::cli::{self, ClientArgs, Failure};
use crate::topics::admin;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// List the transactional ids every broker coordinates, with their producer and state.
    List {
        #[command(flatten)]
        client: ClientArgs,
        /// Only transactions in this state: Empty, Ongoing, PrepareCommit, PrepareAbort,
        /// CompleteCommit, CompleteAbort, Dead, PrepareEpochFence (repeatable).
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
        /// Only this producer id (repeatable).
        #[arg(long = "producer-id", value_name = "ID")]
        producer_ids: Vec<i64>,
        /// Only transactions open at least this long (milliseconds).
        #[arg(long, value_name = "MS")]
        duration_filter: Option<i64>,
        #[arg(long)]
        json: bool,
    },
    /// Show a transactional id's producer, state, timeout and open transaction.
    Describe {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        transactional_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Show the producers a partition's leader knows and where their open transactions
    /// began (to find a transaction that hangs).
    DescribeProducers {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: Args) -> ExitCode {
    cli::run_command("transactions", execute(args.command))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A cell for an optional number: the number, or "None" as Kafka's tool prints it.
fn or_none(v: Option<i64>) -> String {
    v.map_or_else(|| "None".to_string(), |v| v.to_string())
}

async fn execute(command: Command) -> Result<(), Failure> {
    match command {
        Command::List {
            client,
            states,
            producer_ids,
            duration_filter,
            json,
        } => {
            if duration_filter.is_some_and(|d| d < 0) {
                return Err(Failure::Usage(
                    "--duration-filter must be 0 or more milliseconds".into(),
                ));
            }
            let listed = admin(&client)?
                .list_transactions(&states, &producer_ids, duration_filter)
                .await?;
            if json {
                let v: Vec<Value> = listed
                    .iter()
                    .map(|t| {
                        json!({
                            "transactional_id": t.transactional_id,
                            "coordinator": t.coordinator,
                            "producer_id": t.producer_id,
                            "state": t.state,
                        })
                    })
                    .collect();
                cli::print_json(&Value::Array(v));
            } else {
                let rows: Vec<Vec<String>> = listed
                    .into_iter()
                    .map(|t| {
                        vec![
                            t.transactional_id,
                            t.coordinator.to_string(),
                            t.producer_id.to_string(),
                            t.state,
                        ]
                    })
                    .collect();
                cli::print_table(
                    &["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
                    &rows,
                );
            }
            Ok(())
        }
        Command::Describe {
            client,
            transactional_id,
            json,
        } => {
            let d = admin(&client)?
                .describe_transaction(&transactional_id)
                .await?;
            let started = (d.start_time_ms >= 0).then_some(d.start_time_ms);
            let duration = started.map(|s| (now_ms() - s).max(0));
            let partitions: Vec<String> = d
                .partitions
                .iter()
                .map(|(t, p)| format!("{t}-{p}"))
                .collect();
            if json {
                cli::print_json(&json!({
                    "transactional_id": d.transactional_id,
                    "coordinator": d.coordinator,
                    "producer_id": d.producer_id,
                    "producer_epoch": d.producer_epoch,
                    "state": d.state,
                    "timeout_ms": d.timeout_ms,
                    "start_time_ms": started,
                    "duration_ms": duration,
                    "partitions": d.partitions.iter().map(|(t, p)| json!([t, p])).collect::<Vec<_>>(),
                }));
            } else {
                cli::print_table(
                    &[
                        "COORDINATOR",
                        "TRANSACTIONAL-ID",
                        "PRODUCER-ID",
                        "PRODUCER-EPOCH",
                        "STATE",
                        "TIMEOUT-MS",
                        "START-TIME-MS",
                        "DURATION-MS",
                        "PARTITIONS",
                    ],
                    &[vec![
                        d.coordinator
                            .map_or_else(|| "-".to_string(), |c| c.to_string()),
                        d.transactional_id,
                        d.producer_id.to_string(),
                        d.producer_epoch.to_string(),
                        d.state,
                        d.timeout_ms.to_string(),
                        or_none(started),
                        or_none(duration),
                        if partitions.is_empty() {
                            "-".to_string()
                        } else {
                            partitions.join(",")
                        },
                    ]],
                );
            }
            Ok(())
        }
        Command::DescribeProducers {
            client,
            topic,
            partition,
            json,
        } => {
            let tp = (topic, partition);
            let mut found = admin(&client)?
                .describe_producers(std::slice::from_ref(&tp))
                .await?;
            assert_eq!(found.len(), 1, "one answer for the one partition asked");
            let producers = found.remove(0).1?;
            if json {
                let v: Vec<Value> = producers
                    .iter()
                    .map(|p| {
                        json!({
                            "producer_id": p.producer_id,
                            "producer_epoch": p.producer_epoch,
                            "coordinator_epoch": p.coordinator_epoch,
                            "last_sequence": p.last_sequence,
                            "last_timestamp": p.last_timestamp,
                            "current_txn_start_offset": p.current_txn_start_offset,
                        })
                    })
                    .collect();
                cli::print_json(&Value::Array(v));
            } else {
                let rows: Vec<Vec<String>> = producers
                    .iter()
                    .map(|p| {
                        vec![
                            p.producer_id.to_string(),
                            p.producer_epoch.to_string(),
                            p.coordinator_epoch.to_string(),
                            p.last_sequence.to_string(),
                            p.last_timestamp.to_string(),
                            or_none(p.current_txn_start_offset),
                        ]
                    })
                    .collect();
                cli::print_table(
                    &[
                        "PRODUCER-ID",
                        "PRODUCER-EPOCH",
                        "COORDINATOR-EPOCH",
                        "LAST-SEQUENCE",
                        "LAST-TIMESTAMP",
                        "CURRENT-TXN-START-OFFSET",
                    ],
                    &rows,
                );
            }
            Ok(())
        }
    }
}
