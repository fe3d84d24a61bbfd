//! The producer's memory (Kafka's `BufferPool`): `buffer.memory` bytes in all, handed out
//! as batch buffers. Buffers of exactly `batch.size` are kept on a free list and reused
//! without allocating; other sizes are freed and their bytes counted back. When memory is
//! gone, callers wait in FIFO order — the head of the queue gathers memory as it is
//! released — for at most `max.block.ms`, then fail. This is the backpressure users see.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::{ClientError, Result};

struct Waiter {
    id: u64,
    needed: usize,
    gathered: usize,
    notify: Arc<Notify>,
}

struct State {
    /// Reusable buffers of exactly `poolable_size` capacity.
    free: VecDeque<Vec<u8>>,
    /// Bytes not in the free list and not handed out.
    non_pooled_available: usize,
    waiters: VecDeque<Waiter>,
    next_waiter: u64,
}

/// The producer's bounded memory.
pub struct BufferPool {
    total: usize,
    poolable_size: usize,
    state: Mutex<State>,
}

impl BufferPool {
    pub fn new(total: usize, poolable_size: usize) -> Self {
        BufferPool {
            total,
            poolable_size,
            state: Mutex::new(State {
                free: VecDeque::new(),
                non_pooled_available: total,
                waiters: VecDeque::new(),
                next_waiter: 0,
            }),
        }
    }

    pub fn total_memory(&self) -> usize {
        self.total
    }

    pub fn poolable_size(&self) -> usize {
        self.poolable_size
    }

    /// Memory not handed out (free buffers and unallocated bytes).
    pub fn available_memory(&self) -> usize {
        self.state
            .lock()
            .map(|s| s.non_pooled_available + s.free.len() * self.poolable_size)
            .unwrap_or(0)
    }

    /// Callers waiting for memory (the accumulator treats this as a reason to send).
    pub fn queued(&self) -> usize {
        self.state.lock().map(|s| s.waiters.len()).unwrap_or(0)
    }

    /// Frees buffers from the free list until `size` bytes are available unpooled.
    fn free_up(&self, s: &mut State, size: usize) {
        while s.non_pooled_available < size {
            match s.free.pop_back() {
                Some(b) => {
                    s.non_pooled_available += b.capacity();
                    drop(b);
                }
                None => break,
            }
        }
    }

    /// A buffer of at least `size` bytes (capacity exactly `size`), waiting up to
    /// `max_block` for memory.
    pub async fn allocate(&self, size: usize, max_block: Duration) -> Result<Vec<u8>> {
        if size > self.total {
            return Err(ClientError::RecordTooLarge {
                size,
                limit: self.total,
                setting: "buffer.memory",
            });
        }
        let (id, notify) = {
            let mut s = self.state.lock().map_err(|_| ClientError::Closed)?;
            if s.waiters.is_empty() {
                if size == self.poolable_size {
                    if let Some(mut b) = s.free.pop_front() {
                        b.clear();
                        return Ok(b);
                    }
                }
                let free_bytes = s.free.len() * self.poolable_size;
                if s.non_pooled_available + free_bytes >= size {
                    self.free_up(&mut s, size);
                    s.non_pooled_available -= size;
                    drop(s);
                    return Ok(Vec::with_capacity(size));
                }
            }
            let id = s.next_waiter;
            s.next_waiter += 1;
            let notify = Arc::new(Notify::new());
            s.waiters.push_back(Waiter {
                id,
                needed: size,
                gathered: 0,
                notify: notify.clone(),
            });
            (id, notify)
        };
        let deadline = tokio::time::Instant::now() + max_block;
        loop {
            // The head waiter takes what it can each time memory comes back.
            {
                let mut s = self.state.lock().map_err(|_| ClientError::Closed)?;
                let head = s
                    .waiters
                    .front()
                    .filter(|w| w.id == id)
                    .map(|w| (w.gathered, w.needed));
                if let Some((gathered, needed)) = head {
                    let need_whole_buffer = gathered == 0 && needed == self.poolable_size;
                    if need_whole_buffer {
                        if let Some(mut b) = s.free.pop_front() {
                            b.clear();
                            s.waiters.pop_front();
                            Self::wake_head(&s);
                            return Ok(b);
                        }
                    }
                    let remaining = needed - gathered;
                    self.free_up(&mut s, remaining);
                    let take = remaining.min(s.non_pooled_available);
                    s.non_pooled_available -= take;
                    let gathered = gathered + take;
                    if let Some(w) = s.waiters.front_mut() {
                        w.gathered = gathered;
                    }
                    if gathered == needed {
                        s.waiters.pop_front();
                        Self::wake_head(&s);
                        drop(s);
                        return Ok(Vec::with_capacity(size));
                    }
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline
                || tokio::time::timeout(deadline - now, notify.notified())
                    .await
                    .is_err()
            {
                // Timed out: give back what was gathered and leave the queue.
                let mut s = self.state.lock().map_err(|_| ClientError::Closed)?;
                if let Some(w) = s
                    .waiters
                    .iter()
                    .position(|w| w.id == id)
                    .and_then(|pos| s.waiters.remove(pos))
                {
                    s.non_pooled_available += w.gathered;
                }
                Self::wake_head(&s);
                return Err(ClientError::BufferExhausted {
                    needed: size,
                    ms: max_block.as_millis() as u64,
                });
            }
        }
    }

    fn wake_head(s: &State) {
        if let Some(w) = s.waiters.front() {
            w.notify.notify_one();
        }
    }

    /// Returns a buffer: one of `batch.size` capacity goes back on the free list, any other
    /// is freed and its bytes counted back. The first waiter is woken.
    pub fn deallocate(&self, buf: Vec<u8>) {
        let Ok(mut s) = self.state.lock() else { return };
        if buf.capacity() == self.poolable_size {
            s.free.push_back(buf);
        } else {
            s.non_pooled_available += buf.capacity();
        }
        Self::wake_head(&s);
    }

    /// Returns `size` bytes that were allocated but whose buffer was given away (for
    /// example a batch compressed into a new buffer).
    pub fn deallocate_bytes(&self, size: usize) {
        let Ok(mut s) = self.state.lock() else { return };
        s.non_pooled_available += size;
        Self::wake_head(&s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test]
    async fn batch_size_buffers_are_reused_without_allocation() {
        let pool = BufferPool::new(1024, 256);
        let a = pool.allocate(256, MS).await.unwrap();
        let ptr = a.as_ptr();
        assert_eq!(pool.available_memory(), 768);
        pool.deallocate(a);
        assert_eq!(pool.available_memory(), 1024);
        let b = pool.allocate(256, MS).await.unwrap();
        assert_eq!(b.as_ptr(), ptr, "the same allocation comes back");
        assert_eq!(b.capacity(), 256);
    }

    #[tokio::test]
    async fn larger_than_memory_is_refused_at_once() {
        let pool = BufferPool::new(1024, 256);
        assert!(matches!(
            pool.allocate(2000, MS).await,
            Err(ClientError::RecordTooLarge { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn exhausted_memory_blocks_then_times_out_after_max_block() {
        let pool = BufferPool::new(512, 256);
        let _a = pool.allocate(256, MS).await.unwrap();
        let _b = pool.allocate(256, MS).await.unwrap();
        let start = tokio::time::Instant::now();
        let err = pool
            .allocate(256, Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ClientError::BufferExhausted {
                    needed: 256,
                    ms: 300
                }
            ),
            "{err}"
        );
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert_eq!(pool.queued(), 0, "a timed-out waiter leaves the queue");
    }

    #[tokio::test(start_paused = true)]
    async fn freed_memory_wakes_waiters_in_fifo_order() {
        let pool = Arc::new(BufferPool::new(512, 256));
        let a = pool.allocate(256, MS).await.unwrap();
        let b = pool.allocate(256, MS).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..3 {
            let (pool, order) = (pool.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let buf = pool.allocate(256, Duration::from_secs(10)).await.unwrap();
                order.lock().unwrap().push(i);
                buf
            }));
            tokio::time::sleep(MS).await; // queue in order 0, 1, 2
        }
        assert_eq!(pool.queued(), 3);
        pool.deallocate(a);
        let first = tasks.remove(0).await.unwrap();
        pool.deallocate(b);
        let second = tasks.remove(0).await.unwrap();
        pool.deallocate(first);
        let _third = tasks.remove(0).await.unwrap();
        pool.deallocate(second);
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_head_waiter_gathers_memory_from_several_frees() {
        let pool = Arc::new(BufferPool::new(1000, 100));
        let small: Vec<Vec<u8>> =
            futures_util::future::join_all((0..10).map(|_| pool.allocate(100, MS)))
                .await
                .into_iter()
                .map(|r| r.unwrap())
                .collect();
        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.allocate(350, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(MS).await;
        for b in small.into_iter().take(4) {
            pool.deallocate(b);
            tokio::time::sleep(MS).await;
        }
        let big = waiter.await.unwrap().unwrap();
        assert_eq!(big.capacity(), 350);
        assert_eq!(pool.available_memory(), 50);
    }
}
