//! `weir users`: SCRAM credentials in a stopped broker's data directory, for the first
//! administrator (Kafka's `kafka-storage format --add-scram`). A running broker takes its
//! users through AlterUserScramCredentials instead; this refuses a directory in use.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args as ClapArgs, Subcommand};
use weir_security::sasl::{MAX_ITERATIONS, MIN_ITERATIONS};
use weir_security::{Credential, Scram, Users};

#[derive(ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Add a user, or replace its credential for one mechanism.
    Add {
        /// The user name (the principal is User:NAME).
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, default_value = "SCRAM-SHA-256")]
        mechanism: String,
        /// Read the password from stdin (its first line), so it stays out of the shell's
        /// history and the process list.
        #[arg(long, required = true)]
        password_stdin: bool,
        #[arg(long, default_value_t = 4096)]
        iterations: u32,
        /// The broker's data directory (its first log.dirs entry), broker stopped.
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Remove a user's credential for one mechanism.
    Delete {
        name: String,
        #[arg(long, default_value = "SCRAM-SHA-256")]
        mechanism: String,
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// List the users and their mechanisms.
    List {
        #[arg(long)]
        data_dir: PathBuf,
    },
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("weir users: {msg}");
    ExitCode::FAILURE
}

/// Takes the lock of a stopped broker's data directory, so that no broker starts on it
/// while a command changes it; the lock lasts as long as the returned file. `instead`
/// says how to make the change on a running broker.
pub fn claim_stopped(dir: &std::path::Path, instead: &str) -> Result<std::fs::File, String> {
    match weir_log::lock_data_dir(dir) {
        Ok(lock) => Ok(lock),
        Err(weir_log::DataDirLock::InUse) => Err(format!(
            "a broker is running on {}; {instead}",
            dir.display()
        )),
        Err(weir_log::DataDirLock::Failed(e)) => Err(format!("{}: {e}", dir.display())),
    }
}

/// The users of a stopped broker's data directory, with the directory's lock.
fn open(dir: &std::path::Path) -> Result<(Users, std::fs::File), String> {
    let lock = claim_stopped(dir, "change users through it (AlterUserScramCredentials)")?;
    Ok((Users::load(dir)?, lock))
}

fn mechanism(name: &str) -> Result<Scram, String> {
    Scram::from_name(&name.to_ascii_uppercase())
        .ok_or_else(|| format!("--mechanism {name}: use SCRAM-SHA-256 or SCRAM-SHA-512"))
}

pub fn run(args: Args) -> ExitCode {
    let result = match args.command {
        Cmd::Add {
            name,
            mechanism: m,
            password_stdin: _,
            iterations,
            data_dir,
        } => (|| {
            let mech = mechanism(&m)?;
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
                return Err(format!(
                    "--iterations {iterations}: use {MIN_ITERATIONS} to {MAX_ITERATIONS}"
                ));
            }
            if name.is_empty() {
                return Err("the user name is empty".into());
            }
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .map_err(|e| format!("reading the password: {e}"))?;
            let password = input.lines().next().unwrap_or("");
            if password.is_empty() {
                return Err("no password on stdin".into());
            }
            let (users, _lock) = open(&data_dir)?;
            let cred = Credential::from_password(mech, password, iterations)?;
            users.change(vec![(name.clone(), mech, cred)], vec![])?;
            eprintln!("weir users: {name} can authenticate with {}", mech.name());
            Ok(())
        })(),
        Cmd::Delete {
            name,
            mechanism: m,
            data_dir,
        } => (|| {
            let mech = mechanism(&m)?;
            let (users, _lock) = open(&data_dir)?;
            if users.get(&name, mech).is_none() {
                return Err(format!("{name} has no {} credential", mech.name()));
            }
            users.change(vec![], vec![(name, mech)])
        })(),
        Cmd::List { data_dir } => (|| {
            let (users, _lock) = open(&data_dir)?;
            for (name, mechs) in users.describe() {
                let list: Vec<String> = mechs
                    .iter()
                    .map(|(m, i)| format!("{} ({i} iterations)", m.name()))
                    .collect();
                println!("{name}\t{}", list.join(", "));
            }
            Ok(())
        })(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
