//! `weir bench`: Weir's kafka-producer-perf-test, kafka-consumer-perf-test and end-to-end
//! latency tool in one. It drives Weir's own client (`weir-client`) against any
//! Kafka-compatible broker, or — with no `--bootstrap` — against a `weir serve` it starts
//! on a temporary data directory, so that a newcomer sees a number with one command.
//!
//! Output: a progress bar on stderr while it runs, a readable summary at the end, and with
//! `--json` one JSON object as the last line of stdout:
//! `{"records","seconds","records_per_sec","mb_per_sec","latency_ms":{"p50","p99","p999","max"},"cpu_seconds"}`
//! (plus `broker_cpu_seconds` when the broker is our own child; produce adds
//! `request_latency_ms`, and in transactions `transactions` and `commit_latency_ms`). MB
//! are 2^20 bytes, as Kafka's perf tools count them.
//!
//! What "latency" means per mode:
//! - produce: from `send` to the acknowledgement callback, per record (as Kafka's
//!   ProducerPerformance measures it); in transactions, also each `commit_transaction`;
//! - consume: how long each `poll` that returned records waited (the time an application
//!   spends waiting for data);
//! - e2e: from just before `send` to the consumer holding the record. The send time is
//!   written into the first 8 bytes of each value in nanoseconds of this process's
//!   monotonic clock, because Kafka's millisecond timestamps cannot show sub-millisecond
//!   latency.
//!
//! The parts: `produce`, `consume` and `e2e` are the modes, each with its own flags;
//! `common` holds the flags they share and makes their clients; `broker` finds or starts
//! the broker under test; `load` makes and paces what the producers send; `report` times a
//! run and shows it (`plot` draws it, `cpu` reads the CPU clocks). This file only parses,
//! dispatches, and hands what the mode measured to `report`.

mod broker;
mod common;
mod consume;
mod cpu;
mod e2e;
mod load;
mod plot;
mod produce;
mod report;

use std::process::ExitCode;

use common::{Common, Usage};
use consume::ConsumeArgs;
use e2e::E2eArgs;
use produce::ProduceArgs;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(clap::Subcommand)]
enum Mode {
    /// Produce N records as fast as the producer goes (or at --rate) and report throughput
    /// and send-to-acknowledgement latency.
    Produce(ProduceArgs),
    /// Consume N records from the beginning of a topic and report throughput.
    Consume(ConsumeArgs),
    /// Produce at a fixed rate while consuming; report create-to-receive latency.
    E2e(E2eArgs),
}

impl Mode {
    fn common(&self) -> &Common {
        match self {
            Mode::Produce(a) => &a.common,
            Mode::Consume(a) => &a.common,
            Mode::E2e(a) => &a.common,
        }
    }
}

pub fn run(args: Args) -> ExitCode {
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("weir-bench")
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir bench: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let common = args.mode.common().clone();
        common.check()?;
        // Each mode stops our own broker, if it started one, before it returns.
        let outcome = match args.mode {
            Mode::Produce(a) => produce::run(a).await?,
            Mode::Consume(a) => consume::run(a).await?,
            Mode::E2e(a) => e2e::run(a).await?,
        };
        outcome.report(&common)
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Usage>() => {
            eprintln!("weir bench: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("weir bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .try_init();
}
