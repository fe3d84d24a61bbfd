//! Crash tests on real files: torn tails (garbage, half batches, flipped bytes, cut
//! files), lost and truncated indexes, a crash during a roll, and a real `kill -9` of a
//! process appending to a log. Each must recover to exactly the records whose batches are
//! whole, and appends must continue at the right offset.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use weir_kafka::TopicPartition;
use weir_log::{AppendOrigin, LoadParams, LogConfig, PartitionLog};
use weir_record::Compression;

fn reopen(pdir: &Path, config: Arc<LogConfig>, recovery_point: i64) -> PartitionLog {
    let params = LoadParams {
        recovery_point: Some(recovery_point),
        log_start_offset: None,
        had_clean_shutdown: false,
        now_ms: NOW,
    };
    PartitionLog::open(pdir, TopicPartition::new("c", 0), config, params)
        .unwrap()
        .0
}

fn seg_path(pdir: &Path, base: i64, ext: &str) -> PathBuf {
    pdir.join(format!("{base:020}.{ext}"))
}

/// Writes `batches` batches of random codecs; returns the log and (first, last, end
/// position in its segment, segment base) of each batch.
fn fill(
    pdir: &Path,
    config: Arc<LogConfig>,
    batches: usize,
    seed: u64,
) -> (PartitionLog, Vec<(i64, i64)>) {
    let mut log = PartitionLog::create(
        pdir,
        TopicPartition::new("c", 0),
        uuid::Uuid::new_v4(),
        config,
        NOW,
    )
    .unwrap();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = Vec::new();
    for i in 0..batches {
        let codec = Compression::ALL[rng.usize(0..5)];
        let info = log
            .append_as_leader(
                simple_batch(
                    codec,
                    rng.usize(1..8),
                    &format!("s{seed}b{i}"),
                    NOW + i as i64,
                ),
                0,
                NOW,
                AppendOrigin::Client,
            )
            .unwrap();
        out.push((info.first_offset, info.last_offset));
    }
    (log, out)
}

#[derive(Debug, Clone)]
enum Damage {
    Garbage(Vec<u8>),
    HalfBatch(usize),
    FlipInLastBatch(proptest::sample::Index),
    Cut(proptest::sample::Index),
}

#[derive(Debug, Clone)]
enum IndexDamage {
    None,
    DeleteIndex,
    DeleteTimeIndex,
    TruncateIndex(proptest::sample::Index),
    GarbageTimeIndex,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 1..300).prop_map(Damage::Garbage),
        (1usize..60).prop_map(Damage::HalfBatch),
        any::<proptest::sample::Index>().prop_map(Damage::FlipInLastBatch),
        any::<proptest::sample::Index>().prop_map(Damage::Cut),
    ]
}

fn index_damage() -> impl Strategy<Value = IndexDamage> {
    prop_oneof![
        Just(IndexDamage::None),
        Just(IndexDamage::DeleteIndex),
        Just(IndexDamage::DeleteTimeIndex),
        any::<proptest::sample::Index>().prop_map(IndexDamage::TruncateIndex),
        Just(IndexDamage::GarbageTimeIndex),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn recovery_keeps_exactly_the_whole_batches(batches in 1usize..40, seed: u64, dmg in damage(),
                                                idx in index_damage(), rp_pick in any::<proptest::sample::Index>()) {
        let dir = tempfile::tempdir().unwrap();
        let pdir = dir.path().join("c-0");
        let config = small_config();
        let (log, written) = fill(&pdir, config.clone(), batches, seed);
        let all = read_all(&log);
        let bases = log.segment_bases();
        let rp_max = log.recovery_point();
        drop(log); // crash: nothing closed or flushed

        // The last non-empty segment takes the damage.
        let victim = *bases.iter().rev().find(|b| std::fs::metadata(seg_path(&pdir, **b, "log")).unwrap().len() > 0).unwrap();
        let log_file = seg_path(&pdir, victim, "log");
        let bytes = std::fs::read(&log_file).unwrap();
        // Batch boundaries within the victim segment.
        let mut ends = vec![0usize];
        while *ends.last().unwrap() < bytes.len() {
            let p = *ends.last().unwrap();
            ends.push(p + 12 + i32::from_be_bytes(bytes[p + 8..p + 12].try_into().unwrap()) as usize);
        }
        let whole_bytes = match &dmg {
            Damage::Garbage(g) => {
                let mut f = std::fs::OpenOptions::new().append(true).open(&log_file).unwrap();
                f.write_all(g).unwrap();
                // Garbage that happens to parse as a valid batch is astronomically unlikely
                // (it needs a matching CRC-32C).
                bytes.len()
            }
            Damage::HalfBatch(n) => {
                let extra = simple_batch(Compression::None, *n, "torn", NOW);
                let mut f = std::fs::OpenOptions::new().append(true).open(&log_file).unwrap();
                f.write_all(&extra[..extra.len() - 1]).unwrap();
                bytes.len()
            }
            Damage::FlipInLastBatch(i) => {
                let start = ends[ends.len() - 2];
                // Bytes under the CRC: attributes onward.
                let at = start + 21 + i.index(bytes.len() - start - 21);
                let mut b = bytes.clone();
                b[at] ^= 0x40;
                std::fs::write(&log_file, &b).unwrap();
                start
            }
            Damage::Cut(i) => {
                let cut = i.index(bytes.len());
                std::fs::write(&log_file, &bytes[..cut]).unwrap();
                *ends.iter().rev().find(|e| **e <= cut).unwrap()
            }
        };
        match &idx {
            IndexDamage::None => {}
            IndexDamage::DeleteIndex => std::fs::remove_file(seg_path(&pdir, victim, "index")).unwrap(),
            IndexDamage::DeleteTimeIndex => std::fs::remove_file(seg_path(&pdir, victim, "timeindex")).unwrap(),
            IndexDamage::TruncateIndex(i) => {
                let p = seg_path(&pdir, victim, "index");
                let len = std::fs::metadata(&p).unwrap().len();
                std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(i.index(len as usize + 1) as u64).unwrap();
            }
            IndexDamage::GarbageTimeIndex => std::fs::write(seg_path(&pdir, victim, "timeindex"), [0xab; 29]).unwrap(),
        }

        // Which records survive: everything before the victim, and the victim's whole batches.
        let victim_records: Vec<Rec> = decode(&bytes[..whole_bytes]);
        let mut want: Vec<Rec> = all.iter().filter(|r| r.offset < victim).cloned().collect();
        want.extend(victim_records);
        let rp = rp_pick.index((victim.min(rp_max) + 1) as usize) as i64;
        let mut log = reopen(&pdir, config, rp);
        prop_assert_eq!(read_all(&log), want.clone());
        let next = want.last().map_or(0, |r| r.offset + 1);
        prop_assert_eq!(log.log_end_offset(), next);
        let info = log.append_as_leader(simple_batch(Compression::Zstd, 2, "after", NOW), 0, NOW, AppendOrigin::Client).unwrap();
        prop_assert_eq!(info.first_offset, next);
        prop_assert!(written.iter().any(|b| b.1 + 1 == next) || next == 0);
    }
}

#[test]
fn a_crash_during_a_roll_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("c-0");
    let config = small_config();
    let (log, _) = fill(&pdir, config.clone(), 30, 7);
    let all = read_all(&log);
    let bases = log.segment_bases();
    let leo = log.log_end_offset();
    drop(log);
    // The roll had created the next segment's files but not yet trimmed the old active
    // segment's preallocated indexes.
    std::fs::write(seg_path(&pdir, leo, "log"), b"").unwrap();
    std::fs::write(seg_path(&pdir, leo, "index"), vec![0u8; 1024]).unwrap();
    for b in &bases {
        let p = seg_path(&pdir, *b, "index");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(1024)
            .unwrap();
    }
    for rp in [0, bases[bases.len() / 2], leo] {
        let mut log = reopen(&pdir, config.clone(), rp);
        assert_eq!(read_all(&log), all, "recovery point {rp}");
        assert_eq!(log.log_end_offset(), leo);
        for r in all.iter().step_by(5) {
            let got = log
                .read(r.offset, 1, i64::MAX, true)
                .unwrap()
                .slice
                .unwrap()
                .read_to_vec()
                .unwrap();
            assert!(decode(&got).iter().any(|x| x.offset == r.offset));
        }
        log.append_as_leader(
            simple_batch(Compression::None, 1, "x", NOW),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
        log.truncate_to(leo, NOW).unwrap();
        drop(log);
    }
}

/// The child side of `kill_9_while_appending`: appends forever, printing each acknowledged
/// last offset. Run only as a child process.
#[test]
#[ignore]
fn crash_child_writer() {
    let Ok(dir) = std::env::var("WEIR_CRASH_DIR") else {
        return;
    };
    let pdir = PathBuf::from(dir);
    let config = small_config();
    let mut log = if pdir.exists() {
        reopen(&pdir, config, 0)
    } else {
        PartitionLog::create(
            &pdir,
            TopicPartition::new("c", 0),
            uuid::Uuid::new_v4(),
            config,
            NOW,
        )
        .unwrap()
    };
    let stdout = std::io::stdout();
    for i in 0.. {
        let codec = Compression::ALL[i % 5];
        let info = log
            .append_as_leader(
                simple_batch(codec, 1 + i % 6, &format!("k9-{i}"), NOW),
                0,
                NOW,
                AppendOrigin::Client,
            )
            .unwrap();
        let mut out = stdout.lock();
        writeln!(out, "{}", info.last_offset).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn kill_9_while_appending_keeps_every_acknowledged_batch() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("c-0");
    let mut acknowledged = -1i64;
    for round in 0..3 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash_child_writer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("WEIR_CRASH_DIR", &pdir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = 0;
        while seen < 200 + round * 100 {
            let Some(Ok(line)) = lines.next() else { break };
            if let Ok(o) = line.trim().parse::<i64>() {
                acknowledged = acknowledged.max(o);
                seen += 1;
            }
        }
        // SIGKILL while it is still writing.
        unsafe_kill(child.id());
        child.wait().unwrap();
        assert!(seen > 0, "the child wrote nothing");
        // A torn tail and a lost index on top of the kill.
        let mut bases: Vec<i64> = std::fs::read_dir(&pdir)
            .unwrap()
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_suffix(".log")?
                    .parse()
                    .ok()
            })
            .collect();
        bases.sort();
        let active = *bases.last().unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(seg_path(&pdir, active, "log"))
            .unwrap();
        let torn = simple_batch(Compression::Gzip, 4, "torn", NOW);
        f.write_all(&torn[..torn.len() / 3]).unwrap();
        let _ = std::fs::remove_file(seg_path(&pdir, active, "index"));

        let log = reopen(&pdir, small_config(), 0);
        let records = read_all(&log);
        assert!(
            log.log_end_offset() > acknowledged,
            "acknowledged {acknowledged}, log ends at {}",
            log.log_end_offset()
        );
        let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
        assert_eq!(
            offsets,
            (0..log.log_end_offset()).collect::<Vec<_>>(),
            "contiguous, nothing lost or doubled"
        );
        assert!(records
            .iter()
            .all(|r| !r.value.as_deref().unwrap().starts_with(b"torn")));
        drop(log);
    }
}

fn unsafe_kill(pid: u32) {
    // `kill -9`, through the command everyone has, to avoid a libc dependency here.
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
