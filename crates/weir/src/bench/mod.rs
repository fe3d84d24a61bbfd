//! `weir bench`: Weir's kafka-producer-perf-test, kafka-consumer-perf-test and end-to-end
//! latency tool in one. It drives Weir's own client (`weir-client`) against any
//! Kafka-compatible broker, or — with no `--bootstrap` — against a `weir serve` it starts
//! on a temporary data directory, so that a newcomer sees a number with one command.
//!
//! Output: a progress bar on stderr while it runs, a readable summary at the end, and with
//! `--json` one JSON object as the last line of stdout:
//! `{"records","seconds","records_per_sec","mb_per_sec","latency_ms":{"p50","p99","p999","max"},"cpu_seconds"}`
//! (plus `broker_cpu_seconds` when the broker is our own child). MB are 2^20 bytes, as
//! Kafka's perf tools count them.
//!
//! What "latency" means per mode:
//! - produce: from `send` to the acknowledgement callback, per record (as Kafka's
//!   ProducerPerformance measures it);
//! - consume: how long each `poll` that returned records waited (the time an application
//!   spends waiting for data);
//! - e2e: from just before `send` to the consumer holding the record. The send time is
//!   written into the first 8 bytes of each value in nanoseconds of this process's
//!   monotonic clock, because Kafka's millisecond timestamps cannot show sub-millisecond
//!   latency.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use hdrhistogram::Histogram;
use weir_client::admin::{Admin, NewTopic};
use weir_client::{
    Consumer, DeliveryListener, Producer, ProducerRecord, RecordMetadata, TopicPartition,
};

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

/// What every mode shares.
#[derive(clap::Args, Clone)]
struct Common {
    /// A Kafka-compatible broker, HOST:PORT. Without it, a `weir serve` of our own is started
    /// on a temporary data directory and stopped at the end.
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap: Option<String>,
    /// Any Kafka client setting for the producer and consumer, e.g. --property
    /// max.in.flight.requests.per.connection=1 (repeatable; wins over the flags).
    #[arg(long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// Print the result as one JSON object on the last line of stdout.
    #[arg(long)]
    json: bool,
    /// Draw the latency distribution as an SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

#[derive(clap::Args)]
struct ProduceArgs {
    #[command(flatten)]
    common: Common,
    /// The topic; created with --partitions if it does not exist.
    #[arg(long)]
    topic: String,
    /// How many records to send in all.
    #[arg(long, value_name = "N")]
    records: u64,
    /// Bytes per record value (random letters, as Kafka's perf test writes).
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    record_size: usize,
    /// Take record values from this file instead, one per line, in turn.
    #[arg(long, value_name = "FILE", conflicts_with = "record_size")]
    payload_file: Option<PathBuf>,
    /// compression.type: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
    /// acks: 0, 1 or all.
    #[arg(long, default_value = "all")]
    acks: String,
    /// batch.size in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 16384)]
    batch_size: usize,
    /// linger.ms.
    #[arg(long, value_name = "MS", default_value_t = 5)]
    linger_ms: u64,
    /// Partitions of the topic when it has to be created.
    #[arg(long, value_name = "P", default_value_t = 1)]
    partitions: i32,
    /// Independent producers (each its own connections), sharing the records.
    #[arg(long, value_name = "K", default_value_t = 1)]
    producers: u32,
    /// Records per second in all; as fast as possible without it.
    #[arg(long, value_name = "R")]
    rate: Option<f64>,
}

#[derive(clap::Args)]
struct ConsumeArgs {
    #[command(flatten)]
    common: Common,
    /// The topic, read from the beginning of every partition.
    #[arg(long)]
    topic: String,
    /// How many records to read.
    #[arg(long, value_name = "N")]
    records: u64,
    /// Bytes per record when the topic is first filled (only without --bootstrap: our
    /// own broker starts empty, so N records are produced before the clock starts).
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    record_size: usize,
    /// Give up after this long without a new record.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    timeout_ms: u64,
}

#[derive(clap::Args)]
struct E2eArgs {
    #[command(flatten)]
    common: Common,
    /// The topic; created with --partitions if it does not exist.
    #[arg(long)]
    topic: String,
    /// Records per second.
    #[arg(long, value_name = "R")]
    rate: f64,
    /// How long to produce.
    #[arg(long, value_name = "D")]
    seconds: f64,
    /// Bytes per record value (at least 8: the send time).
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    record_size: usize,
    /// compression.type.
    #[arg(long, default_value = "none")]
    compression: String,
    /// acks: 0, 1 or all.
    #[arg(long, default_value = "1")]
    acks: String,
    /// linger.ms (0: each record leaves at once, as a latency test wants).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    linger_ms: u64,
    /// Partitions of the topic when it has to be created.
    #[arg(long, value_name = "P", default_value_t = 1)]
    partitions: i32,
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
    let plot_ok = |c: &Common| match &c.plot {
        Some(p) if !p.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg")) => {
            Err(usage("--plot draws SVG: give a file name ending in .svg"))
        }
        _ => Ok(()),
    };
    let result = runtime.block_on(async {
        let common = match &args.mode {
            Mode::Produce(a) => &a.common,
            Mode::Consume(a) => &a.common,
            Mode::E2e(a) => &a.common,
        };
        plot_ok(common)?;
        match args.mode {
            Mode::Produce(a) => produce(a).await,
            Mode::Consume(a) => consume(a).await,
            Mode::E2e(a) => e2e(a).await,
        }
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

/// A mistake in the flags (exit code 2).
#[derive(Debug)]
struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(msg.into()))
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

// ---------------------------------------------------------------------------------------
// The broker: given, or our own child process.

/// A `weir serve` started for this run on a temporary directory; stopped (SIGTERM, then
/// waited for) when dropped.
struct OwnBroker {
    child: Child,
    _dir: tempfile::TempDir,
}

impl OwnBroker {
    fn start() -> anyhow::Result<(OwnBroker, String)> {
        let dir = tempfile::Builder::new()
            .prefix("weir-bench-")
            .tempdir()
            .context("creating a temporary data directory")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let bootstrap = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("serve.log"))?;
        let exe = std::env::current_exe().context("finding the weir binary")?;
        let child = Command::new(exe)
            .args(["serve", "--listen", &bootstrap, "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--override", "group.initial.rebalance.delay.ms=0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting weir serve")?;
        let mut broker = OwnBroker { child, _dir: dir };
        let start = Instant::now();
        while std::net::TcpStream::connect(&bootstrap).is_err() {
            if let Some(status) = broker.child.try_wait()? {
                let log = std::fs::read_to_string(broker._dir.path().join("serve.log"))
                    .unwrap_or_default();
                bail!("weir serve exited ({status}):\n{log}");
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!("weir serve did not listen on {bootstrap} within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("weir bench: started weir serve on {bootstrap} (temporary data directory)");
        Ok((broker, bootstrap))
    }

    /// CPU seconds the broker has used so far (user + system).
    fn cpu_seconds(&self) -> Option<f64> {
        process_cpu_seconds(self.child.id())
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User + system CPU seconds of a process, from /proc/PID/stat (Linux).
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) / ticks as f64)
}

/// CPU seconds this process has used so far (user + system, every thread).
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct we pass and nothing else.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return 0.0;
        }
        let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        t(ru.ru_utime) + t(ru.ru_stime)
    }
}

/// Resolves the broker for a run: the one given, or our own.
fn broker(common: &Common) -> anyhow::Result<(Option<OwnBroker>, String)> {
    match &common.bootstrap {
        Some(b) => Ok((None, b.clone())),
        None => {
            let (own, b) = OwnBroker::start()?;
            Ok((Some(own), b))
        }
    }
}

/// Client settings: ours, then the user's --property pairs (later ones win).
fn settings(
    bootstrap: &str,
    ours: &[(&str, String)],
    common: &Common,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = vec![("bootstrap.servers".to_string(), bootstrap.to_string())];
    out.extend(ours.iter().map(|(k, v)| (k.to_string(), v.clone())));
    for p in &common.properties {
        let (k, v) = crate::cli::key_value(p, "--property").map_err(usage)?;
        out.retain(|(key, _)| *key != k);
        out.push((k, v));
    }
    Ok(out)
}

/// Makes sure the topic exists: creates it with `partitions` partitions if not. Returns
/// its partition count.
async fn ensure_topic(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<usize> {
    let admin = Admin::from_properties([
        ("bootstrap.servers", bootstrap),
        ("default.api.timeout.ms", "10000"),
    ])
    .map_err(|e| anyhow!("{e}"))?;
    let created = admin
        .create_topics(&[NewTopic::new(topic, partitions, -1)], false)
        .await
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("creating topic '{topic}' on {bootstrap}"))?;
    for (_, r) in created {
        match r {
            Ok(()) => {}
            Err(e) if e.code() == Some(36) => {} // TOPIC_ALREADY_EXISTS
            Err(e) => bail!("creating topic '{topic}': {e}"),
        }
    }
    let described = admin
        .describe_topics(&[topic.to_string()])
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let (_, d) = described
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("the broker did not describe topic '{topic}'"))?;
    let d = d.map_err(|e| anyhow!("describing topic '{topic}': {e}"))?;
    let n = d.partitions.len();
    if n as i32 != partitions {
        eprintln!("weir bench: topic '{topic}' already exists with {n} partitions; using them");
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------
// Results.

/// A latency histogram in microseconds, 1 µs to 1 hour at 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

struct Outcome {
    mode: &'static str,
    records: u64,
    bytes: u64,
    seconds: f64,
    latency: Histogram<u64>,
    /// Produce only: the round trips of the Produce requests (without the time records
    /// waited in their batches), the figure comparable to a request-level load generator.
    request_latency: Option<Histogram<u64>>,
    cpu_seconds: f64,
    broker_cpu_seconds: Option<f64>,
}

impl Outcome {
    fn report(&self, common: &Common) -> anyhow::Result<()> {
        let rate = self.records as f64 / self.seconds;
        let mb = self.bytes as f64 / (1024.0 * 1024.0) / self.seconds;
        let ms = |q: f64| self.latency.value_at_quantile(q) as f64 / 1000.0;
        let max = self.latency.max() as f64 / 1000.0;
        eprintln!(
            "{} records {}, {:.1} records/sec ({:.2} MB/sec), latency p50 {:.3} ms, p99 {:.3} ms, \
             p99.9 {:.3} ms, max {:.3} ms; {:.2} s CPU in the client{}",
            self.records,
            match self.mode {
                "produce" => "sent",
                "consume" => "consumed",
                _ => "sent and received",
            },
            rate,
            mb,
            ms(0.5),
            ms(0.99),
            ms(0.999),
            max,
            self.cpu_seconds,
            self.broker_cpu_seconds
                .map(|b| format!(", {b:.2} s in the broker"))
                .unwrap_or_default()
        );
        if let Some(h) = &self.request_latency {
            eprintln!(
                "Produce requests: {}, round trip p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms",
                h.len(),
                h.value_at_quantile(0.5) as f64 / 1000.0,
                h.value_at_quantile(0.99) as f64 / 1000.0,
                h.value_at_quantile(0.999) as f64 / 1000.0,
                h.max() as f64 / 1000.0
            );
        }
        if let Some(path) = &common.plot {
            plot(path, self.mode, &self.latency)?;
            eprintln!(
                "weir bench: latency distribution drawn in {}",
                path.display()
            );
        }
        if common.json {
            let round = |x: f64, digits: i32| {
                let m = 10f64.powi(digits);
                (x * m).round() / m
            };
            let mut v = serde_json::json!({
                "records": self.records,
                "seconds": round(self.seconds, 4),
                "records_per_sec": round(rate, 1),
                "mb_per_sec": round(mb, 3),
                "latency_ms": {
                    "p50": round(ms(0.5), 3),
                    "p99": round(ms(0.99), 3),
                    "p999": round(ms(0.999), 3),
                    "max": round(max, 3),
                },
                "cpu_seconds": round(self.cpu_seconds, 3),
            });
            if let Some(b) = self.broker_cpu_seconds {
                v["broker_cpu_seconds"] = serde_json::json!(round(b, 3));
            }
            if let Some(h) = &self.request_latency {
                let ms = |q: f64| round(h.value_at_quantile(q) as f64 / 1000.0, 3);
                v["request_latency_ms"] = serde_json::json!({
                    "p50": ms(0.5),
                    "p99": ms(0.99),
                    "p999": ms(0.999),
                    "max": round(h.max() as f64 / 1000.0, 3),
                });
            }
            let mut out = std::io::stdout().lock();
            writeln!(out, "{v}")?;
            out.flush()?;
        }
        Ok(())
    }
}

/// Draws latency against percentile (on a "nines" scale, so that the tail is visible) as
/// an SVG file.
fn plot(path: &Path, mode: &str, h: &Histogram<u64>) -> anyhow::Result<()> {
    use plotters::prelude::*;
    // x = -log10(1 - q): 0 at p0, 1 at p90, 2 at p99, 3 at p99.9, ...
    let mut points = Vec::new();
    let mut x = 0.0f64;
    while x <= 5.0 {
        let q = 1.0 - 10f64.powf(-x);
        points.push((x, h.value_at_quantile(q) as f64 / 1000.0));
        x += 0.02;
    }
    let top = (h.max() as f64 / 1000.0).max(0.001) * 1.1;
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("weir bench {mode}: latency by percentile"),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..5f64, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (ms)")
        .x_labels(6)
        .x_label_formatter(&|x| match x.round() as i32 {
            0 => "0".into(),
            1 => "90".into(),
            2 => "99".into(),
            3 => "99.9".into(),
            4 => "99.99".into(),
            _ => "99.999".into(),
        })
        .draw()?;
    chart.draw_series(LineSeries::new(points, BLUE.stroke_width(2)))?;
    root.present()?;
    Ok(())
}

/// Shows acknowledged (or received) records against the total on stderr.
fn progress(total: u64, done: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} records, {per_sec}, {elapsed_precise}",
        )
        .expect("a valid progress template"),
    );
    tokio::spawn(async move {
        loop {
            let n = done.load(Ordering::Relaxed);
            bar.set_position(n.min(total));
            if n >= total {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bar.finish_and_clear();
    })
}

// ---------------------------------------------------------------------------------------
// produce

/// Values to send, used in turn: random letters of `size` bytes, or the lines of a file.
///
/// They live as long as the process (leaked into `'static` Bytes): cloning a static Bytes
/// touches no reference count, while shared counts of a few values, cloned and dropped by
/// every producer task on both cores, cost ~5% of the client's CPU in W6.
fn payloads(size: usize, file: Option<&Path>) -> anyhow::Result<Vec<Bytes>> {
    let forever = |v: Vec<u8>| Bytes::from_static(Box::leak(v.into_boxed_slice()));
    if let Some(path) = file {
        let f = std::fs::File::open(path)
            .with_context(|| format!("opening --payload-file {}", path.display()))?;
        let mut out = Vec::new();
        for line in std::io::BufReader::new(f).split(b'\n') {
            let mut line = line?;
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if !line.is_empty() {
                out.push(forever(line));
            }
        }
        if out.is_empty() {
            return Err(usage(format!(
                "--payload-file {} has no non-empty line",
                path.display()
            )));
        }
        return Ok(out);
    }
    // A few distinct values, so that compression sees realistic (not constant) data.
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    Ok((0..64)
        .map(|_| forever((0..size).map(|_| rng.u8(b'A'..=b'Z')).collect()))
        .collect())
}

/// Waits until record `sent` is due at `rate` records/s from `start`.
async fn pace(start: Instant, sent: u64, rate: f64) {
    let due = start + Duration::from_secs_f64(sent as f64 / rate);
    let now = Instant::now();
    if due > now + Duration::from_micros(500) {
        tokio::time::sleep_until(due.into()).await;
    }
}

/// What the producers' acknowledgements add up to: counts, the first error, and the
/// send-to-acknowledgement latency of each record (its token is its send time).
struct Acks {
    base: Instant,
    tally: Tally,
    latency: Mutex<Histogram<u64>>,
    done: AtomicU64,
}

impl DeliveryListener for Acks {
    fn on_delivery(&self, sent_at: u64, result: weir_client::Result<RecordMetadata>) {
        if result.is_ok() {
            let now = self.base.elapsed().as_nanos() as u64;
            let us = (now.saturating_sub(sent_at) / 1000).max(1);
            if let Ok(mut h) = self.latency.lock() {
                h.saturating_record(us);
            }
        }
        self.tally.count(&result);
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Tally {
    acked: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Tally {
    fn count(&self, result: &weir_client::Result<RecordMetadata>) {
        match result {
            Ok(_) => {
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut f) = self.first_error.lock() {
                    f.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }

    /// An error naming how many of `total` records failed, and the first failure.
    fn check(&self, total: u64) -> anyhow::Result<()> {
        let failed = self.failed.load(Ordering::Relaxed);
        if failed == 0 {
            return Ok(());
        }
        let first = self
            .first_error
            .lock()
            .ok()
            .and_then(|f| f.clone())
            .unwrap_or_default();
        bail!("{failed} of {total} records failed (first: {first})")
    }
}

impl DeliveryListener for Tally {
    fn on_delivery(&self, _token: u64, result: weir_client::Result<RecordMetadata>) {
        self.count(&result);
    }
}

/// CPU seconds our own broker used since `before`.
fn broker_cpu_since(own: &Option<OwnBroker>, before: Option<f64>) -> Option<f64> {
    own.as_ref()
        .and_then(OwnBroker::cpu_seconds)
        .zip(before)
        .map(|(now, before)| now - before)
}

async fn produce(a: ProduceArgs) -> anyhow::Result<()> {
    if a.records == 0 {
        return Err(usage("--records must be at least 1"));
    }
    if a.producers == 0 {
        return Err(usage("--producers must be at least 1"));
    }
    if a.partitions < 1 {
        return Err(usage("--partitions must be at least 1"));
    }
    if a.rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        return Err(usage(
            "--rate must be a positive number of records per second",
        ));
    }
    let values = payloads(a.record_size, a.payload_file.as_deref())?;
    let (own, bootstrap) = broker(&a.common)?;
    ensure_topic(&bootstrap, &a.topic, a.partitions).await?;
    let props = settings(
        &bootstrap,
        &[
            ("client.id", "weir-bench".into()),
            ("compression.type", a.compression.clone()),
            ("acks", a.acks.clone()),
            ("batch.size", a.batch_size.to_string()),
            ("linger.ms", a.linger_ms.to_string()),
        ],
        &a.common,
    )?;
    let producers = (0..a.producers)
        .map(|_| Producer::from_properties(props.clone()).map_err(|e| usage(e.to_string())))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let outcomes = Arc::new(Acks {
        base: Instant::now(),
        tally: Tally::default(),
        latency: Mutex::new(histogram()),
        done: AtomicU64::new(0),
    });
    let listener: Arc<dyn DeliveryListener> = outcomes.clone();
    let done = Arc::new(AtomicU64::new(0));
    let bar = progress(a.records, done.clone());
    let topic: Arc<str> = a.topic.as_str().into();
    let values = Arc::new(values);
    let cpu0 = own_cpu_seconds();
    let broker_cpu0 = own.as_ref().and_then(OwnBroker::cpu_seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    // Copies the acknowledged count to the progress bar's counter.
    let ticker = {
        let (outcomes, done) = (outcomes.clone(), done.clone());
        tokio::spawn(async move {
            loop {
                done.store(outcomes.done.load(Ordering::Relaxed), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    for (k, producer) in producers.into_iter().enumerate() {
        // Records k, k+K, k+2K, ... go through producer k.
        let share =
            a.records / a.producers as u64 + u64::from((k as u64) < a.records % a.producers as u64);
        let rate = a.rate.map(|r| r / a.producers as f64);
        let (listener, topic, values, base) = (
            listener.clone(),
            topic.clone(),
            values.clone(),
            outcomes.base,
        );
        tasks.push(tokio::spawn(async move {
            for i in 0..share {
                if let Some(rate) = rate {
                    pace(start, i, rate).await;
                }
                let value = values[(i as usize + k) % values.len()].clone();
                let mut record = ProducerRecord::new(topic.clone());
                record.value = Some(value);
                // The token is the send time, so the listener can tell each latency.
                let sent_at = base.elapsed().as_nanos() as u64;
                let r = producer
                    .send_with_listener(record, &listener, sent_at)
                    .await;
                if let Err(e) = r {
                    let _ = producer.close(Duration::from_secs(5)).await;
                    return Err(anyhow!("record {i} was not sent: {e}"));
                }
            }
            producer.flush().await.map_err(|e| anyhow!("{e}"))?;
            let requests = producer.request_latency();
            producer
                .close(Duration::from_secs(30))
                .await
                .map_err(|e| anyhow!("{e}"))?;
            Ok(requests)
        }));
    }
    let mut failure = None;
    let mut request_latency = histogram();
    for t in tasks {
        match t.await {
            Ok(Ok(h)) => {
                let _ = request_latency.add(&h);
            }
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(anyhow!("a producer task failed: {e}"))),
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu = own_cpu_seconds() - cpu0;
    let broker_cpu = broker_cpu_since(&own, broker_cpu0);
    ticker.abort();
    done.store(u64::MAX, Ordering::Relaxed);
    let _ = bar.await;
    if let Some(e) = failure {
        return Err(e);
    }
    outcomes.tally.check(a.records)?;
    let acked = outcomes.tally.acked.load(Ordering::Relaxed);
    let bytes: u64 = (0..acked)
        .map(|i| values[i as usize % values.len()].len() as u64)
        .sum::<u64>();
    let latency = std::mem::replace(
        &mut *outcomes.latency.lock().unwrap_or_else(|p| p.into_inner()),
        histogram(),
    );
    let outcome = Outcome {
        mode: "produce",
        records: acked,
        bytes,
        seconds,
        latency,
        request_latency: (!request_latency.is_empty()).then_some(request_latency),
        cpu_seconds: cpu,
        broker_cpu_seconds: broker_cpu,
    };
    drop(own);
    outcome.report(&a.common)
}

// ---------------------------------------------------------------------------------------
// consume

/// Writes `n` records of `size` bytes into a new one-partition topic (before a consume run
/// on our own, empty broker).
async fn fill(bootstrap: &str, topic: &str, n: u64, size: usize) -> anyhow::Result<()> {
    ensure_topic(bootstrap, topic, 1).await?;
    eprintln!("weir bench: writing {n} records of {size} bytes to read back");
    let values = payloads(size, None)?;
    let producer = Producer::from_properties([
        ("bootstrap.servers", bootstrap),
        ("acks", "1"),
        ("linger.ms", "5"),
    ])
    .map_err(|e| anyhow!("{e}"))?;
    let tally = Arc::new(Tally::default());
    let listener: Arc<dyn DeliveryListener> = tally.clone();
    let topic: Arc<str> = topic.into();
    for i in 0..n {
        let mut record = ProducerRecord::new(topic.clone());
        record.value = Some(values[i as usize % values.len()].clone());
        producer
            .send_with_listener(record, &listener, i)
            .await
            .map_err(|e| anyhow!("filling the topic: {e}"))?;
    }
    producer.flush().await.map_err(|e| anyhow!("{e}"))?;
    producer
        .close(Duration::from_secs(30))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    tally.check(n).context("filling the topic")
}

async fn consume(a: ConsumeArgs) -> anyhow::Result<()> {
    if a.records == 0 {
        return Err(usage("--records must be at least 1"));
    }
    let (own, bootstrap) = broker(&a.common)?;
    if own.is_some() {
        fill(&bootstrap, &a.topic, a.records, a.record_size).await?;
    }
    let props = settings(
        &bootstrap,
        &[
            ("client.id", "weir-bench".into()),
            ("allow.auto.create.topics", "false".into()),
        ],
        &a.common,
    )?;
    let mut consumer = Consumer::from_properties(props).map_err(|e| usage(e.to_string()))?;
    let partitions = consumer
        .partitions_for(&a.topic)
        .await
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("reading topic '{}'", a.topic))?;
    consumer
        .assign(partitions.clone())
        .map_err(|e| anyhow!("{e}"))?;
    consumer
        .seek_to_beginning(&partitions)
        .map_err(|e| anyhow!("{e}"))?;

    let done = Arc::new(AtomicU64::new(0));
    let bar = progress(a.records, done.clone());
    let mut latency = histogram();
    let idle_limit = Duration::from_millis(a.timeout_ms);
    let cpu0 = own_cpu_seconds();
    let broker_cpu0 = own.as_ref().and_then(OwnBroker::cpu_seconds);
    let start = Instant::now();
    let mut last_data = Instant::now();
    let (mut records, mut bytes) = (0u64, 0u64);
    while records < a.records {
        let asked = Instant::now();
        let batch = consumer
            .poll(Duration::from_millis(200))
            .await
            .map_err(|e| anyhow!("{e}"))?;
        if batch.is_empty() {
            if last_data.elapsed() >= idle_limit {
                break;
            }
            continue;
        }
        latency.saturating_record((asked.elapsed().as_micros() as u64).max(1));
        last_data = Instant::now();
        for r in batch.iter().take((a.records - records) as usize) {
            bytes += r.value.as_ref().map_or(0, |v| v.len() as u64)
                + r.key.as_ref().map_or(0, |k| k.len() as u64);
            records += 1;
        }
        done.store(records, Ordering::Relaxed);
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu = own_cpu_seconds() - cpu0;
    let broker_cpu = broker_cpu_since(&own, broker_cpu0);
    done.store(u64::MAX, Ordering::Relaxed);
    let _ = bar.await;
    let _ = consumer.close_with_timeout(Duration::from_secs(5)).await;
    if records < a.records {
        bail!(
            "only {records} of {} records arrived: topic '{}' had nothing new for {} ms",
            a.records,
            a.topic,
            a.timeout_ms
        );
    }
    let outcome = Outcome {
        mode: "consume",
        records,
        bytes,
        seconds,
        latency,
        request_latency: None,
        cpu_seconds: cpu,
        broker_cpu_seconds: broker_cpu,
    };
    drop(own);
    outcome.report(&a.common)
}

// ---------------------------------------------------------------------------------------
// e2e

async fn e2e(a: E2eArgs) -> anyhow::Result<()> {
    if !(a.rate > 0.0 && a.rate.is_finite()) {
        return Err(usage(
            "--rate must be a positive number of records per second",
        ));
    }
    if !(a.seconds > 0.0 && a.seconds.is_finite()) {
        return Err(usage("--seconds must be a positive number"));
    }
    if a.record_size < 8 {
        return Err(usage(
            "--record-size must be at least 8 (the send time travels in the value)",
        ));
    }
    let total = (a.rate * a.seconds).round().max(1.0) as u64;
    let (own, bootstrap) = broker(&a.common)?;
    ensure_topic(&bootstrap, &a.topic, a.partitions).await?;
    let producer = Producer::from_properties(settings(
        &bootstrap,
        &[
            ("client.id", "weir-bench".into()),
            ("compression.type", a.compression.clone()),
            ("acks", a.acks.clone()),
            ("linger.ms", a.linger_ms.to_string()),
        ],
        &a.common,
    )?)
    .map_err(|e| usage(e.to_string()))?;
    let mut consumer = Consumer::from_properties(settings(
        &bootstrap,
        &[
            ("client.id", "weir-bench".into()),
            ("allow.auto.create.topics", "false".into()),
            // Every record as soon as it is there.
            ("fetch.min.bytes", "1".into()),
        ],
        &a.common,
    )?)
    .map_err(|e| usage(e.to_string()))?;
    let partitions: Vec<TopicPartition> = consumer
        .partitions_for(&a.topic)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    consumer
        .assign(partitions.clone())
        .map_err(|e| anyhow!("{e}"))?;
    // Only what this run sends: start at the current end of every partition.
    let ends = consumer
        .end_offsets(&partitions)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    for (tp, end) in &ends {
        consumer.seek(tp, *end).map_err(|e| anyhow!("{e}"))?;
    }
    // Positions are resolved before the clock starts.
    for tp in &partitions {
        consumer.position(tp).await.map_err(|e| anyhow!("{e}"))?;
    }

    let base = Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    let bar = progress(total, done.clone());
    let cpu0 = own_cpu_seconds();
    let broker_cpu0 = own.as_ref().and_then(OwnBroker::cpu_seconds);
    let received = done.clone();
    let reader = tokio::spawn(async move {
        let mut latency = histogram();
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut last_data = Instant::now();
        while n < total {
            let batch = consumer.poll(Duration::from_millis(100)).await?;
            let now = base.elapsed().as_nanos() as u64;
            if batch.is_empty() {
                if last_data.elapsed() > Duration::from_secs(10) {
                    break;
                }
                continue;
            }
            last_data = Instant::now();
            for r in &batch {
                let Some(v) = r.value.as_ref().filter(|v| v.len() >= 8) else {
                    continue;
                };
                let sent = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
                latency.saturating_record((now.saturating_sub(sent) / 1000).max(1));
                bytes += v.len() as u64;
                n += 1;
            }
            received.store(n, Ordering::Relaxed);
        }
        let _ = consumer.close_with_timeout(Duration::from_secs(5)).await;
        Ok::<_, weir_client::ClientError>((n, bytes, latency))
    });

    let tally = Arc::new(Tally::default());
    let listener: Arc<dyn DeliveryListener> = tally.clone();
    let filler: Vec<u8> = (0..a.record_size - 8)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let start = Instant::now();
    let topic: Arc<str> = a.topic.as_str().into();
    for i in 0..total {
        pace(start, i, a.rate).await;
        let mut value = Vec::with_capacity(a.record_size);
        value.extend_from_slice(&(base.elapsed().as_nanos() as u64).to_be_bytes());
        value.extend_from_slice(&filler);
        let mut record = ProducerRecord::new(topic.clone());
        record.value = Some(value.into());
        producer
            .send_with_listener(record, &listener, i)
            .await
            .map_err(|e| anyhow!("record {i} was not sent: {e}"))?;
    }
    producer.flush().await.map_err(|e| anyhow!("{e}"))?;
    let _ = producer.close(Duration::from_secs(30)).await;
    let (n, bytes, latency) = reader
        .await
        .map_err(|e| anyhow!("the consumer task failed: {e}"))?
        .map_err(|e| anyhow!("consuming: {e}"))?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu = own_cpu_seconds() - cpu0;
    let broker_cpu = broker_cpu_since(&own, broker_cpu0);
    done.store(u64::MAX, Ordering::Relaxed);
    let _ = bar.await;
    tally.check(total)?;
    if n < total {
        bail!("{total} records were acknowledged but only {n} arrived at the consumer");
    }
    let outcome = Outcome {
        mode: "e2e",
        records: n,
        bytes,
        seconds,
        latency,
        request_latency: None,
        cpu_seconds: cpu,
        broker_cpu_seconds: broker_cpu,
    };
    drop(own);
    outcome.report(&a.common)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_of_this_process_is_read_from_proc() {
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let proc = process_cpu_seconds(std::process::id()).expect("/proc is readable");
        assert!(proc >= 0.0);
        assert!(own_cpu_seconds() > 0.0);
    }

    #[test]
    fn payloads_are_sized_or_read_from_lines() {
        let p = payloads(100, None).unwrap();
        assert!(p
            .iter()
            .all(|v| v.len() == 100 && v.iter().all(u8::is_ascii_uppercase)));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("events.json");
        std::fs::write(&f, b"{\"a\":1}\r\n\n{\"b\":2}").unwrap();
        let p = payloads(100, Some(&f)).unwrap();
        assert_eq!(p, vec![Bytes::from("{\"a\":1}"), Bytes::from("{\"b\":2}")]);
        std::fs::write(&f, b"\n\n").unwrap();
        assert!(payloads(100, Some(&f)).is_err());
    }
}
