//! The broker's request memory, `queued.max.request.bytes`: the bytes of request frames
//! held while they are read and handled, over every connection. When it is all taken,
//! connections wait before reading more; nothing else waits.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The broker's request memory, `queued.max.request.bytes`, counted in KiB: request
/// frames while they are read and handled. When it is all taken, connections wait before
/// reading more.
pub struct RequestMemory {
    pool: Arc<Semaphore>,
    total_kib: usize,
}

impl RequestMemory {
    pub fn new(bytes: usize) -> RequestMemory {
        let total_kib = bytes
            .div_ceil(1024)
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        RequestMemory {
            pool: Arc::new(Semaphore::new(total_kib)),
            total_kib,
        }
    }

    /// Takes `bytes` of the pool, waiting for them; one take larger than the whole pool
    /// takes all of it. `None` once the pool is closed.
    pub async fn take(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let kib = bytes.div_ceil(1024).clamp(1, self.total_kib) as u32;
        self.pool.clone().acquire_many_owned(kib).await.ok()
    }
}
