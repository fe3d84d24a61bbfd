//! How a run is measured and shown: its clocks, a progress bar on stderr while it runs,
//! and at the end the summary on stderr, the JSON line on stdout and the SVG plot. It runs
//! no clients: the modes read its clocks and return an `Outcome` for it to show.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::broker::Broker;
use super::common::Common;
use super::cpu::own_cpu_seconds;
use super::plot::plot;

/// A latency histogram in microseconds, 1 µs to 1 hour at 3 significant digits.
pub(super) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// Records the time from `sent` to `now`, nanoseconds on one clock, in a `histogram()`: in
/// microseconds, and at least 1, where the histogram starts.
pub(super) fn record_latency(h: &mut Histogram<u64>, sent: u64, now: u64) {
    h.saturating_record((now.saturating_sub(sent) / 1000).max(1));
}

/// What a run measured, as the summary, the JSON line and the plot show it.
pub(super) struct Outcome {
    pub(super) mode: &'static str,
    pub(super) records: u64,
    pub(super) bytes: u64,
    pub(super) latency: Histogram<u64>,
    /// Produce only: the round trips of the Produce requests (without the time records
    /// waited in their batches), the figure comparable to a request-level load generator.
    pub(super) request_latency: Option<Histogram<u64>>,
    /// Transactional produce only: how long each `commit_transaction` took (one entry per
    /// committed transaction).
    pub(super) commit_latency: Option<Histogram<u64>>,
    pub(super) spent: Spent,
}

impl Outcome {
    pub(super) fn report(&self, common: &Common) -> anyhow::Result<()> {
        let Spent {
            seconds,
            cpu_seconds,
            broker_cpu_seconds,
        } = self.spent;
        let rate = self.records as f64 / seconds;
        let mb = self.bytes as f64 / (1024.0 * 1024.0) / seconds;
        let latency = Percentiles::of(&self.latency);
        let requests = self
            .request_latency
            .as_ref()
            .map(|h| (h.len(), Percentiles::of(h)));
        eprintln!(
            "{} records {}, {rate:.1} records/sec ({mb:.2} MB/sec), latency {latency}; \
             {cpu_seconds:.2} s CPU in the client{}",
            self.records,
            match self.mode {
                "produce" => "sent",
                "consume" => "consumed",
                _ => "sent and received",
            },
            broker_cpu_seconds
                .map(|b| format!(", {b:.2} s in the broker"))
                .unwrap_or_default()
        );
        if let Some((n, round_trip)) = &requests {
            eprintln!("Produce requests: {n}, round trip {round_trip}");
        }
        let commits = self
            .commit_latency
            .as_ref()
            .map(|h| (h.len(), Percentiles::of(h)));
        if let Some((n, took)) = &commits {
            eprintln!("Transactions committed: {n}, commit_transaction {took}");
        }
        if let Some(path) = &common.plot {
            plot(path, self.mode, &self.latency)?;
            eprintln!(
                "weir bench: latency distribution drawn in {}",
                path.display()
            );
        }
        if common.json {
            let mut v = serde_json::json!({
                "records": self.records,
                "seconds": round(seconds, 4),
                "records_per_sec": round(rate, 1),
                "mb_per_sec": round(mb, 3),
                "latency_ms": latency.json(),
                "cpu_seconds": round(cpu_seconds, 3),
            });
            if let Some(b) = broker_cpu_seconds {
                v["broker_cpu_seconds"] = serde_json::json!(round(b, 3));
            }
            if let Some((_, round_trip)) = &requests {
                v["request_latency_ms"] = round_trip.json();
            }
            if let Some((n, took)) = &commits {
                v["transactions"] = serde_json::json!(n);
                v["commit_latency_ms"] = took.json();
            }
            let mut out = std::io::stdout().lock();
            writeln!(out, "{v}")?;
            out.flush()?;
        }
        Ok(())
    }
}

/// What the summary and the JSON line say of a latency histogram, in milliseconds.
struct Percentiles {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        let ms = |us: u64| us as f64 / 1000.0;
        Percentiles {
            p50: ms(h.value_at_quantile(0.5)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }

    /// `{"p50","p99","p999","max"}`, to the microsecond.
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "p50": round(self.p50, 3),
            "p99": round(self.p99, 3),
            "p999": round(self.p999, 3),
            "max": round(self.max, 3),
        })
    }
}

impl std::fmt::Display for Percentiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms",
            self.p50, self.p99, self.p999, self.max
        )
    }
}

/// `x` rounded to `digits` decimal places, for the JSON line.
fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// The clocks a run is measured by, read when it starts and again when it ends: wall time,
/// this process's CPU, and our own broker's.
pub(super) struct Meter {
    pub(super) start: Instant,
    cpu: f64,
    broker_cpu: Option<f64>,
}

/// What a run took: wall time, and CPU in the client and (when it is our own) the broker.
#[derive(Clone, Copy)]
pub(super) struct Spent {
    pub(super) seconds: f64,
    pub(super) cpu_seconds: f64,
    pub(super) broker_cpu_seconds: Option<f64>,
}

impl Meter {
    pub(super) fn start(broker: &Broker) -> Meter {
        let cpu = own_cpu_seconds();
        let broker_cpu = broker.cpu_seconds();
        Meter {
            start: Instant::now(),
            cpu,
            broker_cpu,
        }
    }

    pub(super) fn stop(&self, broker: &Broker) -> Spent {
        let seconds = self.start.elapsed().as_secs_f64();
        let cpu_seconds = own_cpu_seconds() - self.cpu;
        let broker_cpu_seconds = broker
            .cpu_seconds()
            .zip(self.broker_cpu)
            .map(|(now, before)| now - before);
        Spent {
            seconds,
            cpu_seconds,
            broker_cpu_seconds,
        }
    }
}

/// Shows acknowledged (or received) records against the total on stderr, until the count
/// reaches the total or the run finishes.
pub(super) struct Progress {
    bar: indicatif::ProgressBar,
    count: Arc<AtomicU64>,
    ticker: tokio::task::JoinHandle<()>,
}

impl Progress {
    pub(super) fn start(total: u64) -> Progress {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} records, {per_sec}, {elapsed_precise}",
            )
            .expect("a valid progress template"),
        );
        let count = Arc::new(AtomicU64::new(0));
        let ticker = tokio::spawn({
            let (bar, count) = (bar.clone(), count.clone());
            async move {
                loop {
                    let n = count.load(Ordering::Relaxed);
                    bar.set_position(n.min(total));
                    if n >= total {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                bar.finish_and_clear();
            }
        });
        Progress { bar, count, ticker }
    }

    /// The count the bar shows: whoever counts the records stores or adds into it.
    pub(super) fn count(&self) -> Arc<AtomicU64> {
        self.count.clone()
    }

    /// Clears the bar, however far the count got.
    pub(super) async fn finish(self) {
        self.ticker.abort();
        let _ = self.ticker.await;
        self.bar.finish_and_clear();
    }
}
