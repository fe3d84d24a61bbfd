//! Disk faults under a started `weir serve`: its data directory on a small tmpfs that
//! fills up. Produce must then fail with KAFKA_STORAGE_ERROR (56) while reads go on;
//! once space returns, writes resume at the next offset; and after a kill -9 and a
//! restart every acknowledged record is there, once, in order.
//!
//! Mounting needs root. Without it the test says so and passes, unless
//! WEIR_REQUIRE_ROOT_TESTS is set (as `scripts/test.sh` sets it): then it fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::{Buf, Bytes};
use common::{frame, read_frame, weir, Server};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir_record::{BatchBuilder, Compression};

const KAFKA_STORAGE_ERROR: i16 = 56;
const RECORDS_PER_BATCH: usize = 8;

/// A tmpfs of a fixed size, unmounted when dropped.
struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mib: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fs");
        std::fs::create_dir(&path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&path)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { path, _dir: dir }),
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                    Err(e) => e.to_string(),
                };
                assert!(
                    std::env::var_os("WEIR_REQUIRE_ROOT_TESTS").is_none(),
                    "cannot mount a tmpfs (this test needs root): {why}"
                );
                eprintln!("skipped: cannot mount a tmpfs (this test needs root): {why}");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Batch `i`: records keyed `b{i}-r{j}` with 4 KiB values of letters.
fn batch(i: usize) -> Bytes {
    let mut rng = fastrand::Rng::with_seed(i as u64);
    let mut b = BatchBuilder::new(Compression::None, 0, usize::MAX);
    for j in 0..RECORDS_PER_BATCH {
        let value: Vec<u8> = (0..4096).map(|_| rng.alphabetic() as u8).collect();
        b.append(0, Some(format!("b{i}-r{j}").as_bytes()), Some(&value), &[])
            .unwrap();
    }
    Bytes::from(b.build().unwrap().bytes)
}

/// Produces batch `i` to `events` (acks=all); the partition's (error code, base offset).
async fn produce(s: &mut TcpStream, i: usize) -> (i16, i64) {
    produce_batch(s, "events", 0, -1, i).await
}

/// Produces batch `i` with Produce v7; the partition's (error code, base offset).
async fn produce_batch(
    s: &mut TcpStream,
    topic: &str,
    partition: i32,
    acks: i16,
    i: usize,
) -> (i16, i64) {
    let mut p = produce_request::PartitionProduceData::default();
    p.index = partition;
    p.records = Some(batch(i));
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_data.push(p);
    let mut req = ProduceRequest::default();
    req.acks = acks;
    req.timeout_ms = 10_000;
    req.topic_data.push(t);
    s.write_all(&frame(
        ApiKey::Produce,
        7,
        i as i32,
        &RequestKind::Produce(req),
    ))
    .await
    .unwrap();
    let mut resp = read_frame(s).await.expect("the broker answers a produce");
    resp.advance(4);
    let resp = ProduceResponse::decode(&mut resp, 7).unwrap();
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// Every record of the topic, as (offset, key), read by `weir consume`.
fn read_all(addr: &str) -> Vec<(i64, String)> {
    let out = weir(&[
        "consume",
        "--bootstrap",
        addr,
        "--topic",
        "events",
        "--from-beginning",
        "--timeout-ms",
        "3000",
    ]);
    out.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["offset"].as_i64().unwrap(),
                v["key"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn expected(acked: &[(usize, i64)]) -> Vec<(i64, String)> {
    acked
        .iter()
        .flat_map(|(i, base)| {
            (0..RECORDS_PER_BATCH).map(move |j| (base + j as i64, format!("b{i}-r{j}")))
        })
        .collect()
}

fn fill(path: &Path, mib: usize) {
    std::fs::write(path, vec![1u8; mib << 20]).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_reads_and_loses_nothing() {
    let Some(fs) = Tmpfs::mount(24) else {
        return;
    };
    let ballast = fs.path.join("ballast");
    fill(&ballast, 8);
    let data = fs.path.join("data");
    let settings = ["log.segment.bytes=1048576".to_string()];
    let mut server = Server::start(&data, &settings);
    weir(&[
        "topics",
        "create",
        "--bootstrap",
        &server.addr,
        "--topic",
        "events",
    ]);

    // Write until the disk is full.
    let mut s = TcpStream::connect(&server.addr).await.unwrap();
    let mut acked = Vec::new();
    let mut next = 0usize;
    loop {
        let (code, base) = produce(&mut s, next).await;
        match code {
            0 => {
                assert_eq!(base, (acked.len() * RECORDS_PER_BATCH) as i64);
                acked.push((next, base));
            }
            KAFKA_STORAGE_ERROR => break,
            other => panic!("batch {next}: error code {other}, not KAFKA_STORAGE_ERROR"),
        }
        next += 1;
        assert!(next < 1000, "24 MiB never filled up");
    }
    assert!(
        acked.len() > 100,
        "the disk filled after {} batches",
        acked.len()
    );
    // Full stays full, and says so every time.
    for _ in 0..5 {
        next += 1;
        assert_eq!(produce(&mut s, next).await.0, KAFKA_STORAGE_ERROR);
    }
    assert!(server.alive());
    // Reads go on: everything acknowledged, nothing else.
    assert_eq!(read_all(&server.addr), expected(&acked));

    // Space returns: writes resume at the next offset.
    std::fs::remove_file(&ballast).unwrap();
    for _ in 0..20 {
        next += 1;
        let (code, base) = produce(&mut s, next).await;
        assert_eq!(
            code, 0,
            "after space returned, batch {next}: error code {code}"
        );
        assert_eq!(base, (acked.len() * RECORDS_PER_BATCH) as i64);
        acked.push((next, base));
    }

    // Fill it again and crash in the middle of it: recovery finds every acknowledged
    // record and no other.
    fill(&fs.path.join("ballast2"), 7);
    loop {
        next += 1;
        match produce(&mut s, next).await {
            (0, base) => acked.push((next, base)),
            (KAFKA_STORAGE_ERROR, _) => break,
            (other, _) => panic!("error code {other}"),
        }
    }
    let port = server.port();
    drop(s);
    drop(server); // kill -9
    std::fs::remove_file(fs.path.join("ballast2")).unwrap();
    let server = Server::start_on(&data, &settings, port);
    assert_eq!(read_all(&server.addr), expected(&acked));
    let mut s = TcpStream::connect(&server.addr).await.unwrap();
    next += 1;
    let (code, base) = produce(&mut s, next).await;
    assert_eq!((code, base), (0, (acked.len() * RECORDS_PER_BATCH) as i64));
}

/// A v2 batch of one record, exactly 4096 bytes long, so that each append takes one page.
fn page_batch(i: i64, ts: i64) -> Vec<u8> {
    for value_len in (3900..4096).rev() {
        let mut b = BatchBuilder::new(Compression::None, 0, usize::MAX);
        b.append(ts + i, None, Some(&vec![b'x'; value_len]), &[])
            .unwrap();
        let bytes = b.build().unwrap().bytes;
        if bytes.len() == 4096 {
            return bytes;
        }
    }
    unreachable!("some value length makes a 4096-byte batch")
}

/// An index entry that needs a new page of its (sparse, memory-mapped) index file when the
/// disk has no page left: the append must fail with an error and leave the log as it was.
/// (A store into a hole of a mapped file on a full disk is SIGBUS: the process dies.)
#[test]
fn an_index_entry_on_a_full_disk_fails_its_append_not_the_process() {
    use weir_kafka::TopicPartition;
    use weir_log::{AppendOrigin, LoadParams, LogConfig, PartitionLog};

    let Some(fs) = Tmpfs::mount(4) else {
        return;
    };
    let pdir = fs.path.join("t-0");
    std::fs::create_dir(&pdir).unwrap();
    let config = std::sync::Arc::new(LogConfig {
        index_interval_bytes: 0, // an index entry for every append after the first
        segment_bytes: 1 << 30,
        ..LogConfig::default()
    });
    let params = |clean| LoadParams {
        recovery_point: Some(0),
        log_start_offset: None,
        had_clean_shutdown: clean,
        now_ms: weir_log::now_ms(),
    };
    let tp = TopicPartition::new("t", 0);
    let (mut log, _) =
        PartitionLog::open(&pdir, tp.clone(), config.clone(), params(false)).unwrap();
    let ts = weir_log::now_ms() - 60_000;
    let append = |log: &mut PartitionLog, i: i64| {
        log.append_as_leader(
            page_batch(i, ts),
            0,
            weir_log::now_ms(),
            AppendOrigin::Client,
        )
    };
    // 513 appends: 512 offset-index entries of 8 bytes fill the index's first page.
    for i in 0..513 {
        append(&mut log, i).unwrap();
    }
    // Fill the disk, then free exactly one page.
    let mut ballast = Vec::new();
    for n in 0.. {
        let path = fs.path.join(format!("ballast-{n}"));
        if std::fs::write(&path, [7u8; 4096]).is_err() {
            let _ = std::fs::remove_file(&path);
            break;
        }
        ballast.push(path);
    }
    std::fs::remove_file(ballast.pop().unwrap()).unwrap();
    // The log takes that page; the index entry finds none.
    let err = append(&mut log, 513).unwrap_err();
    assert_eq!(err.kafka_error_code(), KAFKA_STORAGE_ERROR, "{err}");
    assert_eq!(log.log_end_offset(), 513);
    // With room for both, the same append goes through at the same offset.
    std::fs::remove_file(ballast.pop().unwrap()).unwrap();
    std::fs::remove_file(ballast.pop().unwrap()).unwrap();
    assert_eq!(append(&mut log, 513).unwrap().first_offset, 513);
    drop(log);
    // Recovery of every segment finds exactly the acknowledged batches, and nothing else.
    let (log, report) = PartitionLog::open(&pdir, tp, config, params(false)).unwrap();
    assert_eq!(log.log_end_offset(), 514);
    assert_eq!(report.truncated_bytes, 0, "{report:?}");
}

/// An ext4 file system on a loop device, which the test can make fail like a dead disk
/// (EXT4_IOC_SHUTDOWN: from then on every read and write on it is EIO).
struct Ext4 {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Ext4 {
    fn mount(mib: u64) -> Option<Ext4> {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("disk.img");
        let path = dir.path().join("fs");
        std::fs::create_dir(&path).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        let ok = |c: &mut Command| c.output().is_ok_and(|o| o.status.success());
        let made = ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))
            && ok(Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&path));
        if !made {
            assert!(
                std::env::var_os("WEIR_REQUIRE_ROOT_TESTS").is_none(),
                "cannot make and mount an ext4 image (this test needs root and mkfs.ext4)"
            );
            eprintln!("skipped: cannot mount an ext4 image (this test needs root)");
            return None;
        }
        Some(Ext4 { path, _dir: dir })
    }

    /// The disk dies: EXT4_IOC_SHUTDOWN with EXT4_GOING_FLAGS_NOLOGFLUSH.
    fn fail(&self) {
        use std::os::fd::AsRawFd;
        let dir = std::fs::File::open(&self.path).unwrap();
        let flags: u32 = 2;
        // SAFETY: the ioctl reads one u32 from a live local.
        let r = unsafe { libc::ioctl(dir.as_raw_fd(), 0x8004_587D, &flags) };
        assert_eq!(
            r,
            0,
            "EXT4_IOC_SHUTDOWN: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Produces batch `i` to `topic`/`partition` (acks=1); the error code.
async fn produce_to(s: &mut TcpStream, topic: &str, partition: i32, i: usize) -> i16 {
    produce_batch(s, topic, partition, 1, i).await.0
}

/// Metadata v9 for `topic`: each partition's (error code, leader).
async fn leaders(s: &mut TcpStream, topic: &str) -> Vec<(i16, i32)> {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(topic.to_string())));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    s.write_all(&frame(ApiKey::Metadata, 9, 1, &RequestKind::Metadata(req)))
        .await
        .unwrap();
    let mut resp = read_frame(s).await.expect("a Metadata answer");
    resp.advance(4);
    resp.advance(1); // the flexible response header's tagged fields
    let resp = MetadataResponse::decode(&mut resp, 9).unwrap();
    let mut ps: Vec<_> = resp.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code, p.leader_id.0))
        .collect();
    ps.sort();
    ps.into_iter().map(|(_, e, l)| (e, l)).collect()
}

/// One of two data directories fails like a dead disk: its partitions go offline
/// (KAFKA_STORAGE_ERROR; no leader in Metadata); the other directory's partitions, new
/// topics, and the broker go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_disk_takes_its_partitions_offline_not_the_broker() {
    let Some(disk) = Ext4::mount(64) else {
        return;
    };
    let healthy = tempfile::tempdir().unwrap();
    let (bad_dir, good_dir) = (disk.path.join("data"), healthy.path().join("data"));
    let mut server = Server::start(
        &good_dir,
        &[format!(
            "log.dirs={},{}",
            bad_dir.display(),
            good_dir.display()
        )],
    );
    let addr = server.addr.clone();
    weir(&[
        "topics",
        "create",
        "--bootstrap",
        &addr,
        "--topic",
        "spread",
        "--partitions",
        "4",
    ]);
    let on_bad: Vec<i32> = (0..4)
        .filter(|p| bad_dir.join(format!("spread-{p}")).exists())
        .collect();
    assert!(
        !on_bad.is_empty() && on_bad.len() < 4,
        "the partitions should spread over both directories: {on_bad:?} on the failing one"
    );
    let mut s = TcpStream::connect(&addr).await.unwrap();
    for p in 0..4 {
        assert_eq!(produce_to(&mut s, "spread", p, p as usize).await, 0);
    }

    disk.fail();
    // The first write to a partition on the dead disk fails and takes its directory
    // offline; after that its partitions refuse at once.
    for round in 0..2 {
        for p in 0..4 {
            let code = produce_to(&mut s, "spread", p, 10 + round * 4 + p as usize).await;
            let want = if on_bad.contains(&p) {
                KAFKA_STORAGE_ERROR
            } else {
                0
            };
            assert_eq!(code, want, "round {round}, partition {p}");
        }
    }
    let node = 1;
    let expected: Vec<(i16, i32)> = (0..4)
        .map(|p| {
            if on_bad.contains(&p) {
                (5, -1)
            } else {
                (0, node)
            }
        })
        .collect();
    assert_eq!(leaders(&mut s, "spread").await, expected);
    // A new topic goes to the directory still online, and works.
    weir(&[
        "topics",
        "create",
        "--bootstrap",
        &addr,
        "--topic",
        "after",
        "--partitions",
        "2",
    ]);
    assert_eq!(produce_to(&mut s, "after", 0, 100).await, 0);
    assert_eq!(produce_to(&mut s, "after", 1, 101).await, 0);
    assert!(good_dir.join("after-0").exists() && good_dir.join("after-1").exists());
    // Reads of the healthy partitions go on.
    let healthy_p = (0..4).find(|p| !on_bad.contains(p)).unwrap();
    let out = weir(&[
        "consume",
        "--bootstrap",
        &addr,
        "--topic",
        "spread",
        "--partition",
        &healthy_p.to_string(),
        "--offset",
        "0",
        "--timeout-ms",
        "2000",
    ]);
    assert_eq!(out.lines().count(), 3 * RECORDS_PER_BATCH);
    assert!(server.alive(), "the broker stopped");
}
