//! Kafka's controller mutation quota (KIP-599): partitions created or deleted, counted in a
//! token bucket per quota entity that refills at its rate up to a burst of that rate times
//! `controller.quota.window.num` × `controller.quota.window.size.seconds`. The rate is the
//! `controller_mutation_rate` client quota that applies (set with AlterClientQuotas for a
//! user, a client id or both), or else `controller.mutation.rate` per principal. It only
//! answers whether a mutation may go ahead and how long to wait; nothing here knows
//! requests, topics or error codes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use weir_security::quota::Windows;

/// Buckets remembered at most before those full again are forgotten.
const REMEMBERED: usize = 1024;

/// Whose bucket a mutation counts in, and the rate it refills at.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// The bucket's name: the principal under the broker's default, else the quota
    /// entity's (user, client id) tags.
    pub key: Arc<str>,
    /// Partitions a second.
    pub rate: f64,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    rate: f64,
}

/// The token buckets of every entity that mutated topics lately.
pub struct MutationQuota {
    /// `controller.mutation.rate`: the rate where no client quota applies.
    default_rate: f64,
    /// Seconds of the quota's whole window: the burst is the rate over them.
    window_seconds: f64,
    buckets: Mutex<HashMap<Arc<str>, Bucket>>,
}

impl MutationQuota {
    /// `default_rate` partitions a second where no client quota applies.
    pub fn new(default_rate: f64, windows: Windows) -> MutationQuota {
        assert!(
            default_rate > 0.0 && default_rate.is_finite(),
            "a mutation rate of {default_rate}"
        );
        MutationQuota {
            default_rate,
            window_seconds: (windows.samples as f64) * (windows.window_ms as f64) / 1000.0,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The limit of a principal: `quota` (a client quota's rate and its entity's tags) if
    /// one applies, else the broker's default rate in a bucket of the principal's own.
    pub fn limit(&self, principal: &Arc<str>, quota: Option<(f64, String, String)>) -> Limit {
        match quota {
            Some((rate, user, client_id)) => Limit {
                key: Arc::from(format!("quota user={user} client-id={client_id}")),
                rate,
            },
            None => Limit {
                key: principal.clone(),
                rate: self.default_rate,
            },
        }
    }

    /// The most partitions a full bucket of `rate` holds.
    pub fn burst(&self, rate: f64) -> f64 {
        (rate * self.window_seconds).max(1.0)
    }

    /// Records `partitions` mutations in `limit`'s bucket if it is not empty; a request
    /// may overdraw it, and the next then waits until it has refilled, as in Kafka. `Err`
    /// is how many milliseconds until the bucket is no longer empty.
    pub fn record(&self, limit: &Limit, partitions: usize, now: Instant) -> Result<(), u32> {
        assert!(limit.rate > 0.0, "a mutation rate of {}", limit.rate);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= REMEMBERED && !buckets.contains_key(&limit.key) {
            buckets.retain(|_, b| self.refilled(b, now) < self.burst(b.rate));
        }
        let b = buckets.entry(limit.key.clone()).or_insert(Bucket {
            tokens: self.burst(limit.rate),
            at: now,
            rate: limit.rate,
        });
        b.tokens = self.refilled(b, now);
        // A quota changed since: the bucket refills at the new rate, up to its burst.
        b.rate = limit.rate;
        b.tokens = b.tokens.min(self.burst(limit.rate));
        b.at = now;
        if b.tokens < 0.0 {
            return Err(wait_ms(b.tokens, b.rate));
        }
        b.tokens -= partitions as f64;
        Ok(())
    }

    /// How many milliseconds until `limit`'s bucket is no longer empty: the throttle time
    /// its responses carry (0 when it is not empty).
    pub fn throttle_ms(&self, limit: &Limit, now: Instant) -> u32 {
        let buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        buckets
            .get(&limit.key)
            .map_or(0, |b| wait_ms(self.refilled(b, now), b.rate))
    }

    fn refilled(&self, b: &Bucket, now: Instant) -> f64 {
        let secs = now.saturating_duration_since(b.at).as_secs_f64();
        (b.tokens + secs * b.rate).min(self.burst(b.rate))
    }
}

fn wait_ms(tokens: f64, rate: f64) -> u32 {
    if tokens >= 0.0 {
        return 0;
    }
    ((-tokens / rate) * 1000.0).ceil().min(u32::MAX as f64) as u32
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

    fn principal(name: &str) -> Limit {
        quota(10.0).limit(&Arc::from(name), None)
    }

    #[test]
    fn a_burst_then_the_rate() {
        let q = quota(10.0);
        assert_eq!(q.burst(10.0), 110.0);
        let who = principal("User:ANONYMOUS");
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
        let other = principal("User:alice");
        assert!(q.record(&other, 50, t1).is_ok());
    }

    #[test]
    fn one_request_may_overdraw_and_the_next_waits_for_it() {
        let q = quota(100.0);
        let who = q.limit(&Arc::from("User:ANONYMOUS"), None);
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
            let who = q.limit(&Arc::from(format!("User:u{i}")), None);
            q.record(&who, 1, t0 + Duration::from_secs(i as u64))
                .unwrap();
        }
        assert!(q.buckets.lock().unwrap().len() <= REMEMBERED);
    }

    #[test]
    fn a_client_quota_sets_its_entity_s_rate_and_bucket() {
        let q = quota(100.0);
        let alice: Arc<str> = Arc::from("User:alice");
        // controller_mutation_rate=2 for client id "slow": a bucket of 22, shared by every
        // principal the quota entity covers.
        let slow = q.limit(&alice, Some((2.0, String::new(), "slow".into())));
        assert_eq!(slow.rate, 2.0);
        let t0 = Instant::now();
        assert!(
            q.record(&slow, 30, t0).is_ok(),
            "a full bucket takes anything"
        );
        assert_eq!(
            q.throttle_ms(&slow, t0),
            4000,
            "8 partitions over, at 2 a second"
        );
        let bob = q.limit(
            &Arc::from("User:bob"),
            Some((2.0, String::new(), "slow".into())),
        );
        assert_eq!(q.record(&bob, 1, t0), Err(4000));
        // The principal's own bucket, at the broker's default, is untouched.
        assert!(q.record(&q.limit(&alice, None), 1000, t0).is_ok());
        // The quota raised: the bucket refills at the new rate.
        let raised = q.limit(&alice, Some((8.0, String::new(), "slow".into())));
        assert_eq!(q.record(&raised, 1, t0), Err(1000));
    }
}
