//! The broker's file descriptors: the process's limit (raised to the hard limit at
//! start-up, as servers commonly do) and the budget that splits it between connections and
//! logs, so that neither can starve the other; and the partitions the process can map.
//! Nothing here opens or closes a file: it counts and divides.

use weir_log::LogManagerConfig;

/// Memory mappings every partition needs at the least: its active segment's `.index` and
/// `.timeindex`. A partition holds no descriptor of its own (its segment files are opened
/// through the log manager's bounded cache), so what bounds the partitions a broker can
/// serve is the process's mappings (`vm.max_map_count`), not its descriptors.
pub const MAPPINGS_PER_PARTITION: usize = 2;
/// Mappings kept back for the process itself: its libraries, thread stacks, the
/// allocator's arenas.
const RESERVED_MAPPINGS: usize = 4096;
/// Linux's default `vm.max_map_count`, if it cannot be read.
const DEFAULT_MAX_MAP_COUNT: usize = 65530;

/// Descriptors kept back for the broker itself: standard streams, the runtime's epoll and
/// wake-ups, listeners, the metrics endpoint, the topics journal, checkpoint and state
/// files being rewritten, the cleaner's and a deletion's files in hand.
const RESERVED: usize = 64;
/// And for each data directory: its lock, and its checkpoint files being written.
const RESERVED_PER_DIR: usize = 4;

/// What raising the limit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    pub from: u64,
    pub to: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. Returns the limits before and
/// after, or why it could not (the soft limit is then left as it was).
// `rlim_t` is u64 on Linux and another width elsewhere.
#[allow(clippy::unnecessary_cast)]
pub fn raise_limit() -> Result<Raised, String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(format!(
                "getrlimit(RLIMIT_NOFILE): {}",
                std::io::Error::last_os_error()
            ));
        }
        let from = lim.rlim_cur as u64;
        if lim.rlim_cur >= lim.rlim_max {
            return Ok(Raised { from, to: from });
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            return Err(format!(
                "setrlimit(RLIMIT_NOFILE, {}): {}",
                lim.rlim_max,
                std::io::Error::last_os_error()
            ));
        }
        Ok(Raised {
            from,
            to: lim.rlim_cur as u64,
        })
    }
}

/// The soft `RLIMIT_NOFILE`: the descriptors this process may have open.
pub fn limit() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed to it.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    if !ok {
        // POSIX's smallest OPEN_MAX: a budget that is too small rather than too large.
        return 1024;
    }
    // RLIM_INFINITY and other huge values: more than any table of descriptors holds.
    usize::try_from(lim.rlim_cur).map_or(1 << 30, |n| n.min(1 << 30))
}

/// The descriptors of the process, divided: what the broker keeps for itself, what
/// connections may hold, and what the logs may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The soft `RLIMIT_NOFILE`.
    pub total: usize,
    pub reserved: usize,
    /// The most connections open at once: `max.connections`, or half of what is not
    /// reserved if that is less.
    pub connections: usize,
    /// What is left for the logs' files.
    pub logs: usize,
}

impl Budget {
    /// Divides `total` descriptors for a broker with `log_dirs` data directories:
    /// connections get `max_connections`, but never more than half of what is not
    /// reserved; the logs get the rest.
    pub fn new(total: usize, max_connections: usize, log_dirs: usize) -> Budget {
        let reserved = (RESERVED + RESERVED_PER_DIR * log_dirs).min(total);
        let rest = total - reserved;
        let connections = max_connections.min(rest / 2);
        Budget {
            total,
            reserved,
            connections,
            logs: rest - connections,
        }
    }

    /// The budget of this process, as its limit stands now.
    pub fn of_process(max_connections: usize, log_dirs: usize) -> Budget {
        Budget::new(limit(), max_connections, log_dirs)
    }

    /// The most partitions the process can map (see `MAPPINGS_PER_PARTITION`).
    pub fn partitions(&self) -> usize {
        partition_capacity(max_map_count())
    }
}

/// `vm.max_map_count`: the memory mappings this process may hold.
pub fn max_map_count() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_MAP_COUNT)
}

/// The partitions `max_map_count` mappings can hold, each with one segment's indexes.
pub fn partition_capacity(max_map_count: usize) -> usize {
    max_map_count.saturating_sub(RESERVED_MAPPINGS) / MAPPINGS_PER_PARTITION
}

/// The one place the logs' share of descriptors reaches the log manager's settings: the
/// log manager's cache of open segment files gets three quarters of it, and the rest is
/// left for the files the logs open for a moment (an index being resized, a checkpoint
/// being written, a directory being synced, a fetch's file still being sent).
pub fn give_logs_their_share(config: &mut LogManagerConfig, logs_share: usize) {
    config.max_open_segment_files = (logs_share / 4 * 3).max(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_get_at_most_half_and_the_logs_the_rest() {
        let b = Budget::new(1024, i32::MAX as usize, 1);
        assert_eq!(b.reserved, 68);
        assert_eq!(b.connections, 478);
        assert_eq!(b.logs, 478);
        // A lower max.connections leaves the logs more.
        let b = Budget::new(1024, 100, 1);
        assert_eq!((b.connections, b.logs), (100, 856));
        // A limit below the reserve leaves nothing to divide, and nothing underflows.
        let b = Budget::new(10, 5, 1);
        assert_eq!((b.reserved, b.connections, b.logs), (10, 0, 0));
        let mut logs = LogManagerConfig::new("/unused");
        give_logs_their_share(&mut logs, 478);
        assert_eq!(logs.max_open_segment_files, 357);
        give_logs_their_share(&mut logs, 0);
        assert_eq!(
            logs.max_open_segment_files, 1,
            "the cache holds at least one file"
        );
    }

    #[test]
    fn partitions_are_bounded_by_the_mappings_of_their_indexes() {
        assert_eq!(partition_capacity(65530), 30717);
        assert_eq!(partition_capacity(100), 0);
        assert!(max_map_count() > 0);
    }

    #[test]
    fn raising_the_limit_reaches_the_hard_limit() {
        let raised = raise_limit().unwrap();
        assert!(raised.to >= raised.from);
        assert_eq!(limit() as u64, raised.to.min(1 << 30));
    }
}
