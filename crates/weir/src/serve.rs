//! `weir serve`: parse the broker's settings, start it, and stop it cleanly on SIGTERM or
//! Ctrl-C (flushing, checkpointing, and marking a clean shutdown).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use weir_broker::{BrokerConfig, RunningBroker};

#[derive(clap::Args)]
pub struct Args {
    /// A Kafka `server.properties` file (optional).
    config: Option<PathBuf>,
    /// Where to accept clients (a PLAINTEXT listener), HOST:PORT. Default 127.0.0.1:9092.
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Where the data lives (Kafka's log.dirs). Default ./weir-data, created if missing.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Any Kafka broker setting, e.g. --override num.partitions=3 (repeatable; wins over
    /// the file and the flags above).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Serve Prometheus metrics on HOST:PORT (off by default).
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<SocketAddr>,
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .try_init();
}

pub fn run(args: Args) -> ExitCode {
    init_logging();
    // As servers commonly do: the hard limit is what the administrator allows, the soft
    // one only a default. The broker divides what it gets (see weir_broker::descriptors).
    match weir_broker::descriptors::raise_limit() {
        Ok(r) if r.to > r.from => {
            tracing::info!("raised the open-files limit from {} to {}", r.from, r.to)
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("keeping the open-files limit as it is: {e}"),
    }
    let mut overrides = Vec::new();
    for o in &args.overrides {
        match o.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                overrides.push((k.trim().to_string(), v.trim().to_string()))
            }
            _ => {
                eprintln!("weir serve: --override '{o}' is not KEY=VALUE");
                return ExitCode::from(2);
            }
        }
    }
    let config = match BrokerConfig::from_sources(
        args.config.as_deref(),
        args.listen.as_deref(),
        args.data_dir.as_deref(),
        &overrides,
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir serve: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weir")
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir serve: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let running = match RunningBroker::start(config).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("weir serve: {e}");
                return ExitCode::FAILURE;
            }
        };
        if let Some(addr) = args.metrics {
            if let Err(e) = running.serve_metrics(addr) {
                eprintln!("weir serve: {e}");
                let _ = running.stop().await;
                return ExitCode::FAILURE;
            }
            tracing::info!(%addr, "serving Prometheus metrics");
        }
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("weir serve: cannot watch SIGTERM: {e}");
                    return ExitCode::FAILURE;
                }
            };
        let mut failed = false;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            dirs = running.data_dirs_failed() => {
                tracing::error!(
                    "every data directory is offline ({dirs}): shutting down, so that other \
                     brokers lead this one's partitions; fix the disk and start it again"
                );
                failed = true;
            }
        }
        match running.stop().await {
            Ok(()) if failed => ExitCode::FAILURE,
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("weir serve: shutdown: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
