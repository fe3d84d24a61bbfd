//! The bounded set of open segment (`.log`) files that every log of a `LogManager` shares:
//! a segment opens its file by path on first use and the cache closes the least recently
//! used one when it is full, fsyncing it first if it holds writes not yet flushed. It
//! does not decide when data must be durable (the partition log does) and never holds more
//! files than its capacity, except those a caller is using at that moment.
//!
//! Written by hand rather than with an LRU crate: closing a file here is I/O that must run
//! outside the shared lock and report its error to the file's owner, handles outlive the
//! cache's hold on them (a fetch's `FileSlice` keeps its `Arc<File>`), and a hit must take
//! no shared lock (LRU crates reorder a shared list on every get). So a hit only stamps its
//! own entry with the cache's clock, which ticks once per miss, and a miss picks the
//! oldest stamp: among all entries of a small cache, or among a random sample of a large
//! one (as Redis approximates LRU), so that a miss costs the same at any capacity.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// The default of `LogManagerConfig::max_open_segment_files`: half of the most common soft
/// limit on open files (1024), so that a broker that cannot raise it keeps the other half
/// for connections, its data-directory locks and the files opened for a moment (index
/// resizes, checkpoints, directory fsyncs). The broker sets it from its descriptor budget.
pub const DEFAULT_MAX_OPEN_SEGMENT_FILES: usize = 512;

/// Told of an fsync that failed while the cache closed a file (with the file's path), so
/// that the file's data directory can go offline at once, as after a failed flush.
pub type SyncErrorHook = Box<dyn Fn(&Path, &io::Error) + Send + Sync>;

/// Open segment files, at most `capacity` of them held at once.
pub struct SegmentFileCache {
    capacity: usize,
    ring: Mutex<Ring>,
    /// Ticks once per miss; a use stamps its entry with it.
    clock: AtomicU64,
    /// Files the cache holds open (those in the ring, and one being added).
    open: AtomicUsize,
    /// Files closed by the cache that a caller still holds (a fetch's slice): their
    /// descriptors close when the last holder lets go.
    lingering: Mutex<Vec<Weak<File>>>,
    on_sync_error: Option<SyncErrorHook>,
}

impl std::fmt::Debug for SegmentFileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentFileCache")
            .field("capacity", &self.capacity)
            .field("open", &self.open.load(Ordering::Relaxed))
            .finish()
    }
}

/// The entries with an open file.
#[derive(Default)]
struct Ring {
    entries: Vec<Arc<Entry>>,
}

/// Up to this many open files, a miss looks at every one for the least recently used;
/// beyond, at a random sample of this many.
const EXACT_LRU_UP_TO: usize = 64;

impl Ring {
    fn push(&mut self, e: &Arc<Entry>) {
        debug_assert_eq!(e.pos.load(Ordering::Relaxed), NOT_IN_RING);
        e.pos.store(self.entries.len(), Ordering::Relaxed);
        self.entries.push(e.clone());
    }

    fn remove(&mut self, e: &Entry) {
        let i = e.pos.swap(NOT_IN_RING, Ordering::Relaxed);
        if i == NOT_IN_RING {
            return;
        }
        debug_assert!(
            std::ptr::eq(&*self.entries[i], e),
            "an entry knows its place"
        );
        self.entries.swap_remove(i);
        if let Some(moved) = self.entries.get(i) {
            moved.pos.store(i, Ordering::Relaxed);
        }
    }
}

const NOT_IN_RING: usize = usize::MAX;

/// One segment file as the cache knows it.
struct Entry {
    state: Mutex<State>,
    /// The cache's clock when the file was last used.
    last_used: AtomicU64,
    /// Index in the ring, or `NOT_IN_RING`; changed only under the ring's lock.
    pos: AtomicUsize,
}

struct State {
    path: PathBuf,
    file: Option<Arc<File>>,
    /// Written (or of unknown state, as after a crash) since its last successful fsync.
    dirty: bool,
    /// An fsync made while closing the file failed: the owner's next sync reports it.
    failed: Option<SyncFailure>,
    /// The owner is gone or closed it for good: the file is not opened again.
    retired: bool,
}

/// An `io::Error` kept to be reported later (`io::Error` is not `Clone`); the OS error
/// code survives, so `is_disk_failure` judges it as it would have the original.
struct SyncFailure {
    code: Option<i32>,
    kind: io::ErrorKind,
    message: String,
}

/// A copy of `e` that keeps its OS error code (`io::Error` is not `Clone`).
pub fn copy_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

impl SyncFailure {
    fn of(e: &io::Error) -> Self {
        SyncFailure {
            code: e.raw_os_error(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }
    fn to_error(&self, path: &Path) -> io::Error {
        match self.code {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(
                self.kind,
                format!("fsync of {} failed: {}", path.display(), self.message),
            ),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SegmentFileCache {
    /// A cache that holds at most `capacity` files open (at least one).
    pub fn new(capacity: usize) -> Arc<Self> {
        Self::build(capacity, None)
    }

    /// As `new`, telling `hook` of every fsync that fails while a file is being closed.
    pub fn with_sync_error_hook(capacity: usize, hook: SyncErrorHook) -> Arc<Self> {
        Self::build(capacity, Some(hook))
    }

    fn build(capacity: usize, on_sync_error: Option<SyncErrorHook>) -> Arc<Self> {
        assert!(
            capacity >= 1,
            "a segment file cache holds at least one file"
        );
        Arc::new(SegmentFileCache {
            capacity,
            ring: Mutex::new(Ring::default()),
            clock: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            lingering: Mutex::new(Vec::new()),
            on_sync_error,
        })
    }

    /// The cache of logs opened outside a `LogManager` (`PartitionLog::open`, tools,
    /// tests), with the default capacity.
    pub fn process_default() -> &'static Arc<SegmentFileCache> {
        static DEFAULT: OnceLock<Arc<SegmentFileCache>> = OnceLock::new();
        DEFAULT.get_or_init(|| SegmentFileCache::new(DEFAULT_MAX_OPEN_SEGMENT_FILES))
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Descriptors of segment files open right now: those the cache holds, and those it
    /// closed that a caller (a fetch's slice, a compaction pass) still holds.
    pub fn open_files(&self) -> usize {
        let mut lingering = lock(&self.lingering);
        lingering.retain(|w| w.strong_count() > 0);
        self.open.load(Ordering::Acquire) + lingering.len()
    }

    /// Closes files until there is room for one more (`forced`: closes one in any case,
    /// when the process ran out of descriptors). An fsync of a victim runs under its
    /// entry's lock only, so its owner waits for it but nobody else does.
    fn make_room(&self, forced: bool) {
        self.clock.fetch_add(1, Ordering::Relaxed);
        loop {
            let mut ring = lock(&self.ring);
            let n = ring.entries.len();
            if n == 0 || (n < self.capacity && !forced) {
                return;
            }
            let mut candidates: Vec<&Arc<Entry>> = if n <= EXACT_LRU_UP_TO {
                ring.entries.iter().collect()
            } else {
                (0..EXACT_LRU_UP_TO)
                    .map(|_| &ring.entries[fastrand::usize(0..n)])
                    .collect()
            };
            candidates.sort_by_key(|e| e.last_used.load(Ordering::Relaxed));
            // The least recently used that is not in use right now (its lock is free).
            let victim = candidates.into_iter().find_map(|e| {
                let st = match e.state.try_lock() {
                    Ok(st) => st,
                    Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => return None,
                };
                drop(st);
                Some(e.clone())
            });
            // Every file is in use at this moment: the caller opens one more than the
            // capacity, and a later miss closes it again.
            let Some(victim) = victim else { return };
            let mut st = match victim.state.try_lock() {
                Ok(st) => st,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => continue,
            };
            ring.remove(&victim);
            drop(ring);
            if let Some(file) = st.file.take() {
                self.open.fetch_sub(1, Ordering::AcqRel);
                self.close(&mut st, file);
            }
            drop(st);
            if forced {
                return;
            }
        }
    }

    /// Closes the cache's handle on a file: first an fsync if it holds unflushed writes,
    /// so that a writeback error is still seen (a kernel reports it only to descriptors
    /// open when it happened, and may forget it once none is); a failure is kept for the
    /// owner's next sync and told to the hook.
    fn close(&self, st: &mut State, file: Arc<File>) {
        if st.dirty {
            match crate::durable::sync_data(&file, &st.path) {
                Ok(()) => st.dirty = false,
                Err(e) => {
                    tracing::error!(
                        "fsync of {} before closing it failed: {e}",
                        st.path.display()
                    );
                    if let Some(hook) = &self.on_sync_error {
                        hook(&st.path, &e);
                    }
                    st.failed = Some(SyncFailure::of(&e));
                }
            }
        }
        self.linger(&file);
    }

    /// Counts a file the cache lets go of while someone else still holds it.
    fn linger(&self, file: &Arc<File>) {
        if Arc::strong_count(file) > 1 {
            let mut lingering = lock(&self.lingering);
            // Pruned here too, so that the list stays short when nobody asks for the count.
            if lingering.len() >= self.capacity.max(64) {
                lingering.retain(|w| w.strong_count() > 0);
            }
            lingering.push(Arc::downgrade(file));
        }
    }
}

/// A segment's `.log` file, opened through the cache when used. Dropping it (or `retire`)
/// closes the file without an fsync, as dropping a `File` does.
pub struct CachedFile {
    cache: Arc<SegmentFileCache>,
    entry: Arc<Entry>,
}

impl std::fmt::Debug for CachedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.entry.state);
        f.debug_struct("CachedFile")
            .field("path", &st.path)
            .field("open", &st.file.is_some())
            .field("dirty", &st.dirty)
            .finish()
    }
}

/// A second handle on a segment file, for reading it without its owner (compaction). It
/// does not keep the file open, and fails once the owner has dropped or retired it.
#[derive(Clone)]
pub struct SharedFile {
    cache: Arc<SegmentFileCache>,
    entry: Arc<Entry>,
}

impl std::fmt::Debug for SharedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFile").finish_non_exhaustive()
    }
}

fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
}

impl CachedFile {
    /// Opens (creating it if `create`) the file at `path` now, counted in the cache. For a
    /// new segment, whose file is used at once.
    pub fn open_now(cache: &Arc<SegmentFileCache>, path: &Path, create: bool) -> io::Result<Self> {
        // A file made now holds nothing to sync.
        let me = CachedFile::lazy(cache, path, false);
        cache.make_room(false);
        let file = open_rw(path, create)?;
        let mut st = lock(&me.entry.state);
        st.file = Some(Arc::new(file));
        cache.open.fetch_add(1, Ordering::AcqRel);
        me.entry
            .last_used
            .store(cache.clock.load(Ordering::Relaxed), Ordering::Relaxed);
        lock(&cache.ring).push(&me.entry);
        drop(st);
        Ok(me)
    }

    /// The file at `path`, not opened until it is used. `dirty`: whether it may hold
    /// writes not yet durable (then the next sync, or closing it, fsyncs it).
    pub fn lazy(cache: &Arc<SegmentFileCache>, path: &Path, dirty: bool) -> Self {
        CachedFile {
            cache: cache.clone(),
            entry: Arc::new(Entry {
                state: Mutex::new(State {
                    path: path.to_path_buf(),
                    file: None,
                    dirty,
                    failed: None,
                    retired: false,
                }),
                last_used: AtomicU64::new(0),
                pos: AtomicUsize::new(NOT_IN_RING),
            }),
        }
    }

    /// Runs `op` on the open file (opening it first if needed). `write`: `op` changes the
    /// file, which is then dirty until its next sync. The entry's lock is held during `op`,
    /// so the cache never closes a file in the middle of a write.
    pub fn with<R>(&self, write: bool, op: impl FnOnce(&File) -> io::Result<R>) -> io::Result<R> {
        with_entry(&self.cache, &self.entry, write, |file, _| op(file))
    }

    /// A handle on the open file that stays valid after the cache closes its own (a
    /// fetch's slice, read after the log's lock is released).
    pub fn share(&self) -> io::Result<Arc<File>> {
        with_entry(&self.cache, &self.entry, false, |file, _| Ok(file.clone()))
    }

    /// A handle for reading the file without its owner.
    pub fn shared(&self) -> SharedFile {
        SharedFile {
            cache: self.cache.clone(),
            entry: self.entry.clone(),
        }
    }

    /// Makes the file's writes durable (fdatasync through `durable`), if it has any since
    /// its last sync; reports an fsync that failed when the cache closed the file.
    pub fn sync(&self) -> io::Result<()> {
        {
            let mut st = lock(&self.entry.state);
            if let Some(f) = st.failed.take() {
                return Err(f.to_error(&st.path));
            }
            if !st.dirty {
                return Ok(());
            }
        }
        with_entry(&self.cache, &self.entry, false, |file, view| {
            crate::durable::sync_data(file, view.path)?;
            *view.dirty = false;
            Ok(())
        })
    }

    /// The file needs no fsync: everything in it is known to be durable.
    pub fn mark_durable(&self) {
        lock(&self.entry.state).dirty = false;
    }

    /// Renames the file (closed or not) and reopens it from the new path from then on.
    pub fn rename(&self, to: &Path) -> io::Result<()> {
        let mut st = lock(&self.entry.state);
        std::fs::rename(&st.path, to)?;
        st.path = to.to_path_buf();
        Ok(())
    }

    /// Closes the file for good, without an fsync (its log is being deleted): later uses
    /// fail. Handles already shared keep working until dropped.
    pub fn retire(&self) {
        let file = {
            let mut st = lock(&self.entry.state);
            st.retired = true;
            let file = st.file.take();
            if file.is_some() {
                lock(&self.cache.ring).remove(&self.entry);
                self.cache.open.fetch_sub(1, Ordering::AcqRel);
            }
            file
        };
        if let Some(file) = file {
            self.cache.linger(&file);
        }
    }

    /// Whether the cache holds the file open right now (for tests and accounting).
    pub fn is_open(&self) -> bool {
        lock(&self.entry.state).file.is_some()
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        self.retire();
    }
}

impl SharedFile {
    /// The open file, opening it through the cache if needed; `NotFound` once its segment
    /// is gone from the log.
    pub fn open(&self) -> io::Result<Arc<File>> {
        with_entry(&self.cache, &self.entry, false, |file, _| Ok(file.clone()))
    }
}

fn with_entry<R>(
    cache: &Arc<SegmentFileCache>,
    entry: &Arc<Entry>,
    write: bool,
    op: impl FnOnce(&Arc<File>, &mut SyncView<'_>) -> io::Result<R>,
) -> io::Result<R> {
    let mut forced = false;
    loop {
        let mut st = lock(&entry.state);
        if st.retired {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} was closed for good", st.path.display()),
            ));
        }
        if st.file.is_none() {
            // A miss: make room without holding this entry's lock (closing another file
            // takes that file's lock), then open by path and take a place in the ring.
            drop(st);
            cache.make_room(forced);
            st = lock(&entry.state);
            if st.retired {
                continue;
            }
            if st.file.is_none() {
                match open_rw(&st.path, false) {
                    Ok(f) => {
                        st.file = Some(Arc::new(f));
                        cache.open.fetch_add(1, Ordering::AcqRel);
                        lock(&cache.ring).push(entry);
                    }
                    // Out of descriptors: closing one of ours may make room; once.
                    Err(e)
                        if !forced
                            && matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) =>
                    {
                        forced = true;
                        drop(st);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        entry
            .last_used
            .store(cache.clock.load(Ordering::Relaxed), Ordering::Relaxed);
        let State {
            path, file, dirty, ..
        } = &mut *st;
        let Some(file) = file.as_ref() else {
            continue;
        };
        if write {
            *dirty = true;
        }
        let mut view = SyncView { path, dirty };
        return op(file, &mut view);
    }
}

/// What an operation on an entry may see and change besides the file.
pub(crate) struct SyncView<'a> {
    path: &'a Path,
    dirty: &'a mut bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    /// Records the paths the engine fsyncs.
    #[derive(Default)]
    struct Synced(Mutex<Vec<PathBuf>>);

    impl crate::durable::SyncWatcher for Synced {
        fn file_synced(&self, _: &File, path: &Path) {
            lock(&self.0).push(path.to_path_buf());
        }
        fn dir_synced(&self, _: &Path) {}
    }

    #[test]
    fn a_full_cache_closes_the_least_recently_used_file_after_syncing_its_writes() {
        let dir = tempfile::tempdir().unwrap();
        let cache = SegmentFileCache::new(2);
        let path = |n: usize| dir.path().join(format!("{n}.log"));
        let files: Vec<CachedFile> = (0..3)
            .map(|n| CachedFile::open_now(&cache, &path(n), true).unwrap())
            .collect();
        // Opening the third closed the first: nothing was written to it, so no fsync.
        assert_eq!(cache.open_files(), 2);
        assert!(!files[0].is_open() && files[1].is_open() && files[2].is_open());
        let synced = Arc::new(Synced::default());
        crate::durable::watch(Some(synced.clone()));
        // A write to the first reopens it by path and closes the least recently used of
        // the others: file 1 (file 2 was used since, by this read).
        files[2].with(false, |f| f.metadata()).unwrap();
        files[0]
            .with(true, |f| f.write_all_at(b"acknowledged", 0))
            .unwrap();
        assert!(files[0].is_open() && !files[1].is_open() && files[2].is_open());
        // Using file 1 closes file 2, and using file 2 closes file 0 (least recently used in
        // turn): only the file written is synced before it is closed.
        files[1].with(false, |f| f.metadata()).unwrap();
        assert!(files[0].is_open() && files[1].is_open() && !files[2].is_open());
        files[2].with(false, |f| f.metadata()).unwrap();
        assert!(!files[0].is_open() && files[1].is_open() && files[2].is_open());
        crate::durable::watch(None);
        let synced: Vec<PathBuf> = lock(&synced.0)
            .iter()
            .filter(|p| p.starts_with(dir.path()))
            .cloned()
            .collect();
        assert_eq!(synced, [path(0)], "only the written file is synced");
        assert_eq!(std::fs::read(path(0)).unwrap(), b"acknowledged");
        // Its writes are durable now: a flush has nothing left to do, and needs no file.
        files[0].sync().unwrap();
        assert!(!files[0].is_open());
        assert_eq!(cache.open_files(), 2);
        drop(files);
        assert_eq!(cache.open_files(), 0, "dropped segments close their files");
    }

    #[test]
    fn a_shared_handle_outlives_the_eviction_of_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = SegmentFileCache::new(1);
        let a = CachedFile::open_now(&cache, &dir.path().join("a.log"), true).unwrap();
        a.with(true, |f| f.write_all_at(b"fetched", 0)).unwrap();
        let slice = a.share().unwrap();
        let b = CachedFile::open_now(&cache, &dir.path().join("b.log"), true).unwrap();
        assert!(!a.is_open() && b.is_open());
        // The cache holds one file; the slice still holds the one it closed.
        assert_eq!(cache.open_files(), 2);
        let mut buf = [0u8; 7];
        slice.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"fetched");
        drop(slice);
        assert_eq!(cache.open_files(), 1);
        // A retired file is not opened again; its shared handles say it is gone.
        let shared = a.shared();
        a.retire();
        assert_eq!(
            shared.open().unwrap_err().kind(),
            io::ErrorKind::NotFound,
            "a segment gone from its log"
        );
    }
}
