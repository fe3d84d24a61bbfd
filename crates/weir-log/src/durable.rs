//! Every fsync the storage engine makes goes through here: of a file's data, of a file and
//! its metadata, and of a directory's entries. Without a watcher these are the plain
//! system calls. A test can install a `SyncWatcher` to learn exactly what a power loss
//! would keep — a file's bytes as of its last fsync, a directory's entries as of its last
//! fsync — and put the files back to that at a simulated crash (`tests/power_loss.rs`).

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Told of each fsync once the system call has succeeded.
pub trait SyncWatcher: Send + Sync {
    /// `file`, at `path`, is durable as it is now (its bytes and length).
    fn file_synced(&self, file: &File, path: &Path);
    /// The entries of `dir` are durable as they are now.
    fn dir_synced(&self, dir: &Path);
}

static WATCHING: AtomicBool = AtomicBool::new(false);
static WATCHER: RwLock<Option<Arc<dyn SyncWatcher>>> = RwLock::new(None);

/// Installs (or, with `None`, removes) the process-wide watcher. For tests.
#[doc(hidden)]
pub fn watch(watcher: Option<Arc<dyn SyncWatcher>>) {
    let mut w = WATCHER.write().unwrap_or_else(|e| e.into_inner());
    WATCHING.store(watcher.is_some(), Ordering::Release);
    *w = watcher;
}

/// Fsyncs to come before the one that fails; `u64::MAX` for none.
static FAIL_AFTER: AtomicU64 = AtomicU64::new(u64::MAX);

/// Makes the `n`-th fsync from now (1 = the next) fail with EIO, or none with `None`.
/// Process-wide; for tests of what a failing disk leaves behind.
#[doc(hidden)]
pub fn fail_sync_after(n: Option<u64>) {
    FAIL_AFTER.store(n.unwrap_or(u64::MAX), Ordering::Release);
}

fn injected_failure() -> io::Result<()> {
    if FAIL_AFTER.load(Ordering::Acquire) == u64::MAX {
        return Ok(());
    }
    let left = FAIL_AFTER.fetch_sub(1, Ordering::AcqRel);
    if left == 1 {
        FAIL_AFTER.store(u64::MAX, Ordering::Release);
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    Ok(())
}

fn watcher() -> Option<Arc<dyn SyncWatcher>> {
    if !WATCHING.load(Ordering::Acquire) {
        return None;
    }
    WATCHER.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// fdatasync: the file's bytes (and the length they need) survive a power loss.
pub fn sync_data(file: &File, path: &Path) -> io::Result<()> {
    injected_failure()?;
    file.sync_data()?;
    if let Some(w) = watcher() {
        w.file_synced(file, path);
    }
    Ok(())
}

/// fsync: the file's bytes and metadata survive a power loss.
pub fn sync_all(file: &File, path: &Path) -> io::Result<()> {
    injected_failure()?;
    file.sync_all()?;
    if let Some(w) = watcher() {
        w.file_synced(file, path);
    }
    Ok(())
}

/// fsync of a directory: the files created, renamed or removed in it so far stay so
/// after a power loss. A new file's data is not reachable after a crash without this.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let d = File::open(dir)?;
    injected_failure()?;
    d.sync_all()?;
    if let Some(w) = watcher() {
        w.dir_synced(dir);
    }
    Ok(())
}
