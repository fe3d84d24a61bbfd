//! What the client subcommands share: `--bootstrap` and `--property` settings, a runtime,
//! and the way results are shown (aligned tables for people, `--json` for scripts).

use std::io::Write;

/// The broker to talk to and extra client settings, as every client subcommand takes them.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    /// Any Kafka-compatible broker, HOST:PORT (a comma-separated list works too).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Any Kafka client setting, e.g. --property request.timeout.ms=5000 (repeatable).
    #[arg(long = "property", value_name = "KEY=VALUE")]
    pub properties: Vec<String>,
}

impl ClientArgs {
    /// `bootstrap.servers` and the `--property` pairs, later ones winning; an entry that
    /// is not KEY=VALUE is an error that names it.
    pub fn settings(&self) -> Result<Vec<(String, String)>, String> {
        let mut out = vec![("bootstrap.servers".to_string(), self.bootstrap.clone())];
        for p in &self.properties {
            match p.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    out.retain(|(key, _)| key != k.trim());
                    out.push((k.trim().to_string(), v.trim().to_string()));
                }
                _ => return Err(format!("--property '{p}' is not KEY=VALUE")),
            }
        }
        Ok(out)
    }
}

/// Why a command failed: the user's input (exit 2) or the operation (exit 1).
pub enum Failure {
    Usage(String),
    Failed(String),
}

impl From<weir_client::ClientError> for Failure {
    fn from(e: weir_client::ClientError) -> Self {
        match e {
            weir_client::ClientError::Config(m) => Failure::Usage(m),
            e => Failure::Failed(e.to_string()),
        }
    }
}

/// Runs a client subcommand (`weir <name> ...`) on a runtime of its own, and turns its
/// outcome into the exit code, saying what failed on stderr.
pub fn run_command(
    name: &str,
    command: impl std::future::Future<Output = Result<(), Failure>>,
) -> std::process::ExitCode {
    match runtime().block_on(command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("weir {name}: {msg}");
            std::process::ExitCode::from(2)
        }
        Err(Failure::Failed(msg)) => {
            eprintln!("weir {name}: {msg}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A runtime for one client command: the work is I/O-bound, so one thread does.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Prints rows under a header, each column as wide as its widest cell.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for row in rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
}

/// Prints a JSON value on one line.
pub fn print_json(v: &serde_json::Value) {
    println!("{v}");
}

/// Splits "a=b" into its parts, or says what is wrong with it.
pub fn key_value(s: &str, flag: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{flag} '{s}' is not KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_override_bootstrap_and_each_other() {
        let a = ClientArgs {
            bootstrap: "h:1".into(),
            properties: vec![
                "acks=1".into(),
                "bootstrap.servers=h:2".into(),
                "acks=all".into(),
            ],
        };
        assert_eq!(
            a.settings().unwrap(),
            vec![
                ("bootstrap.servers".to_string(), "h:2".to_string()),
                ("acks".to_string(), "all".to_string())
            ]
        );
        let bad = ClientArgs {
            bootstrap: "h:1".into(),
            properties: vec!["acks".into()],
        };
        assert!(bad.settings().unwrap_err().contains("'acks'"));
    }
}
