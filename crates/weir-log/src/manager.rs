//! `LogManager`: the broker's data directories (Kafka's `log.dirs`) and every partition log
//! in them. It locks each directory against other processes, keeps `meta.properties`, the
//! clean-shutdown marker and the offset checkpoints, loads all partitions in parallel at
//! start-up (recovering after a crash), and runs the background work: retention, flushing
//! of rolled segments and `flush.ms`, delayed file deletion, checkpoints, and compaction.
//! It does not know topics' metadata beyond what the broker hands it.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::checkpoint;
use crate::cleaner::{self, Cleanability, OffsetMap};
use crate::config::LogConfig;
use crate::error::{LogError, Result};
use crate::file_cache::{self, SegmentFileCache, DEFAULT_MAX_OPEN_SEGMENT_FILES};
use crate::log::{LoadParams, PartitionLog};
use weir_kafka::TopicPartition;

use crate::now_ms;

pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
pub const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
/// The high watermarks of replicated partitions (Kafka's file, written by the broker's
/// replica manager there): a restarted replica shows consumers no more than the replicas
/// had agreed on.
pub const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";
pub const CLEANER_OFFSET_CHECKPOINT: &str = "cleaner-offset-checkpoint";
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
pub const LOCK_FILE: &str = ".lock";
pub const META_PROPERTIES: &str = "meta.properties";
const DELETE_DIR_SUFFIX: &str = "-delete";

/// A partition log shared between the broker's tasks.
pub type SharedLog = Arc<Mutex<PartitionLog>>;

/// The broker-level settings of the log manager (Kafka's names in the docs).
#[derive(Debug, Clone)]
pub struct LogManagerConfig {
    /// `log.dirs`.
    pub log_dirs: Vec<PathBuf>,
    /// `node.id` (or `broker.id`).
    pub node_id: i32,
    /// Defaults for every topic (the `log.*` broker settings).
    pub default_config: Arc<LogConfig>,
    /// `num.recovery.threads.per.data.dir`.
    pub recovery_threads_per_data_dir: usize,
    /// `log.retention.check.interval.ms`.
    pub retention_check_interval_ms: i64,
    /// How often rolled segments and `flush.ms` are looked at (Kafka:
    /// `log.flush.scheduler.interval.ms`, which defaults to never; rolled segments are
    /// flushed soon after the roll in any case).
    pub flush_check_interval_ms: i64,
    /// `log.flush.offset.checkpoint.interval.ms`.
    pub checkpoint_interval_ms: i64,
    /// `log.cleaner.enable`.
    pub cleaner_enable: bool,
    /// `log.cleaner.dedupe.buffer.size`.
    pub cleaner_dedupe_buffer_size: usize,
    /// `log.cleaner.backoff.ms`.
    pub cleaner_backoff_ms: i64,
    /// How many segment (`.log`) files may be open at once, over every partition (no
    /// Kafka equivalent: Kafka keeps every file open). Segments open their file when used
    /// and the least recently used is closed when the limit is reached, so the number of
    /// partitions and segments is not bounded by the process's descriptor limit. Default
    /// `DEFAULT_MAX_OPEN_SEGMENT_FILES` (512); the broker sets it from its descriptor
    /// budget. Index files hold no descriptor. At least 1.
    pub max_open_segment_files: usize,
    /// The cluster these directories must belong to (a broker of a cluster whose id is
    /// kept elsewhere): a directory of another cluster is refused, and new ones get it.
    /// `None`: the directories' own id, or a new one.
    pub cluster_id: Option<String>,
}

impl LogManagerConfig {
    /// Kafka's defaults for one data directory.
    pub fn new(log_dir: impl Into<PathBuf>) -> Self {
        LogManagerConfig {
            log_dirs: vec![log_dir.into()],
            node_id: 1,
            default_config: Arc::new(LogConfig::default()),
            recovery_threads_per_data_dir: 2,
            retention_check_interval_ms: 300_000,
            flush_check_interval_ms: 1_000,
            checkpoint_interval_ms: 60_000,
            cleaner_enable: true,
            cleaner_dedupe_buffer_size: cleaner::DEFAULT_DEDUPE_BUFFER_SIZE,
            cleaner_backoff_ms: 15_000,
            max_open_segment_files: DEFAULT_MAX_OPEN_SEGMENT_FILES,
            cluster_id: None,
        }
    }
}

/// The cluster id the data directories hold in `meta.properties`, if any (checking that
/// they belong to node `node_id` and agree), without opening or locking them.
pub fn stored_cluster_id(dirs: &[PathBuf], node_id: i32) -> Result<Option<String>> {
    let mut found: Option<String> = None;
    for d in dirs {
        if let Some(id) = read_meta(d, node_id)? {
            if found.as_ref().is_some_and(|f| *f != id) {
                return Err(LogError::Io(io::Error::other(format!(
                    "{} belongs to cluster {id}, another data directory to {}",
                    d.display(),
                    found.unwrap_or_default()
                ))));
            }
            found = Some(id);
        }
    }
    Ok(found)
}

/// What start-up found.
#[derive(Debug, Clone, Default)]
pub struct StartupReport {
    pub partitions: usize,
    pub had_clean_shutdown: bool,
    pub recovered_segments: usize,
    pub truncated_bytes: u64,
    pub elapsed: Duration,
    pub offline_dirs: Vec<PathBuf>,
}

struct LogDir {
    path: PathBuf,
    /// Held for the manager's lifetime: the OS lock keeps other processes out.
    _lock: File,
    health: Arc<DirHealth>,
}

/// Whether one data directory is usable. A directory whose disk fails (an error that
/// means the device or file system is gone: EIO, EROFS, ...) goes offline for the rest
/// of the process, as in Kafka: its partitions refuse reads and writes with
/// KAFKA_STORAGE_ERROR, background work leaves it alone, and every other directory, and
/// the broker, go on. A full disk is not such an error: writes fail until space returns.
#[derive(Debug)]
pub struct DirHealth {
    path: PathBuf,
    offline: std::sync::atomic::AtomicBool,
}

impl DirHealth {
    pub fn new(path: impl Into<PathBuf>) -> Arc<DirHealth> {
        Arc::new(DirHealth {
            path: path.into(),
            offline: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_offline(&self) -> bool {
        self.offline.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Takes the directory offline if `err` says its disk failed.
    pub fn observe(&self, err: &LogError) {
        if is_disk_failure(err) && !self.offline.swap(true, std::sync::atomic::Ordering::AcqRel) {
            tracing::error!(
                dir = %self.path.display(),
                "data directory offline after a disk error ({err}); its partitions refuse \
                 reads and writes until the broker restarts"
            );
        }
    }

    /// The error for a request to a partition of this directory while it is offline.
    pub fn offline_error(&self) -> LogError {
        LogError::Offline(format!(
            "the data directory {} is offline after a disk error",
            self.path.display()
        ))
    }
}

/// Errors that mean the disk or file system under a directory is gone, rather than
/// something about one request (a full disk, a bad record).
pub fn is_disk_failure(err: &LogError) -> bool {
    match err {
        LogError::Io(e) => matches!(
            e.raw_os_error(),
            Some(libc::EIO | libc::EROFS | libc::ENXIO | libc::ENODEV | libc::EUCLEAN)
        ),
        _ => false,
    }
}

/// A data directory as [`LogManager::describe_dirs`] tells it.
#[derive(Debug, Clone)]
pub struct DirReport {
    pub path: PathBuf,
    pub offline: bool,
    pub partitions: Vec<PartitionReport>,
}

#[derive(Debug, Clone)]
pub struct PartitionReport {
    pub tp: TopicPartition,
    pub size_bytes: u64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
}

struct State {
    logs: BTreeMap<TopicPartition, (usize, SharedLog)>,
    cleaner_checkpoints: BTreeMap<TopicPartition, i64>,
    /// The high watermarks `replication-offset-checkpoint` held at start-up.
    high_watermarks: BTreeMap<TopicPartition, i64>,
    cleaner_metrics: BTreeMap<TopicPartition, Cleanability>,
}

struct Inner {
    config: LogManagerConfig,
    cluster_id: String,
    dirs: Vec<LogDir>,
    /// Every log's open segment files.
    files: Arc<SegmentFileCache>,
    state: RwLock<State>,
    shutdown: Mutex<bool>,
    wake: Condvar,
    /// Held for a whole compaction pass: two passes (the cleaner thread's and one asked
    /// for directly) never clean the same log at once, each cutting the other short.
    cleaning: Mutex<()>,
}

/// The data directories and their partition logs.
pub struct LogManager {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn read_meta(dir: &Path, node_id: i32) -> Result<Option<String>> {
    let path = dir.join(META_PROPERTIES);
    if !path.exists() {
        return Ok(None);
    }
    let props = checkpoint::read_properties(&path)?;
    let stored = props.get("node.id").or_else(|| props.get("broker.id"));
    if let Some(id) = stored {
        if id.parse::<i32>().ok() != Some(node_id) {
            return Err(LogError::Io(io::Error::other(format!(
                "{} belongs to node {id}, but this broker is node {node_id}; \
                 set node.id={id} or use another data directory",
                path.display()
            ))));
        }
    }
    Ok(props.get("cluster.id").cloned())
}

/// A data directory that cannot be opened at start-up stops the start, naming it. (Kafka
/// starts without it when other directories remain; Weir does not yet know which
/// partitions such a directory held, and would create them empty elsewhere.)
fn unusable(dir: &Path, e: LogError) -> LogError {
    if !is_disk_failure(&e) {
        return e;
    }
    LogError::Offline(format!(
        "the data directory {} is unusable ({e}): repair or replace its disk, or take it \
         out of log.dirs to start without the partitions it holds",
        dir.display()
    ))
}

/// Why a data directory's lock was not taken.
#[derive(Debug)]
pub enum DataDirLock {
    /// Another process (a running broker) holds it.
    InUse,
    /// The directory or its lock file could not be made or opened.
    Failed(io::Error),
}

/// Takes the lock a broker holds on each of its data directories (Kafka's `.lock`),
/// creating the directory if it is missing; the lock lasts as long as the returned file.
/// Commands that change a stopped broker's files take it too, so that no broker starts on
/// the directory while they write.
pub fn lock_data_dir(dir: &Path) -> std::result::Result<File, DataDirLock> {
    let open = || {
        fs::create_dir_all(dir)?;
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))
    };
    let f = open().map_err(DataDirLock::Failed)?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(fs::TryLockError::WouldBlock) => Err(DataDirLock::InUse),
        Err(fs::TryLockError::Error(e)) => Err(DataDirLock::Failed(e)),
    }
}

fn lock_dir(dir: &Path) -> Result<File> {
    lock_data_dir(dir).map_err(|e| match e {
        DataDirLock::InUse => LogError::Io(io::Error::other(format!(
            "{} is in use by another process (its {LOCK_FILE} is locked); \
             two brokers cannot share a data directory",
            dir.display()
        ))),
        DataDirLock::Failed(e) => e.into(),
    })
}

impl LogManager {
    /// Opens every data directory and loads every partition in them. `topic_configs` gives
    /// the configuration of topics that override the defaults.
    pub fn open(
        config: LogManagerConfig,
        topic_configs: &HashMap<String, Arc<LogConfig>>,
    ) -> Result<(LogManager, StartupReport)> {
        let start = Instant::now();
        if config.log_dirs.is_empty() {
            return Err(LogError::Io(io::Error::other(
                "log.dirs names no directory",
            )));
        }
        if config.max_open_segment_files == 0 {
            return Err(LogError::Io(io::Error::other(
                "max_open_segment_files must be at least 1",
            )));
        }
        let mut report = StartupReport {
            had_clean_shutdown: true,
            ..Default::default()
        };
        // Lock every directory and agree on the cluster id.
        let mut dirs = Vec::new();
        let mut cluster_id: Option<String> = None;
        for path in &config.log_dirs {
            let lock = lock_dir(path).map_err(|e| unusable(path, e))?;
            if let Some(id) = read_meta(path, config.node_id).map_err(|e| unusable(path, e))? {
                if cluster_id.as_ref().is_some_and(|c| *c != id) {
                    return Err(LogError::Io(io::Error::other(format!(
                        "{} belongs to cluster {id}, another data directory to {}",
                        path.display(),
                        cluster_id.unwrap_or_default()
                    ))));
                }
                cluster_id = Some(id);
            }
            dirs.push(LogDir {
                path: path.clone(),
                _lock: lock,
                health: DirHealth::new(path.clone()),
            });
        }
        let cluster_id = match (&config.cluster_id, cluster_id) {
            (Some(want), Some(have)) if *want != have => {
                return Err(LogError::Io(io::Error::other(format!(
                    "the data directories belong to cluster {have}, not to cluster {want} \
                     that etcd.connect names: start this broker on an empty data directory, \
                     or point etcd.connect at its own cluster"
                ))));
            }
            (Some(want), _) => want.clone(),
            (None, Some(have)) => have,
            (None, None) => checkpoint::uuid_to_base64(uuid::Uuid::new_v4()),
        };
        // A failed fsync of a file the cache closes takes its directory offline at once,
        // as a failed flush does.
        let healths: Vec<Arc<DirHealth>> = dirs.iter().map(|d| d.health.clone()).collect();
        let files = SegmentFileCache::with_sync_error_hook(
            config.max_open_segment_files,
            Box::new(move |path, err| {
                if let Some(h) = healths.iter().find(|h| path.starts_with(h.path())) {
                    h.observe(&LogError::Io(file_cache::copy_error(err)));
                }
            }),
        );
        for d in &dirs {
            let meta = d.path.join(META_PROPERTIES);
            if !meta.exists() {
                let mut props = BTreeMap::new();
                props.insert("version".into(), "1".into());
                props.insert("cluster.id".into(), cluster_id.clone());
                props.insert("node.id".into(), config.node_id.to_string());
                props.insert(
                    "directory.id".into(),
                    checkpoint::uuid_to_base64(uuid::Uuid::new_v4()),
                );
                checkpoint::write_properties(&meta, &props)?;
            }
        }

        // What to load, per directory.
        struct Job {
            dir_index: usize,
            tp: TopicPartition,
            path: PathBuf,
            params: LoadParams,
        }
        let now = now_ms();
        let mut jobs = Vec::new();
        let mut cleaner_checkpoints = BTreeMap::new();
        let mut high_watermarks = BTreeMap::new();
        for (i, d) in dirs.iter().enumerate() {
            let clean_file = d.path.join(CLEAN_SHUTDOWN_FILE);
            let clean = clean_file.exists();
            report.had_clean_shutdown &= clean;
            let unusable = |e: io::Error| unusable(&d.path, e.into());
            let recovery = checkpoint::read_offsets(&d.path.join(RECOVERY_POINT_CHECKPOINT))
                .map_err(unusable)?;
            let starts = checkpoint::read_offsets(&d.path.join(LOG_START_OFFSET_CHECKPOINT))
                .map_err(unusable)?;
            cleaner_checkpoints.extend(
                checkpoint::read_offsets(&d.path.join(CLEANER_OFFSET_CHECKPOINT))
                    .map_err(unusable)?,
            );
            high_watermarks.extend(
                checkpoint::read_offsets(&d.path.join(REPLICATION_OFFSET_CHECKPOINT))
                    .map_err(unusable)?,
            );
            for entry in fs::read_dir(&d.path).map_err(unusable)? {
                let entry = entry.map_err(unusable)?;
                if !entry.file_type().map_err(unusable)?.is_dir() {
                    continue;
                }
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(DELETE_DIR_SUFFIX) {
                    // A topic deleted before the last stop: finish the job.
                    if let Err(e) = fs::remove_dir_all(entry.path()) {
                        tracing::warn!("could not remove {}: {e}", entry.path().display());
                    }
                    continue;
                }
                // Kafka's KRaft metadata log, in a data directory Kafka left: read once, when
                // Weir first opens it (`kraft`), and otherwise left alone.
                if name == crate::kraft::METADATA_DIR {
                    continue;
                }
                let Some(tp) = TopicPartition::parse_dir_name(&name) else {
                    continue;
                };
                if name.contains('.') && (name.ends_with("-future") || name.ends_with("-stray")) {
                    continue;
                }
                jobs.push(Job {
                    dir_index: i,
                    params: LoadParams {
                        recovery_point: recovery.get(&tp).copied(),
                        log_start_offset: starts.get(&tp).copied(),
                        had_clean_shutdown: clean,
                        now_ms: now,
                    },
                    tp,
                    path: entry.path(),
                });
            }
        }

        // Load in parallel: `recovery_threads_per_data_dir` workers per directory.
        let workers =
            (config.recovery_threads_per_data_dir.max(1) * dirs.len()).min(jobs.len().max(1));
        let queue = Mutex::new(jobs);
        type Loaded = (usize, TopicPartition, PartitionLog, crate::LoadReport);
        let results: Mutex<Vec<Result<Loaded>>> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let job = queue.lock().map(|mut q| q.pop()).unwrap_or(None);
                    let Some(job) = job else { break };
                    let cfg = topic_configs
                        .get(&*job.tp.topic)
                        .cloned()
                        .unwrap_or_else(|| config.default_config.clone());
                    let r =
                        PartitionLog::open_in(&job.path, job.tp.clone(), cfg, job.params, &files)
                            .map(|(log, rep)| (job.dir_index, job.tp.clone(), log, rep))
                            .map_err(|e| match e {
                                LogError::Io(io) => LogError::Io(io::Error::new(
                                    io.kind(),
                                    format!("loading {}: {io}", job.path.display()),
                                )),
                                other => other,
                            });
                    if let Ok(mut r2) = results.lock() {
                        r2.push(r);
                    }
                });
            }
        });
        let mut logs = BTreeMap::new();
        for r in results.into_inner().unwrap_or_default() {
            let (dir_index, tp, log, rep) = r?;
            report.recovered_segments += rep.recovered_segments;
            report.truncated_bytes += rep.truncated_bytes;
            logs.insert(tp, (dir_index, Arc::new(Mutex::new(log))));
        }
        report.partitions = logs.len();
        // From now on a crash must not look like a clean shutdown.
        for d in &dirs {
            let f = d.path.join(CLEAN_SHUTDOWN_FILE);
            if f.exists() {
                fs::remove_file(&f)?;
            }
        }
        cleaner_checkpoints.retain(|tp, _| logs.contains_key(tp));
        let manager = LogManager {
            inner: Arc::new(Inner {
                config,
                cluster_id,
                dirs,
                files,
                state: RwLock::new(State {
                    logs,
                    cleaner_checkpoints,
                    high_watermarks,
                    cleaner_metrics: BTreeMap::new(),
                }),
                shutdown: Mutex::new(false),
                wake: Condvar::new(),
                cleaning: Mutex::new(()),
            }),
            threads: Mutex::new(Vec::new()),
        };
        manager.checkpoint()?;
        report.elapsed = start.elapsed();
        tracing::info!(
            partitions = report.partitions,
            clean = report.had_clean_shutdown,
            recovered_segments = report.recovered_segments,
            "loaded logs in {:?}",
            report.elapsed
        );
        Ok((manager, report))
    }

    pub fn cluster_id(&self) -> &str {
        &self.inner.cluster_id
    }
    pub fn config(&self) -> &LogManagerConfig {
        &self.inner.config
    }
    pub fn default_config(&self) -> &Arc<LogConfig> {
        &self.inner.config.default_config
    }
    pub fn log_dirs(&self) -> Vec<PathBuf> {
        self.inner.dirs.iter().map(|d| d.path.clone()).collect()
    }

    /// The descriptors the logs hold right now: open segment files (at most
    /// `max_open_segment_files`, plus files the cache closed that a fetch's slice still
    /// reads) and one lock per data directory. Beyond these, a thread doing log I/O opens
    /// a file or two for a moment (an index resize, a checkpoint, a directory fsync).
    pub fn open_files(&self) -> usize {
        self.inner.files.open_files() + self.inner.dirs.len()
    }

    /// The cache of open segment files every log of this manager shares.
    pub fn segment_files(&self) -> &Arc<SegmentFileCache> {
        &self.inner.files
    }

    fn state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(|e| e.into_inner())
    }
    fn state_mut(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.inner.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The health of the directory holding a partition, if this broker has it.
    pub fn health_of(&self, tp: &TopicPartition) -> Option<Arc<DirHealth>> {
        let state = self.state();
        let (dir, _) = state.logs.get(tp)?;
        Some(self.inner.dirs[*dir].health.clone())
    }

    /// Notes an error from a data directory's own files: a disk failure takes it offline.
    pub fn observe_dir(&self, path: &Path, err: &LogError) {
        if let Some(d) = self.inner.dirs.iter().find(|d| d.path == path) {
            d.health.observe(err);
        }
    }

    /// The data directories that went offline.
    pub fn offline_dirs(&self) -> Vec<PathBuf> {
        self.inner
            .dirs
            .iter()
            .filter(|d| d.health.is_offline())
            .map(|d| d.path.clone())
            .collect()
    }

    /// Each data directory, whether it is offline, and the partitions `wanted` of those it
    /// holds with their size in bytes, log end offset and high watermark: what
    /// DescribeLogDirs tells of them.
    pub fn describe_dirs(&self, wanted: impl Fn(&TopicPartition) -> bool) -> Vec<DirReport> {
        let state = self.state();
        let mut reports: Vec<DirReport> = self
            .inner
            .dirs
            .iter()
            .map(|d| DirReport {
                path: d.path.clone(),
                offline: d.health.is_offline(),
                partitions: Vec::new(),
            })
            .collect();
        for (tp, (dir, log)) in &state.logs {
            if !wanted(tp) {
                continue;
            }
            let log = log.lock().unwrap_or_else(|e| e.into_inner());
            reports[*dir].partitions.push(PartitionReport {
                tp: tp.clone(),
                size_bytes: log.size_in_bytes(),
                log_end_offset: log.log_end_offset(),
                high_watermark: log.high_watermark(),
            });
        }
        reports
    }

    /// Every partition log, with its directory's health.
    fn logs_with_health(&self) -> Vec<(TopicPartition, SharedLog, Arc<DirHealth>)> {
        self.state()
            .logs
            .iter()
            .map(|(tp, (dir, l))| (tp.clone(), l.clone(), self.inner.dirs[*dir].health.clone()))
            .collect()
    }

    /// The log of a partition, if this broker has it.
    /// The high watermark `replication-offset-checkpoint` held for `tp` at start-up.
    pub fn checkpointed_high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.state().high_watermarks.get(tp).copied()
    }

    pub fn log(&self, tp: &TopicPartition) -> Option<SharedLog> {
        self.state().logs.get(tp).map(|(_, l)| l.clone())
    }

    /// Every partition log.
    pub fn logs(&self) -> Vec<(TopicPartition, SharedLog)> {
        self.state()
            .logs
            .iter()
            .map(|(tp, (_, l))| (tp.clone(), l.clone()))
            .collect()
    }

    /// Creates a partition's log in the data directory holding the fewest partitions, or
    /// returns the existing one. All or nothing: a creation that fails part-way (no
    /// descriptor left, a full or failing disk) leaves no directory or file behind, holds
    /// no descriptor, and registers nothing.
    pub fn get_or_create_log(
        &self,
        tp: &TopicPartition,
        topic_id: uuid::Uuid,
        config: Arc<LogConfig>,
    ) -> Result<SharedLog> {
        if let Some(l) = self.log(tp) {
            return Ok(l);
        }
        let mut state = self.state_mut();
        if let Some((_, l)) = state.logs.get(tp) {
            return Ok(l.clone());
        }
        let mut counts = vec![0usize; self.inner.dirs.len()];
        for (i, _) in state.logs.values() {
            counts[*i] += 1;
        }
        let dir_index = (0..counts.len())
            .filter(|i| !self.inner.dirs[*i].health.is_offline())
            .min_by_key(|i| counts[*i])
            .ok_or_else(|| LogError::Offline("every data directory is offline".into()))?;
        let dir = &self.inner.dirs[dir_index];
        let path = dir.path.join(tp.dir_name());
        let log = PartitionLog::create_in(
            &path,
            tp.clone(),
            topic_id,
            config,
            now_ms(),
            &self.inner.files,
        )
        .inspect_err(|e| dir.health.observe(e))?;
        let shared = Arc::new(Mutex::new(log));
        state.logs.insert(tp.clone(), (dir_index, shared.clone()));
        Ok(shared)
    }

    /// Deletes a partition's log: its files are closed at once (whoever still holds the
    /// log gets errors from now on; slices already handed out stay readable), and its
    /// directory is renamed `<topic>-<p>.<id>-delete` (so it is gone for readers and a
    /// restart) and removed in the background. A log that holds no record, such as one
    /// just created whose topic's creation is being rolled back, is a handful of small
    /// files: it is removed before this returns, so that nothing of it is left.
    pub fn delete_log(&self, tp: &TopicPartition) -> Result<bool> {
        let Some((_, shared)) = self.state_mut().logs.remove(tp) else {
            return Ok(false);
        };
        self.state_mut().cleaner_checkpoints.remove(tp);
        let mut log = shared.lock().unwrap_or_else(|e| e.into_inner());
        log.retire_files();
        let dir = log.dir().to_path_buf();
        let doomed = dir.with_file_name(format!(
            "{}.{}{DELETE_DIR_SUFFIX}",
            tp.dir_name(),
            uuid::Uuid::new_v4().simple()
        ));
        log.rename_dir(&doomed)?;
        let holds_nothing = log.size_in_bytes() == 0;
        let bases = log.segment_bases();
        drop(log);
        if holds_nothing {
            crate::log::remove_partial_dir(&doomed, &bases);
            return Ok(true);
        }
        std::thread::spawn(move || {
            if let Err(e) = fs::remove_dir_all(&doomed) {
                tracing::warn!("could not remove {}: {e}", doomed.display());
            }
        });
        Ok(true)
    }

    /// New configuration for every partition of `topic`.
    /// Gives every log of a topic in `configs` its topic's new config, in one pass.
    pub fn update_topic_configs(&self, configs: &HashMap<String, Arc<LogConfig>>) {
        for (tp, (_, log)) in self.state().logs.iter() {
            if let Some(config) = configs.get(&*tp.topic) {
                log.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .update_config(config.clone());
            }
        }
        self.inner.wake.notify_all();
    }

    pub fn update_topic_config(&self, topic: &str, config: Arc<LogConfig>) {
        for (tp, (_, log)) in self.state().logs.iter() {
            if &*tp.topic == topic {
                log.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .update_config(config.clone());
            }
        }
        self.inner.wake.notify_all();
    }

    /// Writes the recovery-point, log-start-offset and cleaner checkpoints of every directory.
    pub fn checkpoint(&self) -> Result<()> {
        let state = self.state();
        let mut first_error = None;
        for (i, d) in self.inner.dirs.iter().enumerate() {
            if d.health.is_offline() {
                continue;
            }
            let mut recovery = BTreeMap::new();
            let mut starts = BTreeMap::new();
            let mut cleaner = BTreeMap::new();
            let mut high = BTreeMap::new();
            for (tp, (dir_index, log)) in state.logs.iter() {
                if *dir_index != i {
                    continue;
                }
                let log = log.lock().unwrap_or_else(|e| e.into_inner());
                recovery.insert(tp.clone(), log.recovery_point());
                starts.insert(tp.clone(), log.log_start_offset());
                if log.is_replicated() {
                    high.insert(tp.clone(), log.high_watermark());
                }
                if let Some(c) = state.cleaner_checkpoints.get(tp) {
                    cleaner.insert(tp.clone(), *c);
                }
            }
            let written =
                checkpoint::write_offsets(&d.path.join(RECOVERY_POINT_CHECKPOINT), &recovery)
                    .and_then(|()| {
                        checkpoint::write_offsets(
                            &d.path.join(LOG_START_OFFSET_CHECKPOINT),
                            &starts,
                        )
                    })
                    .and_then(|()| {
                        checkpoint::write_offsets(&d.path.join(CLEANER_OFFSET_CHECKPOINT), &cleaner)
                    })
                    .and_then(|()| {
                        let path = d.path.join(REPLICATION_OFFSET_CHECKPOINT);
                        // Written once some partition is replicated; a single broker's
                        // directories never get it.
                        if high.is_empty() && !path.exists() {
                            Ok(())
                        } else {
                            checkpoint::write_offsets(&path, &high)
                        }
                    });
            if let Err(e) = written {
                let e = LogError::Io(e);
                d.health.observe(&e);
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A metrics snapshot of every partition, with the cleaner's view of compacted ones.
    pub fn metrics(&self) -> Vec<(TopicPartition, crate::metrics::LogMetrics)> {
        let state = self.state();
        state
            .logs
            .iter()
            .map(|(tp, (_, log))| {
                let mut m = log.lock().unwrap_or_else(|e| e.into_inner()).metrics();
                if let Some(c) = state.cleaner_metrics.get(tp) {
                    m.cleaner_dirty_bytes = c.dirty_bytes;
                    m.cleaner_lag_ms = c.lag_ms;
                }
                (tp.clone(), m)
            })
            .collect()
    }

    /// One round of the scheduled work, as the background thread does it (exposed for
    /// tests and tools): retention if `retention_due`, flushes, due file deletions.
    pub fn run_scheduled(&self, now: i64, retention_due: bool) {
        for (tp, log, health) in self.logs_with_health() {
            if health.is_offline() {
                continue;
            }
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            if retention_due {
                if let Err(e) = log.delete_old_segments(now) {
                    tracing::error!(partition = %tp, "retention failed: {e}");
                    health.observe(&e);
                }
            }
            if let Err(e) = log.maybe_flush_on_schedule(now) {
                tracing::error!(partition = %tp, "flush failed: {e}");
                health.observe(&e);
            }
            if let Err(e) = log.remove_due_files(now) {
                tracing::error!(partition = %tp, "removing deleted segments failed: {e}");
                health.observe(&e);
            }
        }
    }

    /// One compaction pass over the dirtiest compacted log, if any is over its threshold.
    /// Returns the partition cleaned.
    pub fn clean_filthiest(&self, map: &mut OffsetMap, now: i64) -> Result<Option<TopicPartition>> {
        let _one_pass_at_a_time = self
            .inner
            .cleaning
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut best: Option<(TopicPartition, SharedLog, Cleanability)> = None;
        let candidates: Vec<(TopicPartition, SharedLog, Option<i64>)> = {
            let state = self.state();
            state
                .logs
                .iter()
                .filter(|(_, (dir, _))| !self.inner.dirs[*dir].health.is_offline())
                .map(|(tp, (_, l))| {
                    (
                        tp.clone(),
                        l.clone(),
                        state.cleaner_checkpoints.get(tp).copied(),
                    )
                })
                .collect()
        };
        let mut metrics = BTreeMap::new();
        for (tp, shared, checkpoint) in candidates {
            let mut log = shared.lock().unwrap_or_else(|e| e.into_inner());
            let config = log.config().clone();
            if !config.cleanup_policy.compacts() {
                continue;
            }
            let c = cleaner::cleanability(&mut log, checkpoint, now);
            drop(log);
            metrics.insert(tp.clone(), c);
            if c.is_cleanable(config.min_cleanable_dirty_ratio)
                && best
                    .as_ref()
                    .is_none_or(|b| c.dirty_ratio > b.2.dirty_ratio)
            {
                best = Some((tp, shared, c));
            }
        }
        self.state_mut().cleaner_metrics = metrics;
        let Some((tp, shared, c)) = best else {
            return Ok(None);
        };
        let stats = cleaner::clean(
            &shared,
            map,
            c.first_dirty_offset,
            c.first_uncleanable_offset,
            now,
        )
        .inspect_err(|e| {
            if let Some(h) = self.health_of(&tp) {
                h.observe(e);
            }
        })?;
        tracing::info!(partition = %tp, read = stats.bytes_read, written = stats.bytes_written, "cleaned");
        self.state_mut()
            .cleaner_checkpoints
            .insert(tp.clone(), stats.end_offset);
        let mut log = shared.lock().unwrap_or_else(|e| e.into_inner());
        if log.config().cleanup_policy.deletes() {
            log.delete_old_segments(now)?;
        }
        Ok(Some(tp))
    }

    /// Starts the background threads.
    pub fn start(self: &Arc<Self>) {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let me = self.clone();
        threads.push(
            std::thread::Builder::new()
                .name("weir-log-scheduler".into())
                .spawn(move || me.scheduler_loop())
                .expect("spawning a thread"),
        );
        if self.inner.config.cleaner_enable {
            let me = self.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("weir-log-cleaner".into())
                    .spawn(move || me.cleaner_loop())
                    .expect("spawning a thread"),
            );
        }
    }

    /// Waits up to `ms`; false once shutting down.
    fn sleep(&self, ms: i64) -> bool {
        let guard = self
            .inner
            .shutdown
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if *guard {
            return false;
        }
        let (guard, _) = self
            .inner
            .wake
            .wait_timeout(guard, Duration::from_millis(ms.max(1) as u64))
            .unwrap_or_else(|e| e.into_inner());
        !*guard
    }

    fn scheduler_loop(&self) {
        let cfg = &self.inner.config;
        let start = now_ms();
        // Kafka's first retention check comes 30 s after start-up.
        let mut next_retention = start + cfg.retention_check_interval_ms.min(30_000);
        let mut next_checkpoint = start + cfg.checkpoint_interval_ms;
        let tick = cfg
            .flush_check_interval_ms
            .min(cfg.retention_check_interval_ms)
            .clamp(10, 1_000);
        while self.sleep(tick) {
            let now = now_ms();
            let retention_due = now >= next_retention;
            if retention_due {
                next_retention = now + cfg.retention_check_interval_ms;
            }
            self.run_scheduled(now, retention_due);
            if now >= next_checkpoint {
                next_checkpoint = now + cfg.checkpoint_interval_ms;
                if let Err(e) = self.checkpoint() {
                    tracing::error!("writing checkpoints failed: {e}");
                }
            }
        }
    }

    fn cleaner_loop(&self) {
        let mut map = OffsetMap::new(self.inner.config.cleaner_dedupe_buffer_size);
        loop {
            match self.clean_filthiest(&mut map, now_ms()) {
                Ok(Some(_)) => {
                    if !self.sleep(0) {
                        return;
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => tracing::error!("log cleaner: {e}"),
            }
            if !self.sleep(self.inner.config.cleaner_backoff_ms) {
                return;
            }
        }
    }

    /// Stops the background work, closes every log (flushing it), writes the checkpoints
    /// and the clean-shutdown marker. A restart after this does not scan any data.
    pub fn shutdown(&self) -> Result<()> {
        *self
            .inner
            .shutdown
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = true;
        self.inner.wake.notify_all();
        for t in self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = t.join();
        }
        let now = now_ms();
        let mut first_error = None;
        // An offline directory is left as it is: the restart recovers it, if its disk
        // comes back.
        for (tp, log, health) in self.logs_with_health() {
            if health.is_offline() {
                continue;
            }
            if let Err(e) = log.lock().unwrap_or_else(|e| e.into_inner()).close(now) {
                tracing::error!(partition = %tp, "closing failed: {e}");
                health.observe(&e);
                first_error.get_or_insert(e);
            }
        }
        self.checkpoint()?;
        if let Some(e) = first_error {
            return Err(e);
        }
        for d in self.inner.dirs.iter().filter(|d| !d.health.is_offline()) {
            checkpoint::write_atomically(
                &d.path.join(CLEAN_SHUTDOWN_FILE),
                br#"{"version":0,"brokerEpoch":0}"#,
            )?;
        }
        tracing::info!("logs closed cleanly");
        Ok(())
    }
}
