//! Kafka's controller mutation quota (KIP-599): partitions created or deleted, counted in a
//! token bucket per principal that refills at `controller.mutation.rate` partitions a
//! second up to a burst of that rate times `controller.quota.window.num` ×
//! `controller.quota.window.size.seconds`. It only answers whether a mutation may go
//! ahead and how long to wait; nothing here knows requests, topics or error codes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use weir_security::quota::Windows;

/// Principals remembered at most before those whose bucket is full again are forgotten.
const REMEMBERED: usize = 1024;

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The token buckets of every principal that mutated topics lately.
pub struct MutationQuota {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<Arc<str>, Bucket>>,
}

impl MutationQuota {
    /// `rate` partitions a second; the burst is the rate over the quota's whole windows.
    pub fn new(rate: f64, windows: Windows) -> MutationQuota {
        assert!(rate > 0.0 && rate.is_finite(), "a mutation rate of {rate}");
        let seconds = (windows.samples as f64) * (windows.window_ms as f64) / 1000.0;
        MutationQuota {
            rate,
            burst: (rate * seconds).max(1.0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    pub fn burst(&self) -> f64 {
        self.burst
    }

    /// Records `partitions` mutations of `principal` if its bucket is not empty; a request
    /// may overdraw it, and the next then waits until it has refilled, as in Kafka. `Err`
    /// is how many milliseconds until the bucket is no longer empty.
    pub fn record(&self, principal: &Arc<str>, partitions: usize, now: Instant) -> Result<(), u32> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= REMEMBERED && !buckets.contains_key(principal) {
            buckets.retain(|_, b| self.refilled(b, now) < self.burst);
        }
        let b = buckets.entry(principal.clone()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        b.tokens = self.refilled(b, now);
        b.at = now;
        if b.tokens < 0.0 {
            return Err(self.wait_ms(b.tokens));
        }
        b.tokens -= partitions as f64;
        Ok(())
    }

    /// How many milliseconds until `principal`'s bucket is no longer empty: the throttle
    /// time its responses carry (0 when it is not empty).
    pub fn throttle_ms(&self, principal: &str, now: Instant) -> u32 {
        let buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        buckets
            .get(principal)
            .map_or(0, |b| self.wait_ms(self.refilled(b, now)))
    }

    fn refilled(&self, b: &Bucket, now: Instant) -> f64 {
        let secs = now.saturating_duration_since(b.at).as_secs_f64();
        (b.tokens + secs * self.rate).min(self.burst)
    }

    fn wait_ms(&self, tokens: f64) -> u32 {
        if tokens >= 0.0 {
            return 0;
        }
        ((-tokens / self.rate) * 1000.0).ceil().min(u32::MAX as f64) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn quota(rate: f64) -> MutationQuota {
        MutationQuota::new(
            rate,
            Windows {
                samples: 11,
                window_ms: 1000,
            },
        )
    }

    #[test]
    fn a_burst_then_the_rate() {
        let q = quota(10.0);
        assert_eq!(q.burst(), 110.0);
        let who: Arc<str> = Arc::from("User:ANONYMOUS");
        let t0 = Instant::now();
        let mut accepted = 0;
        while q.record(&who, 1, t0).is_ok() {
            accepted += 1;
        }
        // The last accepted one overdraws the bucket by one.
        assert_eq!(accepted, 111);
        assert_eq!(q.throttle_ms(&who, t0), 100);
        assert_eq!(q.record(&who, 1, t0), Err(100));
        // A tenth of a second refills one partition's worth: the bucket is at 0 again.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(q.throttle_ms(&who, t1), 0);
        assert!(q.record(&who, 1, t1).is_ok());
        // Someone else has a bucket of their own.
        let other: Arc<str> = Arc::from("User:alice");
        assert!(q.record(&other, 50, t1).is_ok());
    }

    #[test]
    fn one_request_may_overdraw_and_the_next_waits_for_it() {
        let q = quota(100.0);
        let who: Arc<str> = Arc::from("User:ANONYMOUS");
        let t0 = Instant::now();
        assert!(
            q.record(&who, 5000, t0).is_ok(),
            "a full bucket takes anything"
        );
        assert_eq!(q.throttle_ms(&who, t0), 39_000);
        assert!(q.record(&who, 1, t0 + Duration::from_secs(38)).is_err());
        assert!(q.record(&who, 1, t0 + Duration::from_secs(39)).is_ok());
    }

    #[test]
    fn idle_principals_are_forgotten() {
        let q = quota(1000.0);
        let t0 = Instant::now();
        for i in 0..(REMEMBERED + 10) {
            let who: Arc<str> = Arc::from(format!("User:u{i}"));
            q.record(&who, 1, t0 + Duration::from_secs(i as u64))
                .unwrap();
        }
        assert!(q.buckets.lock().unwrap().len() <= REMEMBERED);
    }
}
