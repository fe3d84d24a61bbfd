//! What a run shows: a progress bar on stderr while it runs; at the end the summary on
//! stderr, the JSON line on stdout and the SVG plot. It runs no clients: the modes hand it
//! an `Outcome`.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::common::Common;
use super::plot::plot;

/// A latency histogram in microseconds, 1 µs to 1 hour at 3 significant digits.
pub(super) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

pub(super) struct Outcome {
    pub(super) mode: &'static str,
    pub(super) records: u64,
    pub(super) bytes: u64,
    pub(super) seconds: f64,
    pub(super) latency: Histogram<u64>,
    /// Produce only: the round trips of the Produce requests (without the time records
    /// waited in their batches), the figure comparable to a request-level load generator.
    pub(super) request_latency: Option<Histogram<u64>>,
    pub(super) cpu_seconds: f64,
    pub(super) broker_cpu_seconds: Option<f64>,
}

impl Outcome {
    pub(super) fn report(&self, common: &Common) -> anyhow::Result<()> {
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

/// Shows acknowledged (or received) records against the total on stderr.
pub(super) fn progress(total: u64, done: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
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
