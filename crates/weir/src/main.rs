//! `weir`: one binary for the broker, the clients and the tools. This file only parses
//! arguments and hands each subcommand to its module; the work lives in the libraries.

mod acls;
mod bench;
mod cli;
mod cluster;
mod configs;
mod consume;
mod dump_log;
mod groups;
mod json;
mod produce;
mod quotas;
mod serve;
mod tally;
mod topics;
mod transactions;
mod users;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "A Kafka-compatible event streaming broker and client"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker: Kafka clients connect to it (127.0.0.1:9092 and ./weir-data unless
    /// told otherwise).
    Serve(serve::Args),
    /// Print the batches, records and index entries of Kafka log files as JSON Lines
    /// (Weir's kafka-dump-log).
    DumpLog(dump_log::Args),
    /// Send one record per line of stdin to a topic; exits 0 once all are acknowledged.
    Produce(produce::Args),
    /// Read records from a topic and print one JSON object per record.
    Consume(consume::Args),
    /// Create, delete, list, describe and alter topics.
    Topics(topics::Args),
    /// Measure throughput and latency: produce, consume, or end to end.
    Bench(bench::Args),
    /// List, describe and delete consumer groups, and reset their offsets.
    Groups(groups::Args),
    /// SCRAM users of a stopped broker's data directory (the first administrator).
    Users(users::Args),
    /// Add, remove and list ACLs, on a running broker or a stopped one's data directory.
    Acls(acls::Args),
    /// Show and change the configs of a topic, a broker, or every broker's defaults.
    Configs(configs::Args),
    /// Set and show client quotas (producer_byte_rate, consumer_byte_rate,
    /// controller_mutation_rate).
    Quotas(quotas::Args),
    /// The brokers of the cluster, its controller, and where the partitions are led.
    Cluster(cluster::Args),
    /// List and describe transactions, and the producers of a partition
    /// (kafka-transactions.sh).
    Transactions(transactions::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::DumpLog(args) => dump_log::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Topics(args) => topics::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Groups(args) => groups::run(args),
        Command::Users(args) => users::run(args),
        Command::Acls(args) => acls::run(args),
        Command::Quotas(args) => quotas::run(args),
        Command::Configs(args) => configs::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::Transactions(args) => transactions::run(args),
    }
}
