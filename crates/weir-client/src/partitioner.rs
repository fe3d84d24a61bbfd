//! Choosing a partition for a record, as Kafka's Java producer does, so that a key lands on
//! the same partition whichever client wrote it: murmur2 of the key for keyed records, and
//! for records without a key the uniform sticky partitioner of KIP-794 (stick to one
//! partition until about `batch.size` bytes went to it, then pick the next one at random,
//! favouring partitions with shorter queues). `Partitioner` lets users plug in their own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Kafka's murmur2 (`Utils.murmur2`), bit for bit.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ len as u32;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    match tail.len() {
        3 => {
            h ^= (tail[2] as u32) << 16;
            h ^= (tail[1] as u32) << 8;
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        2 => {
            h ^= (tail[1] as u32) << 8;
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        1 => {
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`.
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition Kafka's default partitioner gives a key.
pub fn partition_for_key(key: &[u8], num_partitions: usize) -> usize {
    (to_positive(murmur2(key)) as usize) % num_partitions.max(1)
}

/// A user's partitioner. Returning `None` leaves the choice to the built-in sticky one.
pub trait Partitioner: Send + Sync {
    fn partition(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        num_partitions: usize,
    ) -> Option<usize>;
}

/// Kafka's default: murmur2 of the key (unless `partitioner.ignore.keys`), else sticky.
#[derive(Debug, Default)]
pub struct DefaultPartitioner {
    pub ignore_keys: bool,
}

impl Partitioner for DefaultPartitioner {
    fn partition(
        &self,
        _topic: &str,
        key: Option<&[u8]>,
        _value: Option<&[u8]>,
        n: usize,
    ) -> Option<usize> {
        match key {
            Some(k) if !self.ignore_keys => Some(partition_for_key(k, n)),
            _ => None,
        }
    }
}

/// Kafka's `RoundRobinPartitioner`: each record to the next partition, keys ignored.
#[derive(Debug, Default)]
pub struct RoundRobinPartitioner {
    counters: Mutex<HashMap<String, u32>>,
}

impl Partitioner for RoundRobinPartitioner {
    fn partition(
        &self,
        topic: &str,
        _key: Option<&[u8]>,
        _value: Option<&[u8]>,
        n: usize,
    ) -> Option<usize> {
        let mut c = self.counters.lock().ok()?;
        let counter = c.entry(topic.to_string()).or_insert(0);
        let p = *counter as usize % n.max(1);
        *counter = counter.wrapping_add(1);
        Some(p)
    }
}

/// One topic's sticky choice (KIP-794's per-topic state), kept by the producer with the
/// topic so that a record finds it without a lookup. Atomics, not a lock: it is read for
/// every record without a key; concurrent senders to one topic may both count their bytes
/// or both switch, which only moves the switch by a record, as in Kafka.
#[derive(Debug)]
pub struct StickyPartition {
    /// The partition records stick to; `NONE` before the first choice.
    partition: AtomicUsize,
    produced_bytes: AtomicUsize,
}

impl StickyPartition {
    const NONE: usize = usize::MAX;
}

impl Default for StickyPartition {
    fn default() -> Self {
        StickyPartition {
            partition: AtomicUsize::new(Self::NONE),
            produced_bytes: AtomicUsize::new(0),
        }
    }
}

/// KIP-794's uniform sticky partitioner for records without a key.
#[derive(Debug)]
pub struct BuiltInPartitioner {
    sticky_batch_size: usize,
    adaptive: bool,
    rng_seed: AtomicU32,
}

impl BuiltInPartitioner {
    pub fn new(batch_size: usize, adaptive: bool) -> Self {
        BuiltInPartitioner {
            sticky_batch_size: batch_size.max(1),
            adaptive,
            rng_seed: AtomicU32::new(fastrand::u32(..)),
        }
    }

    /// The partition to use now for a topic of `n` partitions: the sticky one while
    /// `available` says it has a leader, else a new choice. `load` gives, per partition,
    /// the batches waiting for it (`None`: no leader); it is asked for only when choosing,
    /// as Kafka's `BuiltInPartitioner` looks at queues only when it switches: this runs
    /// for every record without a key.
    pub fn partition<L: Fn(usize) -> Option<usize>>(
        &self,
        sticky: &StickyPartition,
        n: usize,
        available: impl Fn(usize) -> bool,
        load: impl FnOnce() -> L,
    ) -> usize {
        let current = sticky.partition.load(Ordering::Relaxed);
        if current != StickyPartition::NONE && current < n && available(current) {
            return current;
        }
        let p = self.next_partition(n, &load());
        sticky.partition.store(p, Ordering::Relaxed);
        sticky.produced_bytes.store(0, Ordering::Relaxed);
        p
    }

    /// Counts bytes appended to the sticky partition; switches after `batch.size` bytes when
    /// `batch_full` (the partition's last batch is full), or after twice that regardless.
    pub fn update<L: Fn(usize) -> Option<usize>>(
        &self,
        sticky: &StickyPartition,
        partition: usize,
        appended_bytes: usize,
        batch_full: bool,
        n: usize,
        load: impl FnOnce() -> L,
    ) {
        if sticky.partition.load(Ordering::Relaxed) != partition {
            return;
        }
        let produced = sticky
            .produced_bytes
            .fetch_add(appended_bytes, Ordering::Relaxed)
            + appended_bytes;
        if (produced >= self.sticky_batch_size && batch_full)
            || produced >= 2 * self.sticky_batch_size
        {
            sticky
                .partition
                .store(self.next_partition(n, &load()), Ordering::Relaxed);
            sticky.produced_bytes.store(0, Ordering::Relaxed);
        }
    }

    fn random(&self, n: usize) -> usize {
        // A cheap per-partitioner generator: xorshift over an atomic seed.
        let mut x = self.rng_seed.load(Ordering::Relaxed) | 1;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng_seed.store(x, Ordering::Relaxed);
        x as usize % n.max(1)
    }

    /// A partition with a leader, drawn with weight `longest queue + 1 - its queue` when
    /// adaptive (so equal queues give a uniform draw), uniformly otherwise. Two passes over
    /// the partitions and no allocation: at 1,000 partitions this runs once a batch.
    fn next_partition(&self, n: usize, load: &impl Fn(usize) -> Option<usize>) -> usize {
        let (mut count, mut longest, mut shortest) = (0usize, 0usize, usize::MAX);
        for q in (0..n).filter_map(load) {
            count += 1;
            longest = longest.max(q);
            shortest = shortest.min(q);
        }
        if count == 0 {
            return self.random(n.max(1));
        }
        if self.adaptive && longest > shortest {
            let weight = |q: usize| longest + 1 - q;
            let total: usize = (0..n).filter_map(load).map(weight).sum();
            let mut pick = self.random(total);
            for (i, q) in (0..n).filter_map(|i| load(i).map(|q| (i, q))) {
                if pick < weight(q) {
                    return i;
                }
                pick -= weight(q);
            }
        }
        let mut k = self.random(count);
        for i in (0..n).filter(|i| load(*i).is_some()) {
            if k == 0 {
                return i;
            }
            k -= 1;
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Partitions out of 1000 that the Java client gives these keys (the vectors of
        // kafka-python's test_partitioner), and raw hashes from librdkafka's rdmurmur2 test.
        let partitions: &[(&[u8], usize)] = &[
            (b"", 681),
            (b"a", 524),
            (b"ab", 434),
            (b"abc", 107),
            (b"123456789", 566),
            (b"\x00 ", 742),
        ];
        for (key, want) in partitions {
            assert_eq!(partition_for_key(key, 1000), *want, "partition of {key:?}");
        }
        let hashes: &[(&[u8], u32)] = &[
            (b"kafka", 0xd067_cf64),
            (b"giberish123456789", 0x8f55_2b0c),
            (b"", 0x106e_08d9),
        ];
        for (key, want) in hashes {
            assert_eq!(murmur2(key) as u32, *want, "murmur2({key:?})");
        }
    }

    #[test]
    fn keyed_records_follow_murmur2() {
        let p = DefaultPartitioner::default();
        for i in 0..1000 {
            let key = format!("key-{i}");
            let got = p.partition("t", Some(key.as_bytes()), None, 7).unwrap();
            assert_eq!(got, (to_positive(murmur2(key.as_bytes())) % 7) as usize);
        }
        assert_eq!(p.partition("t", None, None, 7), None);
        let ignoring = DefaultPartitioner { ignore_keys: true };
        assert_eq!(ignoring.partition("t", Some(b"k"), None, 7), None);
    }

    #[test]
    fn round_robin_cycles() {
        let p = RoundRobinPartitioner::default();
        let got: Vec<usize> = (0..6)
            .map(|_| p.partition("t", Some(b"same"), None, 3).unwrap())
            .collect();
        assert_eq!(got, vec![0, 1, 2, 0, 1, 2]);
    }

    fn pick(b: &BuiltInPartitioner, t: &StickyPartition, queues: &[Option<usize>]) -> usize {
        b.partition(
            t,
            queues.len(),
            |p| queues.get(p).is_some_and(Option::is_some),
            || load(queues),
        )
    }

    fn load(queues: &[Option<usize>]) -> impl Fn(usize) -> Option<usize> + '_ {
        |p| queues.get(p).copied().flatten()
    }

    #[test]
    fn sticky_switches_after_a_batch_and_spreads_evenly() {
        let b = BuiltInPartitioner::new(1000, true);
        let t = StickyPartition::default();
        let queues = vec![Some(0); 4];
        let first = pick(&b, &t, &queues);
        b.update(&t, first, 600, true, 4, || load(&queues));
        assert_eq!(pick(&b, &t, &queues), first, "under batch.size: stays");
        b.update(&t, first, 600, false, 4, || load(&queues));
        assert_eq!(pick(&b, &t, &queues), first, "batch not full yet: stays");
        b.update(&t, first, 900, false, 4, || load(&queues));
        // 2100 bytes ≥ 2 × batch.size: switches even though the batch is not full.
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            let p = pick(&b, &t, &queues);
            counts[p] += 1;
            b.update(&t, p, 2000, true, 4, || load(&queues));
        }
        assert!(
            counts.iter().all(|c| *c > 700),
            "uniform over equal queues: {counts:?}"
        );
        // A partition without a leader is never chosen; long queues are chosen less.
        let queues = vec![Some(0), None, Some(9), Some(0)];
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            let p = pick(&b, &t, &queues);
            counts[p] += 1;
            b.update(&t, p, 2000, true, 4, || load(&queues));
        }
        assert_eq!(counts[1], 0);
        assert!(counts[2] < counts[0] / 3, "{counts:?}");
    }
}
