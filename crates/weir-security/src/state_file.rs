//! The broker's own small state documents — topics, SCRAM users, ACLs, quotas — as JSON
//! `{"version": 1, ...}`: written whole and atomically (a crash leaves the old file or
//! the new one), read back with their version checked.
//!
//! A document lives in a [`Store`]: a file of the data directory for one broker
//! ([`FileStore`]), or a key of the cluster's metadata that every broker watches (the
//! broker provides that store). Changes go through [`update`], which saves the new
//! document only if it still replaces the one it was made from, and otherwise takes the
//! one another broker saved first and makes the change again over it.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Versioned<T> {
    version: u32,
    #[serde(flatten)]
    body: T,
}

/// The file's contents, or `None` if there is no file; an error names the file.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, String> {
    match std::fs::read(path) {
        Ok(bytes) => decode(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// A document from its bytes, its version checked.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let v: Versioned<T> = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if v.version != VERSION {
        return Err(format!("unsupported version {}", v.version));
    }
    Ok(v.body)
}

/// What saving a document did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Saved {
    /// Saved: the document's new revision.
    Done(i64),
    /// Another broker saved first: its document (`None`: it removed it) and revision.
    Moved(Option<(Vec<u8>, i64)>),
}

/// Where a document is kept.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Saves `bytes` if the stored document is still the one at `revision` (0: none).
    fn save(&self, bytes: Vec<u8>, revision: i64) -> Result<Saved, String>;
}

/// One broker's document: a file of its data directory, written whole and atomically.
/// Only this broker writes it, so a save never meets another's.
#[derive(Debug)]
pub struct FileStore(pub PathBuf);

impl Store for FileStore {
    fn save(&self, bytes: Vec<u8>, revision: i64) -> Result<Saved, String> {
        weir_log::checkpoint::write_atomically(&self.0, &bytes)
            .map_err(|e| format!("{}: {e}", self.0.display()))?;
        Ok(Saved::Done(revision + 1))
    }
}

/// A document's value, and the revision of the stored document it came from.
#[derive(Debug)]
pub struct Doc<T> {
    pub value: T,
    pub revision: i64,
}

/// How many times a change is made again over another broker's newer document.
const MAX_SAVE_ATTEMPTS: usize = 8;

/// Makes `change` to the document under `doc`'s lock and saves it through `store`,
/// encoded with `encode`. If another broker saved first, its document (read with
/// `decode`; `None` makes `empty`) becomes the current one and the change is made again
/// over it. The value changes only once saved. `change` returns the new value, or `None`
/// for no change (nothing is saved), and what to return.
pub fn update<T, R>(
    doc: &RwLock<Doc<T>>,
    store: &dyn Store,
    encode_value: impl Fn(&T) -> Result<Vec<u8>, String>,
    decode_value: impl Fn(&[u8]) -> Result<T, String>,
    empty: impl Fn() -> T,
    mut change: impl FnMut(&T) -> Result<(Option<T>, R), String>,
) -> Result<R, String> {
    let mut d = doc.write().unwrap_or_else(|e| e.into_inner());
    for _ in 0..MAX_SAVE_ATTEMPTS {
        let (next, out) = change(&d.value)?;
        let Some(next) = next else {
            return Ok(out);
        };
        match store.save(encode_value(&next)?, d.revision)? {
            Saved::Done(revision) => {
                d.value = next;
                d.revision = revision;
                return Ok(out);
            }
            Saved::Moved(current) => {
                let (value, revision) = match current {
                    Some((bytes, revision)) => (decode_value(&bytes)?, revision),
                    None => (empty(), 0),
                };
                d.value = value;
                d.revision = revision;
            }
        }
    }
    Err("other brokers kept changing it at the same time: try again".into())
}

/// Installs a document another broker saved (seen at `revision`), unless the one held is
/// as new. Returns whether it changed.
pub fn install<T>(doc: &RwLock<Doc<T>>, value: T, revision: i64) -> bool {
    let mut d = doc.write().unwrap_or_else(|e| e.into_inner());
    if revision <= d.revision {
        return false;
    }
    d.value = value;
    d.revision = revision;
    true
}

/// The bytes `write` puts in a file.
pub fn encode<T: Serialize>(body: &T) -> Result<Vec<u8>, String> {
    serde_json::to_vec_pretty(&Versioned {
        version: VERSION,
        body,
    })
    .map_err(|e| e.to_string())
}

/// Replaces the file with `body`, atomically and durably.
pub fn write<T: Serialize>(path: &Path, body: &T) -> Result<(), String> {
    weir_log::checkpoint::write_atomically(path, &encode(body)?)
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Body {
        things: Vec<u32>,
    }

    /// A store another broker saved to first, once.
    #[derive(Debug)]
    struct Raced {
        theirs: std::sync::Mutex<Option<Vec<u8>>>,
        saved: std::sync::Mutex<Vec<(Vec<u8>, i64)>>,
    }

    impl Store for Raced {
        fn save(&self, bytes: Vec<u8>, revision: i64) -> Result<Saved, String> {
            if let Some(theirs) = self.theirs.lock().unwrap().take() {
                return Ok(Saved::Moved(Some((theirs, 7))));
            }
            self.saved.lock().unwrap().push((bytes, revision));
            Ok(Saved::Done(revision + 1))
        }
    }

    #[test]
    fn a_change_is_made_again_over_the_document_another_broker_saved_first() {
        let store = Raced {
            theirs: std::sync::Mutex::new(Some(encode(&Body { things: vec![9] }).unwrap())),
            saved: Default::default(),
        };
        let doc = RwLock::new(Doc {
            value: Body { things: vec![1] },
            revision: 3,
        });
        let seen = update(
            &doc,
            &store,
            encode,
            decode,
            || Body { things: vec![] },
            |current| {
                let mut next = current.things.clone();
                next.push(2);
                Ok((Some(Body { things: next }), current.things.clone()))
            },
        )
        .unwrap();
        assert_eq!(seen, vec![9], "the second attempt saw their document");
        let d = doc.read().unwrap();
        assert_eq!((d.value.things.clone(), d.revision), (vec![9, 2], 8));
        assert_eq!(
            store.saved.lock().unwrap()[0].1,
            7,
            "saved over their revision"
        );
        drop(d);
        // Their later document installs; an older one does not.
        assert!(install(&doc, Body { things: vec![5] }, 9));
        assert!(!install(&doc, Body { things: vec![4] }, 9));
        assert_eq!(doc.read().unwrap().value.things, vec![5]);
    }

    #[test]
    fn a_file_reads_back_and_a_future_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        assert_eq!(read::<Body>(&path).unwrap(), None);
        write(&path, &Body { things: vec![1, 2] }).unwrap();
        assert_eq!(
            read::<Body>(&path).unwrap(),
            Some(Body { things: vec![1, 2] })
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"version\": 1"), "{text}");
        std::fs::write(&path, r#"{"version": 2, "things": []}"#).unwrap();
        assert!(read::<Body>(&path)
            .unwrap_err()
            .contains("unsupported version 2"));
    }
}
