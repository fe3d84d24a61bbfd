//! `weir topics`: create, delete, list, describe and alter topics (Kafka's kafka-topics.sh
//! and the topic half of kafka-configs.sh), as tables for people or `--json` for scripts.

use std::process::ExitCode;

use serde_json::{json, Value};
use weir_client::admin::{Admin, AlterConfigOp, ConfigResource, NewTopic};
use weir_kafka::ErrorCode;

pub use crate::cli::Failure;
use crate::cli::{self, ClientArgs};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Create a topic.
    Create {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        topic: String,
        /// Partitions (default: the broker's num.partitions).
        #[arg(long)]
        partitions: Option<i32>,
        /// Replicas per partition (default: the broker's default.replication.factor).
        #[arg(long)]
        replication_factor: Option<i16>,
        /// A topic setting, e.g. --config cleanup.policy=compact (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Succeed quietly if the topic already exists.
        #[arg(long)]
        if_not_exists: bool,
        /// Check the request without creating anything.
        #[arg(long)]
        validate_only: bool,
    },
    /// Delete topics and all their data.
    Delete {
        #[command(flatten)]
        client: ClientArgs,
        /// The topic (repeatable).
        #[arg(long = "topic", required = true)]
        topics: Vec<String>,
        /// Succeed quietly for topics that do not exist.
        #[arg(long)]
        if_exists: bool,
    },
    /// List topic names.
    List {
        #[command(flatten)]
        client: ClientArgs,
        /// Include internal topics such as __consumer_offsets.
        #[arg(long)]
        internal: bool,
        #[arg(long)]
        json: bool,
    },
    /// Show partitions, leaders, replicas, offsets and the settings that differ from the
    /// defaults (all topics if none named).
    Describe {
        #[command(flatten)]
        client: ClientArgs,
        /// The topic (repeatable; all topics if not given).
        #[arg(long = "topic")]
        topics: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Change a topic: grow its partitions, set or remove settings.
    Alter {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        topic: String,
        /// The new total number of partitions (topics cannot shrink).
        #[arg(long)]
        partitions: Option<i32>,
        /// Set a topic setting (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Return a setting to its default (repeatable).
        #[arg(long = "delete-config", value_name = "KEY")]
        delete_configs: Vec<String>,
    },
    /// Move partitions to other brokers (Kafka's kafka-reassign-partitions): the new
    /// replicas are added, catch up, take over, and the old ones are dropped. Or cancel a
    /// move, or list the moves under way.
    Reassign {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long, required_unless_present = "list")]
        topic: Option<String>,
        /// A partition to move (repeatable).
        #[arg(long = "partition", required_unless_present = "list")]
        partitions: Vec<i32>,
        /// The new replicas, preferred leader first, e.g. --replicas 2,3,1.
        #[arg(long, value_delimiter = ',', required_unless_present_any = ["cancel", "list"])]
        replicas: Vec<i32>,
        /// Cancel the moves of these partitions: back to their replicas before.
        #[arg(long, conflicts_with = "replicas")]
        cancel: bool,
        /// List the moves under way.
        #[arg(long, conflicts_with_all = ["topic", "replicas", "cancel"])]
        list: bool,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: Args) -> ExitCode {
    cli::run_command("topics", execute(args.command))
}

pub fn admin(client: &ClientArgs) -> Result<Admin, Failure> {
    let settings = client.settings().map_err(Failure::Usage)?;
    Ok(Admin::from_properties(settings)?)
}

async fn execute(command: Command) -> Result<(), Failure> {
    match command {
        Command::Create {
            client,
            topic,
            partitions,
            replication_factor,
            configs,
            if_not_exists,
            validate_only,
        } => {
            let a = admin(&client)?;
            let mut t = NewTopic::new(
                &topic,
                partitions.unwrap_or(-1),
                replication_factor.unwrap_or(-1),
            );
            for c in &configs {
                let (k, v) = cli::key_value(c, "--config").map_err(Failure::Usage)?;
                t = t.config(k, v);
            }
            let result = a.create_topics(&[t], validate_only).await?;
            match &result[0].1 {
                Ok(()) => {
                    if validate_only {
                        println!("Topic '{topic}' would be created.");
                    } else {
                        println!("Created topic '{topic}'.");
                    }
                    Ok(())
                }
                Err(e)
                    if if_not_exists && e.code() == Some(ErrorCode::TopicAlreadyExists.code()) =>
                {
                    Ok(())
                }
                Err(e) => Err(Failure::Failed(format!("creating '{topic}': {e}"))),
            }
        }
        Command::Delete {
            client,
            topics,
            if_exists,
        } => {
            let a = admin(&client)?;
            let mut failed = Vec::new();
            for (name, r) in a.delete_topics(&topics).await? {
                match r {
                    Ok(()) => println!("Deleted topic '{name}'."),
                    Err(e)
                        if if_exists
                            && e.code() == Some(ErrorCode::UnknownTopicOrPartition.code()) => {}
                    Err(e) => failed.push(format!("deleting '{name}': {e}")),
                }
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(Failure::Failed(failed.join("; ")))
            }
        }
        Command::List {
            client,
            internal,
            json,
        } => {
            let names = admin(&client)?.list_topics(internal).await?;
            if json {
                cli::print_json(&json!(names));
            } else {
                for n in names {
                    println!("{n}");
                }
            }
            Ok(())
        }
        Command::Describe {
            client,
            topics,
            json,
        } => describe(&admin(&client)?, topics, json).await,
        Command::Alter {
            client,
            topic,
            partitions,
            configs,
            delete_configs,
        } => {
            if partitions.is_none() && configs.is_empty() && delete_configs.is_empty() {
                return Err(Failure::Usage(
                    "nothing to change: give --partitions, --config or --delete-config".into(),
                ));
            }
            let a = admin(&client)?;
            let mut ops = Vec::new();
            for c in &configs {
                let (k, v) = cli::key_value(c, "--config").map_err(Failure::Usage)?;
                ops.push(AlterConfigOp::Set(k, v));
            }
            ops.extend(
                delete_configs
                    .iter()
                    .map(|k| AlterConfigOp::Delete(k.clone())),
            );
            if let Some(n) = partitions {
                let r = a.create_partitions(&[(topic.clone(), n)], false).await?;
                r[0].1
                    .clone()
                    .map_err(|e| Failure::Failed(format!("partitions of '{topic}': {e}")))?;
                println!("Topic '{topic}' now has {n} partitions.");
            }
            if !ops.is_empty() {
                a.alter_configs(&ConfigResource::Topic(topic.clone()), &ops, false)
                    .await
                    .map_err(|e| Failure::Failed(format!("settings of '{topic}': {e}")))?;
                println!("Updated the settings of topic '{topic}'.");
            }
            Ok(())
        }
        Command::Reassign {
            client,
            topic,
            partitions,
            replicas,
            cancel,
            list,
            json,
        } => {
            let a = admin(&client)?;
            if list {
                let moves = a.list_reassignments().await?;
                if json {
                    let v: Vec<Value> = moves
                        .iter()
                        .map(|m| {
                            json!({"topic": m.topic, "partition": m.partition,
                                   "replicas": m.replicas, "adding": m.adding,
                                   "removing": m.removing})
                        })
                        .collect();
                    cli::print_json(&Value::Array(v));
                } else if moves.is_empty() {
                    println!("No partition is being moved.");
                } else {
                    for m in &moves {
                        println!(
                            "{}-{}: replicas {} (adding {}, removing {})",
                            m.topic,
                            m.partition,
                            join(&m.replicas),
                            join(&m.adding),
                            join(&m.removing)
                        );
                    }
                }
                return Ok(());
            }
            let topic = topic.unwrap_or_default();
            let target = (!cancel).then_some(replicas);
            let moves: Vec<(String, i32, Option<Vec<i32>>)> = partitions
                .iter()
                .map(|p| (topic.clone(), *p, target.clone()))
                .collect();
            let mut failed = Vec::new();
            for ((t, p), r) in a.alter_reassignments(&moves).await? {
                match r {
                    Ok(()) if cancel => println!("Cancelled the move of {t}-{p}."),
                    Ok(()) => println!(
                        "Moving {t}-{p} to replicas {}.",
                        join(target.as_deref().unwrap_or_default())
                    ),
                    Err(e) => failed.push(format!("{t}-{p}: {e}")),
                }
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(Failure::Failed(failed.join("; ")))
            }
        }
    }
}

async fn describe(a: &Admin, mut topics: Vec<String>, json: bool) -> Result<(), Failure> {
    if topics.is_empty() {
        topics = a.list_topics(false).await?;
    }
    let described = a.describe_topics(&topics).await?;
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for (name, r) in described {
        let d = match r {
            Ok(d) => d,
            Err(e) => {
                missing.push(format!("'{name}': {e}"));
                continue;
            }
        };
        let configs = a
            .describe_configs(&ConfigResource::Topic(name.clone()))
            .await?;
        let set: Vec<(String, String)> = configs
            .iter()
            .filter(|c| !c.is_default())
            .map(|c| {
                (
                    c.name.clone(),
                    c.value.clone().unwrap_or_else(|| "(hidden)".into()),
                )
            })
            .collect();
        out.push((d, set));
    }
    if json {
        let v: Vec<Value> = out
            .iter()
            .map(|(d, set)| {
                json!({
                    "name": d.name,
                    "id": d.id.to_string(),
                    "internal": d.internal,
                    "partitions": d.partitions.iter().map(|p| json!({
                        "partition": p.partition,
                        "leader": p.leader,
                        "replicas": p.replicas,
                        "isr": p.isr,
                    })).collect::<Vec<_>>(),
                    "configs": set.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
                })
            })
            .collect();
        cli::print_json(&Value::Array(v));
    } else {
        for (d, set) in &out {
            let settings = if set.is_empty() {
                "(defaults)".to_string()
            } else {
                set.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            println!(
                "Topic: {}\tTopicId: {}\tPartitions: {}\tConfigs: {settings}",
                d.name,
                d.id,
                d.partitions.len()
            );
            let rows: Vec<Vec<String>> = d
                .partitions
                .iter()
                .map(|p| {
                    vec![
                        p.partition.to_string(),
                        p.leader.to_string(),
                        join(&p.replicas),
                        join(&p.isr),
                    ]
                })
                .collect();
            cli::print_table(&["PARTITION", "LEADER", "REPLICAS", "ISR"], &rows);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Failure::Failed(missing.join("; ")))
    }
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}
