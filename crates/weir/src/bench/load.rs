//! What the producing modes send and how: the record values, the pace of a fixed rate, and
//! the tally of acknowledgements. It makes no clients and talks to no broker.

use std::io::BufRead;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;

use crate::tally::Tally;

use super::common::usage;

/// Values to send, used in turn: random letters of `size` bytes, or the lines of a file.
/// Never empty.
///
/// They live as long as the process (leaked into `'static` Bytes): cloning a static Bytes
/// touches no reference count, while shared counts of a few values, cloned and dropped by
/// every producer task on both cores, cost ~5% of the client's CPU in W6.
pub(super) fn payloads(size: usize, file: Option<&Path>) -> anyhow::Result<Vec<Bytes>> {
    let forever = |v: Vec<u8>| Bytes::from_static(Box::leak(v.into_boxed_slice()));
    if let Some(path) = file {
        let f = std::fs::File::open(path)
            .with_context(|| format!("opening --payload-file {}", path.display()))?;
        let mut out = Vec::new();
        for line in std::io::BufReader::new(f).split(b'\n') {
            let mut line =
                line.with_context(|| format!("reading --payload-file {}", path.display()))?;
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

/// Checks a --rate: a positive, finite number of records per second, as `pace` needs.
pub(super) fn check_rate(rate: f64) -> anyhow::Result<()> {
    if rate > 0.0 && rate.is_finite() {
        Ok(())
    } else {
        Err(usage(
            "--rate must be a positive number of records per second",
        ))
    }
}

/// Waits until record `sent` is due at `rate` records/s from `start`.
pub(super) async fn pace(start: Instant, sent: u64, rate: f64) {
    debug_assert!(rate > 0.0 && rate.is_finite(), "pace at {rate}/s");
    let due = start + Duration::from_secs_f64(sent as f64 / rate);
    let now = Instant::now();
    if due > now + Duration::from_micros(500) {
        tokio::time::sleep_until(due.into()).await;
    }
}

/// An error naming how many of `total` records failed, and the first failure.
pub(super) fn check_delivered(tally: &Tally, total: u64) -> anyhow::Result<()> {
    let failed = tally.failed();
    if failed == 0 {
        return Ok(());
    }
    let first = tally.first_error().map(|(_, e)| e).unwrap_or_default();
    bail!("{failed} of {total} records failed (first: {first})")
}

#[cfg(test)]
mod tests {
    use super::*;

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
