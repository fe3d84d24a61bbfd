//! How the CLI shows bytes in JSON: a string when they are valid UTF-8, `null` when null,
//! and `{"base64": "..."}` otherwise. Shared by dump-log and, later, consume.

use base64::Engine;
use serde_json::{json, Value};

/// JSON for nullable bytes.
pub fn bytes(b: Option<&[u8]>) -> Value {
    match b {
        None => Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => Value::String(s.to_owned()),
            Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(b) }),
        },
    }
}

/// JSON for a record's headers: `[["name", value], ...]`.
pub fn headers(headers: weir_record::Headers<'_>) -> Value {
    Value::Array(
        headers
            .iter()
            .map(|h| Value::Array(vec![bytes(Some(h.key)), bytes(h.value)]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(bytes(None), Value::Null);
        assert_eq!(bytes(Some(b"h\xc3\xa9")), json!("hé"));
        assert_eq!(bytes(Some(&[0xff, 0])), json!({"base64": "/wA="}));
    }
}
