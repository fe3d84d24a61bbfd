//! The broker's request memory, `queued.max.request.bytes`: the bytes of request frames
//! held while they are read and handled, over every connection, taken as the bytes arrive
//! and never on the word of a size prefix. Connections that have not yet proved
//! themselves (not yet sent a whole request, or not yet authenticated on a SASL listener)
//! may together hold only a quarter of it. When it is all taken, connections wait before
//! reading more; nothing else waits.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The share of the request memory that unproven connections may hold together: one
/// part in this many.
const UNPROVEN_SHARE: usize = 4;

/// The broker's request memory, `queued.max.request.bytes`, counted in KiB.
pub struct RequestMemory {
    pool: Arc<Semaphore>,
    total_kib: usize,
    /// What unproven connections may hold of the pool, together.
    unproven: Arc<Semaphore>,
    unproven_kib: usize,
}

/// Request memory held for one frame; given back when dropped.
#[derive(Debug, Default)]
pub struct Held {
    pool: Option<OwnedSemaphorePermit>,
    unproven: Option<OwnedSemaphorePermit>,
}

impl Held {
    /// Nothing held: a frame that was read within the connection's own read buffer.
    pub fn nothing() -> Held {
        Held::default()
    }

    /// Holds `more` too.
    pub fn merge(&mut self, more: Held) {
        for (mine, theirs) in [
            (&mut self.pool, more.pool),
            (&mut self.unproven, more.unproven),
        ] {
            match (mine.as_mut(), theirs) {
                (Some(m), Some(t)) => m.merge(t),
                (None, t) => *mine = t,
                (Some(_), None) => {}
            }
        }
    }

    /// KiB held of the whole pool.
    pub fn kib(&self) -> usize {
        self.pool.as_ref().map_or(0, |p| p.num_permits())
    }
}

impl RequestMemory {
    pub fn new(bytes: usize) -> RequestMemory {
        let max = Semaphore::MAX_PERMITS.min(u32::MAX as usize);
        let total_kib = bytes.div_ceil(1024).clamp(1, max);
        let unproven_kib = (total_kib / UNPROVEN_SHARE).max(1);
        RequestMemory {
            pool: Arc::new(Semaphore::new(total_kib)),
            total_kib,
            unproven: Arc::new(Semaphore::new(unproven_kib)),
            unproven_kib,
        }
    }

    /// Takes `bytes` of the pool, waiting for them; an unproven connection takes them from
    /// its share too (first, so that it never holds pool memory while it waits for its
    /// share). One take larger than the whole pool, or the share, takes all of it. `None`
    /// once the pool is closed.
    pub async fn take(&self, bytes: usize, proven: bool) -> Option<Held> {
        let kib = bytes.div_ceil(1024).max(1);
        let unproven = if proven {
            None
        } else {
            let k = kib.min(self.unproven_kib) as u32;
            Some(self.unproven.clone().acquire_many_owned(k).await.ok()?)
        };
        let k = kib.min(self.total_kib) as u32;
        let pool = Some(self.pool.clone().acquire_many_owned(k).await.ok()?);
        Some(Held { pool, unproven })
    }

    /// KiB of the pool free now.
    pub fn free_kib(&self) -> usize {
        self.pool.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn unproven_connections_hold_a_quarter_at_most_and_others_go_on() {
        let m = RequestMemory::new(64 << 10);
        // Unproven takes fill their quarter (16 KiB), then wait.
        let mut held = Vec::new();
        for _ in 0..16 {
            held.push(m.take(1024, false).await.unwrap());
        }
        let waiting = tokio::time::timeout(Duration::from_millis(50), m.take(1024, false)).await;
        assert!(waiting.is_err(), "a 17th unproven KiB should wait");
        // A proven connection still has the rest of the pool.
        let big = tokio::time::timeout(Duration::from_millis(50), m.take(48 << 10, true))
            .await
            .expect("the rest of the pool is free");
        assert_eq!(big.unwrap().kib(), 48);
        held.clear();
        assert_eq!(m.free_kib(), 64);
    }

    #[tokio::test]
    async fn held_memory_merges_and_is_given_back() {
        let m = RequestMemory::new(1 << 20);
        let mut h = m.take(8 << 10, false).await.unwrap();
        h.merge(m.take(8 << 10, false).await.unwrap());
        h.merge(Held::nothing());
        assert_eq!(h.kib(), 16);
        assert_eq!(m.free_kib(), 1024 - 16);
        drop(h);
        assert_eq!(m.free_kib(), 1024);
    }
}
