//! Log lines that a flood would repeat (refused connections, refused auto-creations): at
//! most one a second per kind, saying how many were left out since. It owns no log line
//! itself and decides nothing but whether to write one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One kind of log line, written at most once per `every`.
pub struct ThrottledLog {
    every: Duration,
    last: Mutex<Option<Instant>>,
    left_out: AtomicU64,
}

impl ThrottledLog {
    pub const fn new(every: Duration) -> ThrottledLog {
        ThrottledLog {
            every,
            last: Mutex::new(None),
            left_out: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a line is due now, `n` being how many were left out since the last
    /// one; `None` when this one is to be left out.
    pub fn due(&self, now: Instant) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match *last {
            Some(at) if now.saturating_duration_since(at) < self.every => {
                self.left_out.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(self.left_out.swap(0, Ordering::Relaxed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_counting_the_rest() {
        let log = ThrottledLog::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(log.due(t0), Some(0));
        for i in 1..=500 {
            assert_eq!(log.due(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(log.due(t0 + Duration::from_millis(1000)), Some(500));
        assert_eq!(log.due(t0 + Duration::from_millis(1001)), None);
    }
}
