//! Counting what the producer's delivery reports say: records acknowledged, records
//! failed, and the first failure with the token of its record. `weir produce` and
//! `weir bench` both count with it; it holds no records and prints nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use weir_client::{DeliveryListener, RecordMetadata};

#[derive(Default)]
pub struct Tally {
    acked: AtomicU64,
    failed: AtomicU64,
    /// The first failure: its record's token and the error.
    first_error: Mutex<Option<(u64, String)>>,
}

impl Tally {
    pub fn count(&self, token: u64, result: &weir_client::Result<RecordMetadata>) {
        match result {
            Ok(_) => {
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut f) = self.first_error.lock() {
                    f.get_or_insert_with(|| (token, e.to_string()));
                }
            }
        }
    }

    /// `n` records acknowledged at once.
    pub fn count_acked(&self, n: u64) {
        self.acked.fetch_add(n, Ordering::Relaxed);
    }

    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// The first failure's token and error, if any record failed.
    pub fn first_error(&self) -> Option<(u64, String)> {
        self.first_error.lock().ok().and_then(|f| f.clone())
    }
}

impl DeliveryListener for Tally {
    fn on_delivery(&self, token: u64, result: weir_client::Result<RecordMetadata>) {
        self.count(token, &result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_client::ClientError;

    #[test]
    fn it_keeps_counts_and_the_first_failure() {
        let t = Tally::default();
        let ok = Ok(RecordMetadata {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            timestamp: 2,
            serialized_key_size: -1,
            serialized_value_size: 3,
        });
        t.count(1, &ok);
        t.count(2, &Err(ClientError::Closed));
        t.count(3, &Err(ClientError::Config("later".into())));
        assert_eq!((t.acked(), t.failed()), (1, 2));
        assert_eq!(t.first_error(), Some((2, ClientError::Closed.to_string())));
    }
}
