//! The broker's log levels as Kafka's BROKER_LOGGER resources show them
//! (`kafka-configs --entity-type broker-loggers`): DescribeConfigs lists every logger with
//! its level, IncrementalAlterConfigs sets (SET) or clears (DELETE) one while the broker
//! runs. Kafka's loggers are log4j's; Weir's are `tracing` targets, its crates' module paths
//! (`weir_broker`, `weir_log::segment`, …) below the `root` logger.
//!
//! The levels are process-wide, as the `tracing` subscriber they steer is: `weir serve`
//! installs the function that reloads its filter; where nothing is installed (a broker
//! inside a test) levels are kept and described, and change nothing. Changes last until the
//! process ends, as Kafka's do: a restart starts from RUST_LOG again.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use weir_kafka::{ApiError, ErrorCode as E};

/// Kafka's name of the logger every other inherits from.
pub const ROOT: &str = "root";

/// The levels Kafka takes (log4j's), in Kafka's spelling.
pub const LEVELS: &[&str] = &[
    "ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF",
];

/// The crates whose modules are loggers.
const CRATES: &[&str] = &[
    "weir",
    "weir_broker",
    "weir_client",
    "weir_cluster",
    "weir_group",
    "weir_kafka",
    "weir_log",
    "weir_record",
    "weir_security",
    "weir_txn",
];

/// Reloads the process's log filter from `tracing` directives.
pub type Apply = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

struct State {
    /// The root's level, and each logger's own, in Kafka's spelling.
    levels: BTreeMap<String, String>,
    /// RUST_LOG's directives Weir cannot show as a logger's level (span or field filters):
    /// kept, after the levels.
    extra: Vec<String>,
    apply: Option<Apply>,
}

fn state() -> &'static Mutex<State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(|| {
        let directives = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
        Mutex::new(parse(&directives))
    })
}

fn parse(directives: &str) -> State {
    let mut levels = BTreeMap::from([(ROOT.to_string(), "INFO".to_string())]);
    let mut extra = Vec::new();
    for d in directives
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        let (target, level) = match d.split_once('=') {
            Some((t, l)) => (t, l),
            None => (ROOT, d),
        };
        let level = level.to_ascii_uppercase();
        if target.contains(['[', '{']) || !LEVELS.contains(&level.as_str()) {
            extra.push(d.to_string());
        } else {
            levels.insert(target.to_string(), level);
        }
    }
    State {
        levels,
        extra,
        apply: None,
    }
}

/// Called once by `weir serve` with the directives its filter started from and the
/// function that reloads it.
pub fn install(directives: &str, apply: Apply) {
    let mut s = state().lock().unwrap_or_else(|e| e.into_inner());
    *s = parse(directives);
    s.apply = Some(apply);
}

/// Every logger and its level, as DescribeConfigs lists them: root, each crate, and each
/// logger given its own level; a logger without one has its nearest ancestor's.
pub fn describe() -> Vec<(String, String)> {
    let s = state().lock().unwrap_or_else(|e| e.into_inner());
    let mut names: Vec<&str> = CRATES.to_vec();
    names.extend(s.levels.keys().map(String::as_str));
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|n| (n.to_string(), effective(&s.levels, n)))
        .collect()
}

fn effective(levels: &BTreeMap<String, String>, logger: &str) -> String {
    let mut at = logger;
    loop {
        if let Some(l) = levels.get(at) {
            return l.clone();
        }
        match at.rsplit_once("::") {
            Some((parent, _)) => at = parent,
            None => return levels.get(ROOT).cloned().unwrap_or_else(|| "INFO".into()),
        }
    }
}

/// Whether `logger` names one of Weir's: root, a crate, or a module path below one.
fn exists(logger: &str) -> bool {
    logger == ROOT
        || CRATES
            .iter()
            .any(|c| logger == *c || logger.strip_prefix(c).is_some_and(|r| r.starts_with("::")))
}

/// One change: `Some(level)` sets the logger's level, `None` clears it (it takes its
/// ancestor's again).
pub type Change = (String, Option<String>);

/// Checks `changes` as Kafka checks a BROKER_LOGGER resource's: a logger that does not
/// exist or a level log4j does not have is INVALID_CONFIG, clearing the root's level is
/// INVALID_REQUEST.
pub fn check(changes: &[Change]) -> Result<(), ApiError> {
    for (logger, level) in changes {
        if !exists(logger) {
            return Err(ApiError::new(
                E::InvalidConfig,
                format!(
                    "Logger {logger} does not exist! Weir's loggers are {ROOT} and its \
                     crates' module paths ({}, weir_log::segment, …)",
                    CRATES.join(", ")
                ),
            ));
        }
        match level {
            Some(l) if !LEVELS.contains(&l.as_str()) => {
                return Err(ApiError::new(
                    E::InvalidConfig,
                    format!(
                        "Cannot set the log level of {logger} to {l} as it is not a supported \
                         log level. Valid log4j levels are {}",
                        LEVELS.join(", ")
                    ),
                ))
            }
            None if logger == ROOT => {
                return Err(ApiError::new(
                    E::InvalidRequest,
                    format!("Removing the log level of the {ROOT} logger is not allowed"),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks and makes `changes`, and reloads the filter.
pub fn change(changes: &[Change]) -> Result<(), ApiError> {
    check(changes)?;
    let mut s = state().lock().unwrap_or_else(|e| e.into_inner());
    let mut levels = s.levels.clone();
    for (logger, level) in changes {
        match level {
            Some(l) => levels.insert(logger.clone(), l.clone()),
            None => levels.remove(logger),
        };
    }
    if let Some(apply) = &s.apply {
        apply(&directives(&levels, &s.extra)).map_err(|e| {
            ApiError::new(
                E::UnknownServerError,
                format!("reloading the log filter: {e}"),
            )
        })?;
    }
    for (logger, _) in changes {
        tracing::info!(
            "log level of {logger} set to {}",
            effective(&levels, logger)
        );
    }
    s.levels = levels;
    Ok(())
}

/// `tracing` directives for Kafka levels: FATAL is `tracing`'s error, ALL its trace.
fn directives(levels: &BTreeMap<String, String>, extra: &[String]) -> String {
    let level = |l: &str| {
        match l {
            "ALL" => "trace",
            "FATAL" => "error",
            other => return other.to_ascii_lowercase(),
        }
        .to_string()
    };
    let mut out: Vec<String> = levels
        .iter()
        .map(|(t, l)| {
            if t == ROOT {
                level(l)
            } else {
                format!("{t}={}", level(l))
            }
        })
        .collect();
    out.extend(extra.iter().cloned());
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_reads_as_loggers_and_back() {
        let s = parse("warn,weir_broker=debug,weir_log[segment]=trace");
        assert_eq!(s.levels.get(ROOT).unwrap(), "WARN");
        assert_eq!(effective(&s.levels, "weir_broker::server"), "DEBUG");
        assert_eq!(effective(&s.levels, "weir_log"), "WARN");
        assert_eq!(
            directives(&s.levels, &s.extra),
            "warn,weir_broker=debug,weir_log[segment]=trace"
        );
        let mut levels = s.levels.clone();
        levels.insert("weir_log::segment".into(), "FATAL".into());
        levels.insert("weir".into(), "ALL".into());
        assert_eq!(
            directives(&levels, &[]),
            "warn,weir=trace,weir_broker=debug,weir_log::segment=error"
        );
    }

    #[test]
    fn kafka_s_refusals() {
        let code = |c: &[Change]| check(c).unwrap_err().code;
        assert_eq!(
            code(&[("kafka.server.ReplicaManager".into(), Some("DEBUG".into()))]),
            E::InvalidConfig.code()
        );
        assert_eq!(
            code(&[("weir_broker".into(), Some("debug".into()))]),
            E::InvalidConfig.code()
        );
        assert_eq!(code(&[(ROOT.into(), None)]), E::InvalidRequest.code());
        assert!(check(&[
            ("weir_log::segment".into(), Some("TRACE".into())),
            ("weir_broker".into(), None),
            (ROOT.into(), Some("OFF".into())),
        ])
        .is_ok());
        assert!(!exists("weir_brokerx"));
    }
}
