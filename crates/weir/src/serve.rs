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

/// Logs to stdout, filtered by RUST_LOG (info by default); the filter is reloadable, so
/// `kafka-configs --entity-type broker-loggers` changes levels while the broker runs.
fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{reload, EnvFilter};
    let (directives, filter) = match std::env::var("RUST_LOG")
        .ok()
        .and_then(|d| EnvFilter::try_new(&d).ok().map(|f| (d, f)))
    {
        Some(found) => found,
        None => ("info".to_string(), EnvFilter::new("info")),
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let (filter, handle) = reload::Layer::new(filter);
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_target(false)
                .with_ansi(ansi),
        )
        .try_init();
    if installed.is_ok() {
        weir_broker::log_levels::install(
            &directives,
            Box::new(move |d| {
                let filter = EnvFilter::try_new(d).map_err(|e| e.to_string())?;
                handle.reload(filter).map_err(|e| e.to_string())
            }),
        );
    }
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
        // The handlers come first: a signal while the logs load and recover (seconds, after
        // a crash with many partitions) must not kill the process mid-way, which would only
        // mean another recovery at the next start. It is answered once the broker is up.
        let (signal_tx, mut signal_rx) = tokio::sync::oneshot::channel::<&'static str>();
        let watch = match (
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()),
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => tokio::spawn(async move {
                let which = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "interrupted",
                };
                let _ = signal_tx.send(which);
            }),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("weir serve: cannot watch SIGTERM and SIGINT: {e}");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!("starting; SIGTERM and Ctrl-C stop the broker cleanly from now on");
        let running = match RunningBroker::start(config).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("weir serve: {e}");
                return ExitCode::FAILURE;
            }
        };
        if let Ok(which) = signal_rx.try_recv() {
            tracing::info!("{which} during start-up: shutting down now that the logs are loaded");
            return stopped(running, false).await;
        }
        if let Some(addr) = args.metrics {
            if let Err(e) = running.serve_metrics(addr) {
                eprintln!("weir serve: {e}");
                let _ = running.stop().await;
                return ExitCode::FAILURE;
            }
            tracing::info!(%addr, "serving Prometheus metrics");
        }
        let mut failed = false;
        tokio::select! {
            which = &mut signal_rx => {
                tracing::info!("{}: shutting down", which.unwrap_or("signal watch ended"));
            }
            dirs = running.data_dirs_failed() => {
                tracing::error!(
                    "every data directory is offline ({dirs}): shutting down, so that other \
                     brokers lead this one's partitions; fix the disk and start it again"
                );
                failed = true;
            }
        }
        watch.abort();
        stopped(running, failed).await
    })
}

/// Stops the broker: flushed, checkpointed, marked clean.
async fn stopped(running: RunningBroker, failed: bool) -> ExitCode {
    match running.stop().await {
        Ok(()) if failed => ExitCode::FAILURE,
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir serve: shutdown: {e}");
            ExitCode::FAILURE
        }
    }
}
