//! `weir cluster describe`: the brokers of the cluster (with their racks), the controller,
//! how many partitions each broker leads and holds, and the partitions no broker leads —
//! from any Kafka-compatible broker's Metadata. A table for people, `--json` for scripts.

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde_json::json;

use crate::cli::{self, ClientArgs, Failure};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Show the brokers, the controller, partitions per broker and offline partitions.
    Describe {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: Args) -> ExitCode {
    cli::run_command("cluster", execute(args.command))
}

/// What each broker does for the topics: partitions it leads, replicas it holds.
#[derive(Default)]
struct Load {
    leads: usize,
    replicas: usize,
}

async fn execute(command: Command) -> Result<(), Failure> {
    let Command::Describe { client, json } = command;
    let a = crate::topics::admin(&client)?;
    let cluster = a.describe_cluster().await?;
    let names = a.list_topics(true).await?;
    let topics = a.describe_topics(&names).await?;
    let mut load: BTreeMap<i32, Load> = cluster
        .brokers
        .iter()
        .map(|b| (b.id, Load::default()))
        .collect();
    let mut offline = Vec::new();
    let mut partitions = 0usize;
    for (name, t) in &topics {
        let Ok(t) = t else { continue };
        for p in &t.partitions {
            partitions += 1;
            if p.leader >= 0 {
                load.entry(p.leader).or_default().leads += 1;
            } else {
                offline.push(format!("{name}-{}", p.partition));
            }
            for r in &p.replicas {
                load.entry(*r).or_default().replicas += 1;
            }
        }
    }
    if json {
        cli::print_json(&json!({
            "cluster_id": cluster.cluster_id,
            "controller": cluster.controller,
            "brokers": cluster.brokers.iter().map(|b| {
                let l = load.get(&b.id);
                json!({
                    "id": b.id,
                    "host": b.host,
                    "port": b.port,
                    "rack": b.rack,
                    "leads": l.map_or(0, |l| l.leads),
                    "replicas": l.map_or(0, |l| l.replicas),
                })
            }).collect::<Vec<_>>(),
            "topics": names.len(),
            "partitions": partitions,
            "offline_partitions": offline,
        }));
        return Ok(());
    }
    println!(
        "Cluster: {}\tController: {}\tBrokers: {}\tTopics: {}\tPartitions: {}\tOffline: {}",
        cluster.cluster_id.as_deref().unwrap_or("-"),
        cluster.controller,
        cluster.brokers.len(),
        names.len(),
        partitions,
        offline.len()
    );
    let rows: Vec<Vec<String>> = cluster
        .brokers
        .iter()
        .map(|b| {
            let l = load.get(&b.id);
            vec![
                b.id.to_string(),
                format!("{}:{}", b.host, b.port),
                b.rack.clone().unwrap_or_else(|| "-".into()),
                if b.id == cluster.controller {
                    "yes"
                } else {
                    ""
                }
                .to_string(),
                l.map_or(0, |l| l.leads).to_string(),
                l.map_or(0, |l| l.replicas).to_string(),
            ]
        })
        .collect();
    cli::print_table(
        &[
            "BROKER",
            "ADDRESS",
            "RACK",
            "CONTROLLER",
            "LEADS",
            "REPLICAS",
        ],
        &rows,
    );
    if !offline.is_empty() {
        println!(
            "Offline partitions (no live leader): {}",
            offline.join(", ")
        );
    }
    Ok(())
}
