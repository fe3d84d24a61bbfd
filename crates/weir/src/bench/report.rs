//! How a run is measured and shown: its clocks, a progress bar on stderr while it runs,
//! and at the end the summary on stderr, the JSON line on stdout and the SVG plot. It runs
//! no clients: the modes read the clocks and hand it an `Outcome`.

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

/// What a run measured, as the summary, the JSON line and the plot show it.
pub(super) struct Outcome {
    pub(super) mode: &'static str,
    pub(super) records: u64,
    pub(super) bytes: u64,
    pub(super) latency: Histogram<u64>,
    /// Produce only: the round trips of the Produce requests (without the time records
    /// waited in their batches), the figure comparable to a request-level load generator.
    pub(super) request_latency: Option<Histogram<u64>>,
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
            cpu_seconds,
            broker_cpu_seconds
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
                "seconds": round(seconds, 4),
                "records_per_sec": round(rate, 1),
                "mb_per_sec": round(mb, 3),
                "latency_ms": {
                    "p50": round(ms(0.5), 3),
                    "p99": round(ms(0.99), 3),
                    "p999": round(ms(0.999), 3),
                    "max": round(max, 3),
                },
                "cpu_seconds": round(cpu_seconds, 3),
            });
            if let Some(b) = broker_cpu_seconds {
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
