//! A property map (Kafka's `key=value` settings) read into typed values: each read names
//! its key and default, and the keys never read are refused at the end, so that a typo is an
//! error and not a silent default. Knows no key by name and nothing of the clients.

use std::collections::BTreeMap;

use crate::error::{ClientError, Result};

/// A bad value for `key`, with what is wrong with it.
pub(crate) fn bad(key: &str, value: &str, what: &str) -> ClientError {
    ClientError::Config(format!("{key}={value}: {what}"))
}

/// Reads typed values out of a property map, remembering which keys were used.
pub(crate) struct Props {
    map: BTreeMap<String, String>,
    used: Vec<&'static str>,
}

impl Props {
    pub(crate) fn new<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Props {
            map: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            used: Vec::new(),
        }
    }

    pub(crate) fn is_set(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    pub(crate) fn string(&mut self, key: &'static str, default: &str) -> String {
        self.used.push(key);
        self.map
            .get(key)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }

    pub(crate) fn int<T: std::str::FromStr + PartialOrd + Copy + std::fmt::Display>(
        &mut self,
        key: &'static str,
        default: T,
        min: T,
    ) -> Result<T> {
        self.used.push(key);
        match self.map.get(key) {
            None => Ok(default),
            Some(v) => {
                let n: T = v.trim().parse().map_err(|_| bad(key, v, "not a number"))?;
                if n < min {
                    return Err(bad(key, v, &format!("must be at least {min}")));
                }
                Ok(n)
            }
        }
    }

    pub(crate) fn bool(&mut self, key: &'static str, default: bool) -> Result<bool> {
        self.used.push(key);
        match self.map.get(key).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if v == "true" => Ok(true),
            Some(v) if v == "false" => Ok(false),
            Some(v) => Err(bad(key, &v, "must be true or false")),
        }
    }

    /// Keys Kafka's Java client accepts that have no meaning here (serializer classes and
    /// the like) are allowed; anything else unused is an error.
    pub(crate) fn finish(self, ignored: &[&str]) -> Result<()> {
        for k in self.map.keys() {
            if !self.used.contains(&k.as_str()) && !ignored.contains(&k.as_str()) {
                return Err(ClientError::Config(format!("unknown setting '{k}'")));
            }
        }
        Ok(())
    }
}
