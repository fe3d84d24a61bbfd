//! What each partition log reports for the broker to publish: sizes, offsets, and a
//! histogram of flush (fsync) times. Plain numbers; publishing is the broker's business.

/// Bucket upper bounds for flush times, in microseconds (the last bucket is unbounded).
pub const FLUSH_BUCKETS_US: [u64; 12] = [
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    100_000,
    1_000_000,
    u64::MAX,
];

/// A fixed-bucket histogram of durations in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    pub counts: [u64; FLUSH_BUCKETS_US.len()],
    pub sum_us: u64,
    pub count: u64,
}

impl Histogram {
    pub fn record(&mut self, us: u64) {
        let i = FLUSH_BUCKETS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(FLUSH_BUCKETS_US.len() - 1);
        self.counts[i] += 1;
        self.sum_us += us;
        self.count += 1;
    }
}

/// A snapshot of one partition log.
#[derive(Debug, Clone, PartialEq)]
pub struct LogMetrics {
    pub size_bytes: u64,
    pub num_segments: usize,
    pub index_bytes: u64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub recovery_point: i64,
    /// Compaction backlog: bytes after the cleaner's checkpoint, and the age of the oldest
    /// uncleaned record in ms (0 when not compacted).
    pub cleaner_dirty_bytes: u64,
    pub cleaner_lag_ms: i64,
    pub flush_time: Histogram,
}
