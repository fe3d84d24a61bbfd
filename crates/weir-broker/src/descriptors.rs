//! The broker's file descriptors: the process's limit (raised to the hard limit at
//! start-up, as servers commonly do) and the budget that splits it between connections and
//! logs, so that neither can starve the other and no request is promised what the broker
//! cannot open. Nothing here opens or closes a file: it counts and divides.

use weir_log::LogManagerConfig;

/// Descriptors every partition keeps open today: its active segment's `.log`, `.index` and
/// `.timeindex`.
pub const DESCRIPTORS_PER_PARTITION: usize = 3;

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

/// How many descriptors this process has open now (Linux's `/proc/self/fd`), if it can
/// tell.
pub fn open_now() -> Option<usize> {
    // The directory's own descriptor is counted too: one more than the others.
    Some(
        std::fs::read_dir("/proc/self/fd")
            .ok()?
            .count()
            .saturating_sub(1),
    )
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

    /// The most partitions the logs' share can hold.
    pub fn partitions(&self) -> usize {
        partition_capacity(self.logs)
    }
}

/// The partitions `logs_share` descriptors can hold: every partition keeps its active
/// segment's files open, so each costs `DESCRIPTORS_PER_PARTITION`. Once segments are
/// opened lazily behind a cache of open files (fed by `give_logs_their_share`), a partition
/// no longer holds descriptors of its own, and this bound gives way to the configured ones.
pub fn partition_capacity(logs_share: usize) -> usize {
    logs_share / DESCRIPTORS_PER_PARTITION
}

/// The one place the logs' share of descriptors reaches the log manager's settings: it
/// feeds the size of the log manager's cache of open segment files, once the log manager
/// opens segment files lazily. Until then the share is kept by refusing partitions beyond
/// `partition_capacity`, and the settings are left as they are.
pub fn give_logs_their_share(config: &mut LogManagerConfig, logs_share: usize) {
    let _ = (config, logs_share);
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
        assert_eq!(b.partitions(), 159);
        // A lower max.connections leaves the logs more.
        let b = Budget::new(1024, 100, 1);
        assert_eq!((b.connections, b.logs), (100, 856));
        // A limit below the reserve leaves nothing to divide, and nothing underflows.
        let b = Budget::new(10, 5, 1);
        assert_eq!(
            (b.reserved, b.connections, b.logs, b.partitions()),
            (10, 0, 0, 0)
        );
    }

    #[test]
    fn raising_the_limit_reaches_the_hard_limit_and_counting_sees_our_files() {
        let raised = raise_limit().unwrap();
        assert!(raised.to >= raised.from);
        assert_eq!(limit() as u64, raised.to.min(1 << 30));
        // Other tests open files meanwhile: only a lower bound holds.
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(open_now().unwrap() >= 4, "stdin, stdout, stderr and f");
        drop(f);
    }
}
