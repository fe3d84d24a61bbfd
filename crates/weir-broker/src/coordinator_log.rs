//! Reading a coordinator's partition back (`__consumer_offsets`, `__transaction_state`):
//! every record from the log start to its end, in offset order, with the producer of a
//! transactional batch, and the COMMIT and ABORT markers between them.

use weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES;
use weir_record::{ControlRecordType, EndTransactionMarker, LogEntries, LogEntry};

use crate::partition::Partition;

/// How much of the log one read takes.
const READ_BYTES: usize = 8 << 20;

/// One thing a coordinator's log holds.
pub(crate) enum Logged<'a> {
    Record {
        offset: i64,
        key: &'a [u8],
        value: Option<&'a [u8]>,
        /// The producer id of a transactional batch (its records count only once a COMMIT
        /// marker of that producer follows).
        txn_producer: Option<i64>,
    },
    Marker {
        producer_id: i64,
        commit: bool,
    },
}

/// Calls `each` for every keyed record and transaction marker of `p`, in offset order.
pub(crate) fn read(p: &Partition, mut each: impl FnMut(Logged<'_>)) -> Result<(), String> {
    let log = p.lock_log().map_err(|e| e.to_string())?;
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let data = log
            .read(offset, READ_BYTES, i64::MAX, true)
            .map_err(|e| e.to_string())?;
        let Some(slice) = data.slice else { break };
        let bytes = slice.read_to_vec().map_err(|e| e.to_string())?;
        let mut next = offset;
        for item in LogEntries::new(&bytes) {
            let Ok((_, entry)) = item else { break };
            next = next.max(entry.last_offset() + 1);
            let txn_producer = match &entry {
                LogEntry::V2(b) if b.is_control() => {
                    let marker = b.records(MAX_DECOMPRESSED_BATCH_BYTES).ok().and_then(|rs| {
                        let r = rs.iter().next()?.ok()?;
                        EndTransactionMarker::parse(r.key, r.value).ok()
                    });
                    if let Some(m) = marker {
                        each(Logged::Marker {
                            producer_id: b.producer_id(),
                            commit: m.kind == ControlRecordType::Commit,
                        });
                    }
                    continue;
                }
                LogEntry::V2(b) if b.is_transactional() => Some(b.producer_id()),
                _ => None,
            };
            let Ok(recs) = entry.records(MAX_DECOMPRESSED_BATCH_BYTES) else {
                continue;
            };
            for r in recs.iter().flatten() {
                if r.offset >= offset {
                    if let Some(key) = r.key {
                        each(Logged::Record {
                            offset: r.offset,
                            key,
                            value: r.value,
                            txn_producer,
                        });
                    }
                }
            }
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok(())
}
