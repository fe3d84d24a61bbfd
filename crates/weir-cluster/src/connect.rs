//! `etcd.connect`, read as Kafka reads `zookeeper.connect`: etcd's client endpoints, comma
//! separated, then an optional key prefix that lets several clusters share one etcd
//! (`etcd1:2379,etcd2:2379/weir/prod`). Only parsing: nothing here connects.

use std::fmt;

/// etcd's client port when an endpoint names none.
pub const DEFAULT_ETCD_PORT: u16 = 2379;

/// The parsed setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConnect {
    /// `host:port` of each endpoint, in the order given (IPv6 hosts in brackets).
    pub endpoints: Vec<String>,
    /// The key prefix every key of this cluster starts with: empty, or `/a/b` (a leading
    /// slash, none trailing).
    pub prefix: String,
}

impl EtcdConnect {
    /// Parses `HOST[:PORT][,HOST[:PORT]...][/PREFIX]`; an error says what to fix.
    pub fn parse(value: &str) -> Result<EtcdConnect, String> {
        let value = value.trim();
        if value.contains("://") {
            return Err(format!(
                "etcd.connect '{value}': name endpoints as HOST:PORT, without a scheme (etcd \
                 is reached over http)"
            ));
        }
        let (hosts, prefix) = match value.find('/') {
            Some(i) => (&value[..i], &value[i..]),
            None => (value, ""),
        };
        let mut endpoints = Vec::new();
        for host in hosts.split(',').map(str::trim) {
            if host.is_empty() {
                return Err(format!(
                    "etcd.connect '{value}': an empty endpoint; write HOST:PORT[,HOST:PORT...][/prefix]"
                ));
            }
            endpoints.push(endpoint(host).map_err(|e| format!("etcd.connect '{value}': {e}"))?);
        }
        let prefix = prefix.trim_end_matches('/');
        if prefix.split('/').skip(1).any(str::is_empty) {
            return Err(format!(
                "etcd.connect '{value}': the prefix '{prefix}' has an empty path segment"
            ));
        }
        if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "etcd.connect '{value}': the prefix may not hold spaces or control characters"
            ));
        }
        Ok(EtcdConnect {
            endpoints,
            prefix: prefix.to_string(),
        })
    }

    /// The endpoints as URLs the etcd client dials.
    pub fn urls(&self) -> Vec<String> {
        self.endpoints
            .iter()
            .map(|e| format!("http://{e}"))
            .collect()
    }
}

impl fmt::Display for EtcdConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.endpoints.join(","), self.prefix)
    }
}

/// One endpoint as `host:port`, the port defaulted.
fn endpoint(host: &str) -> Result<String, String> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("'{host}': an IPv6 address needs its closing ']'"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("'{host}': expected ':' after ']'"))?,
            ),
        };
        (format!("[{name}]"), port)
    } else {
        match host.rsplit_once(':') {
            Some((n, p)) => (n.to_string(), Some(p)),
            None => (host.to_string(), None),
        }
    };
    if name.is_empty() || name == "[]" {
        return Err(format!("'{host}': no host name"));
    }
    let port = match port {
        None => DEFAULT_ETCD_PORT,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("'{host}': '{p}' is not a port"))?,
    };
    Ok(format!("{name}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_then_an_optional_prefix_as_zookeeper_connect_reads() {
        let c = EtcdConnect::parse("a:1,b:2/weir/prod").unwrap();
        assert_eq!(c.endpoints, ["a:1", "b:2"]);
        assert_eq!(c.prefix, "/weir/prod");
        let c = EtcdConnect::parse("127.0.0.1:2379").unwrap();
        assert_eq!(c.prefix, "");
        assert_eq!(c.urls(), ["http://127.0.0.1:2379"]);
        let c = EtcdConnect::parse("etcd,[::1]:23790,[fe80::1]/x/").unwrap();
        assert_eq!(c.endpoints, ["etcd:2379", "[::1]:23790", "[fe80::1]:2379"]);
        assert_eq!(c.prefix, "/x");
        assert_eq!(c.to_string(), "etcd:2379,[::1]:23790,[fe80::1]:2379/x");
    }

    #[test]
    fn mistakes_are_named() {
        for (bad, says) in [
            ("", "empty endpoint"),
            ("a:1,,b:2", "empty endpoint"),
            ("http://a:1", "without a scheme"),
            ("a:0", "not a port"),
            ("a:x", "not a port"),
            ("[::1", "closing"),
            ("a:1/x//y", "empty path segment"),
            (":1", "no host"),
        ] {
            let e = EtcdConnect::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
