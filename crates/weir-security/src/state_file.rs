//! The broker's own small state files — topics, SCRAM users, ACLs, quotas — as JSON
//! `{"version": 1, ...}`: written whole and atomically (a crash leaves the old file or
//! the new one), read back with their version checked.

use std::path::Path;

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
        Ok(bytes) => {
            let v: Versioned<T> =
                serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            if v.version != VERSION {
                return Err(format!(
                    "{}: unsupported version {}",
                    path.display(),
                    v.version
                ));
            }
            Ok(Some(v.body))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
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
