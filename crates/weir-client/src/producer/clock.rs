//! The clock record timestamps are read from: milliseconds since the Unix epoch, as the
//! system clock says, but read off the time stamp counter (the `quanta` crate) and put back
//! in step with the system clock once a second. A record's timestamp is read on every send,
//! and at a million sends a second the system clock's read showed in the producer's profile.
//! It must not be used to measure durations (it may step when it is put back in step).

use std::sync::atomic::{AtomicI64, Ordering};

/// How often the offset to the system clock is taken again: the counter and the system
/// clock drift apart by at most a few hundred microseconds a second (NTP slews the latter).
const RESYNC_NS: i64 = 1_000_000_000;

pub(crate) struct RecordClock {
    counter: quanta::Clock,
    /// The counter's reading the clock counts from.
    origin: u64,
    /// System time minus counter time, in nanoseconds, as of the last resync.
    offset_ns: AtomicI64,
    /// Counter time of the last resync, in nanoseconds since `origin`.
    synced_at_ns: AtomicI64,
}

fn system_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64)
}

impl RecordClock {
    pub(crate) fn new() -> Self {
        let counter = quanta::Clock::new();
        let origin = counter.raw();
        RecordClock {
            counter,
            origin,
            offset_ns: AtomicI64::new(system_ns()),
            synced_at_ns: AtomicI64::new(0),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub(crate) fn now_ms(&self) -> i64 {
        let since_origin = self.counter.delta_as_nanos(self.origin, self.counter.raw()) as i64;
        if since_origin - self.synced_at_ns.load(Ordering::Relaxed) >= RESYNC_NS {
            // Concurrent senders may both resync; each stores an offset as good as the other.
            self.offset_ns
                .store(system_ns() - since_origin, Ordering::Relaxed);
            self.synced_at_ns.store(since_origin, Ordering::Relaxed);
        }
        (since_origin + self.offset_ns.load(Ordering::Relaxed)) / 1_000_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_reads_what_the_system_clock_reads() {
        let c = RecordClock::new();
        for _ in 0..3 {
            let before = system_ns() / 1_000_000;
            let ours = c.now_ms();
            let after = system_ns() / 1_000_000;
            assert!(
                (before - 1..=after + 1).contains(&ours),
                "{before} <= {ours} <= {after}"
            );
            std::thread::sleep(std::time::Duration::from_millis(600));
        }
    }
}
