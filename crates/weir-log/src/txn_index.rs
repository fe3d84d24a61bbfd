//! Kafka's aborted-transaction index, `<base offset>.txnindex`: one 34-byte entry for each
//! transaction that an ABORT marker in this segment closed on this partition, so that a
//! read_committed fetch can tell the consumer which producers' records to drop without
//! reading the log again. An entry is, big-endian: version i16 (0), producer id i64, the
//! transaction's first offset i64, its last offset i64 (the ABORT marker's), and the last
//! stable offset i64 when the marker was written (the first offset of the oldest
//! transaction of another producer still open then, or the marker's offset + 1).
//!
//! Entries are appended in order of last offset and cut when the log is truncated. The
//! file exists only once a segment has an entry; most segments have none, as in Kafka.
//! The entries are few (one per aborted transaction), so they are also kept in memory:
//! a fetch looks them up without reading the file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
/// The size of one entry on disk.
pub const ENTRY_SIZE: usize = 34;
const VERSION: i16 = 0;

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The offset of the ABORT marker.
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut out = [0u8; ENTRY_SIZE];
        out[0..2].copy_from_slice(&VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8; ENTRY_SIZE]) -> io::Result<Self> {
        let version = i16::from_be_bytes([bytes[0], bytes[1]]);
        if version != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("aborted transaction entry of version {version} (only 0 exists)"),
            ));
        }
        let at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            i64::from_be_bytes(b)
        };
        Ok(AbortedTxn {
            producer_id: at(2),
            first_offset: at(10),
            last_offset: at(18),
            last_stable_offset: at(26),
        })
    }
}

/// What a search of the indexes found (Kafka's `TxnIndexSearchResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnSearch {
    pub aborted: Vec<AbortedTxn>,
    /// An entry's last stable offset reached the upper bound: later segments can hold no
    /// transaction that overlaps the range, so the search may stop here.
    pub complete: bool,
}

/// The aborted transactions of one segment.
#[derive(Debug)]
pub struct TransactionIndex {
    path: PathBuf,
    base_offset: i64,
    entries: Vec<AbortedTxn>,
}

impl TransactionIndex {
    /// The index of the segment at `base_offset`, read from `path` if the file exists. A
    /// torn last entry (a crash while appending) is cut off; an entry that is not a valid
    /// version-0 entry is an error, and the caller rebuilds the index from the log.
    pub fn open(path: &Path, base_offset: i64) -> io::Result<Self> {
        let mut index = TransactionIndex::empty(path, base_offset);
        let data = match fs::read(path) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(index),
            Err(e) => return Err(e),
        };
        let whole = data.len() / ENTRY_SIZE * ENTRY_SIZE;
        for chunk in data[..whole].chunks_exact(ENTRY_SIZE) {
            let entry: &[u8; ENTRY_SIZE] = chunk.try_into().expect("chunks of ENTRY_SIZE");
            index.entries.push(AbortedTxn::decode(entry)?);
        }
        if whole != data.len() {
            tracing::warn!(
                "{}: {} bytes of a torn entry at the end; cutting them off",
                path.display(),
                data.len() - whole
            );
            OpenOptions::new()
                .write(true)
                .open(path)?
                .set_len(whole as u64)?;
        }
        Ok(index)
    }

    /// An index with no entries at `path`, whatever the file holds (it is about to be
    /// rebuilt: `reset` removes the file).
    pub fn empty(path: &Path, base_offset: i64) -> Self {
        TransactionIndex {
            path: path.to_path_buf(),
            base_offset,
            entries: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends an entry; its last offset must be past every entry's (markers are appended
    /// to the log in offset order), and not before the segment.
    pub fn append(&mut self, txn: AbortedTxn) -> io::Result<()> {
        if let Some(last) = self.entries.last() {
            if txn.last_offset <= last.last_offset {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: aborted transaction ending at {} after one ending at {}",
                        self.path.display(),
                        txn.last_offset,
                        last.last_offset
                    ),
                ));
            }
        }
        if txn.last_offset < self.base_offset {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: aborted transaction ending at {}, before the segment's base {}",
                    self.path.display(),
                    txn.last_offset,
                    self.base_offset
                ),
            ));
        }
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        f.write_all(&txn.encode())?;
        self.entries.push(txn);
        Ok(())
    }

    /// Forces the file to disk (with its segment, at a flush or a roll).
    pub fn flush(&self) -> io::Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        File::open(&self.path)?.sync_all()
    }

    /// Drops the entries whose marker is at or after `offset` (the log was truncated there).
    pub fn truncate_to(&mut self, offset: i64) -> io::Result<()> {
        let keep = self.entries.partition_point(|t| t.last_offset < offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        if keep == 0 {
            return self.remove_file();
        }
        OpenOptions::new()
            .write(true)
            .open(&self.path)?
            .set_len((keep * ENTRY_SIZE) as u64)
    }

    /// Forgets every entry and removes the file (before a rebuild from the log).
    pub fn reset(&mut self) -> io::Result<()> {
        self.entries.clear();
        self.remove_file()
    }

    fn remove_file(&self) -> io::Result<()> {
        match fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Moves the file (a segment being deleted or replaced renames its files).
    pub fn rename_to(&mut self, to: &Path) -> io::Result<()> {
        match fs::rename(&self.path, to) {
            // Most segments have no `.txnindex` file.
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        self.path = to.to_path_buf();
        Ok(())
    }

    /// Adds to `out` the aborted transactions that overlap `[fetch_offset, upper_bound)`,
    /// as Kafka's `collectAbortedTxns` does; says whether the search is complete.
    pub fn collect_aborted(&self, fetch_offset: i64, upper_bound: i64, out: &mut TxnSearch) {
        for t in &self.entries {
            if t.last_offset >= fetch_offset && t.first_offset < upper_bound {
                out.aborted.push(*t);
            }
            if t.last_stable_offset >= upper_bound {
                out.complete = true;
                return;
            }
        }
    }

    /// Kafka's sanity check: no entry ends before the segment begins.
    pub fn sanity_check(&self) -> Result<(), String> {
        match self
            .entries
            .iter()
            .find(|t| t.last_offset < self.base_offset)
        {
            Some(t) => Err(format!(
                "{}: an aborted transaction ends at {}, before the segment's base {}",
                self.path.display(),
                t.last_offset,
                self.base_offset
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn entries_are_kafkas_34_bytes() {
        let t = txn(0x0102030405060708, 10, 20, 21);
        let bytes = t.encode();
        assert_eq!(
            bytes.to_vec(),
            [
                vec![0, 0],
                0x0102030405060708i64.to_be_bytes().to_vec(),
                10i64.to_be_bytes().to_vec(),
                20i64.to_be_bytes().to_vec(),
                21i64.to_be_bytes().to_vec(),
            ]
            .concat()
        );
        assert_eq!(AbortedTxn::decode(&bytes).unwrap(), t);
        let mut v1 = bytes;
        v1[1] = 1;
        assert!(AbortedTxn::decode(&v1).is_err());
    }

    #[test]
    fn append_reopen_truncate_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{:020}{TXN_INDEX_SUFFIX}", 100));
        let mut idx = TransactionIndex::open(&path, 100).unwrap();
        assert!(idx.is_empty() && !path.exists(), "no file until an entry");
        idx.append(txn(1, 100, 105, 106)).unwrap();
        idx.append(txn(2, 101, 110, 111)).unwrap();
        idx.append(txn(1, 112, 120, 121)).unwrap();
        assert!(idx.append(txn(3, 115, 120, 121)).is_err(), "out of order");
        assert!(TransactionIndex::open(&path, 100)
            .unwrap()
            .append(txn(3, 1, 99, 100))
            .is_err());
        idx.flush().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 3 * ENTRY_SIZE as u64);

        let reopened = TransactionIndex::open(&path, 100).unwrap();
        assert_eq!(reopened.entries(), idx.entries());
        assert!(reopened.sanity_check().is_ok());

        // A crash half-way through an append leaves a torn entry: it is cut off.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&txn(4, 121, 130, 131).encode()[..20]).unwrap();
        drop(f);
        let mut reopened = TransactionIndex::open(&path, 100).unwrap();
        assert_eq!(reopened.entries().len(), 3);
        assert_eq!(fs::metadata(&path).unwrap().len(), 3 * ENTRY_SIZE as u64);

        reopened.truncate_to(110).unwrap();
        assert_eq!(reopened.entries(), &[txn(1, 100, 105, 106)]);
        assert_eq!(fs::metadata(&path).unwrap().len(), ENTRY_SIZE as u64);
        reopened.truncate_to(100).unwrap();
        assert!(reopened.is_empty() && !path.exists());

        // An entry ending before its segment fails the sanity check.
        fs::write(&path, txn(1, 5, 50, 51).encode()).unwrap();
        assert!(TransactionIndex::open(&path, 100)
            .unwrap()
            .sanity_check()
            .is_err());
    }

    #[test]
    fn a_search_finds_overlapping_aborts_and_stops_at_the_stable_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = TransactionIndex::open(&dir.path().join("0.txnindex"), 0).unwrap();
        // pid 1 aborts [0, 10] while pid 2's transaction from 5 is open; pid 2 aborts
        // [5, 20]; pid 3 aborts [30, 40] with nothing else open.
        idx.append(txn(1, 0, 10, 5)).unwrap();
        idx.append(txn(2, 5, 20, 21)).unwrap();
        idx.append(txn(3, 30, 40, 41)).unwrap();
        let search = |from, upper| {
            let mut out = TxnSearch::default();
            idx.collect_aborted(from, upper, &mut out);
            out
        };
        // A fetch of [0, 8): pid 1's transaction overlaps; pid 2's, open at 5, too; the
        // search stops at pid 2's entry, whose stable offset (21) passes the bound.
        let s = search(0, 8);
        assert_eq!(
            s.aborted.iter().map(|t| t.producer_id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert!(s.complete);
        // [11, 25): pid 1 ended before it; pid 2 overlaps; pid 3 starts after it.
        let s = search(11, 25);
        assert_eq!(
            s.aborted.iter().map(|t| t.producer_id).collect::<Vec<_>>(),
            vec![2]
        );
        assert!(s.complete, "pid 3's stable offset 41 passes 25");
        // [41, 50): nothing here, and later segments must be searched too.
        let s = search(41, 50);
        assert!(s.aborted.is_empty() && !s.complete);
    }
}
