//! `weir quotas`: client quotas on any Kafka-compatible broker, as `kafka-configs
//! --entity-type users|clients|ips` sets and shows them.

use std::process::ExitCode;

use serde_json::json;
use weir_client::admin::{Admin, QuotaAlteration, QuotaEntity, QuotaMatch};

use crate::cli::{self, ClientArgs, Failure};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

/// The entity: a user, a client id, or both; or an IP address; each by name or as the
/// default.
#[derive(clap::Args)]
struct Who {
    /// The user (the principal's name: alice for User:alice).
    #[arg(long, conflicts_with = "user_default")]
    user: Option<String>,
    /// Every user without a quota of its own.
    #[arg(long)]
    user_default: bool,
    /// The client id.
    #[arg(long, conflicts_with = "client_id_default")]
    client_id: Option<String>,
    /// Every client id without a quota of its own.
    #[arg(long)]
    client_id_default: bool,
    /// An IP address (its quota is connection_creation_rate).
    #[arg(long, conflicts_with_all = ["ip_default", "user", "user_default", "client_id", "client_id_default"])]
    ip: Option<String>,
    /// Every IP address without a quota of its own.
    #[arg(long, conflicts_with_all = ["user", "user_default", "client_id", "client_id_default"])]
    ip_default: bool,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Set or remove quotas of one entity.
    Alter {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        who: Who,
        /// producer_byte_rate=N or consumer_byte_rate=N, bytes per second,
        /// controller_mutation_rate=R, partitions created or deleted per second, or for an IP
        /// connection_creation_rate=N, connections per second (repeatable).
        #[arg(long = "add-config", value_name = "KEY=VALUE")]
        add: Vec<String>,
        /// A quota to remove (repeatable).
        #[arg(long = "delete-config", value_name = "KEY")]
        delete: Vec<String>,
    },
    /// Show quotas: all, or those of the entity named.
    Describe {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        who: Who,
        #[arg(long)]
        json: bool,
    },
}

impl Who {
    fn user(&self) -> Option<Option<String>> {
        if self.user_default {
            Some(None)
        } else {
            self.user.clone().map(Some)
        }
    }

    fn client_id(&self) -> Option<Option<String>> {
        if self.client_id_default {
            Some(None)
        } else {
            self.client_id.clone().map(Some)
        }
    }

    fn entity(&self) -> QuotaEntity {
        let mut e = Vec::new();
        if let Some(u) = self.user() {
            e.push(("user".to_string(), u));
        }
        if let Some(c) = self.client_id() {
            e.push(("client-id".to_string(), c));
        }
        if self.ip_default {
            e.push(("ip".to_string(), None));
        } else if let Some(ip) = &self.ip {
            e.push(("ip".to_string(), Some(ip.clone())));
        }
        e
    }
}

fn admin(client: &ClientArgs) -> Result<Admin, Failure> {
    let settings = client.settings().map_err(Failure::Usage)?;
    Ok(Admin::from_properties(settings)?)
}

fn show(entity: &QuotaEntity) -> String {
    entity
        .iter()
        .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("<default>")))
        .collect::<Vec<_>>()
        .join(",")
}

async fn execute(command: Command) -> Result<(), Failure> {
    match command {
        Command::Alter {
            client,
            who,
            add,
            delete,
        } => {
            let entity = who.entity();
            if entity.is_empty() {
                return Err(Failure::Usage(
                    "name the entity: --user, --user-default, --client-id or --client-id-default"
                        .into(),
                ));
            }
            let mut changes = Vec::new();
            for a in &add {
                let (k, v) = cli::key_value(a, "--add-config").map_err(Failure::Usage)?;
                let v: f64 = v.parse().map_err(|_| {
                    Failure::Usage(format!("--add-config {a}: {v} is not a number"))
                })?;
                changes.push((k, Some(v)));
            }
            changes.extend(delete.into_iter().map(|k| (k, None)));
            if changes.is_empty() {
                return Err(Failure::Usage(
                    "nothing to change: --add-config or --delete-config".into(),
                ));
            }
            let a = admin(&client)?;
            let alteration = QuotaAlteration {
                entity: entity.clone(),
                changes,
            };
            for r in a.alter_client_quotas(&[alteration], false).await? {
                r.map_err(|e| Failure::Failed(format!("{}: {e}", show(&entity))))?;
            }
            eprintln!("quotas of {} changed", show(&entity));
            Ok(())
        }
        Command::Describe { client, who, json } => {
            let components: Vec<(String, QuotaMatch)> = who
                .entity()
                .into_iter()
                .map(|(t, side)| (t, side.map_or(QuotaMatch::Default, QuotaMatch::Exactly)))
                .collect();
            let strict = !components.is_empty();
            let a = admin(&client)?;
            let found = a.describe_client_quotas(&components, strict).await?;
            if json {
                let out: Vec<_> = found
                    .iter()
                    .map(|(e, v)| {
                        let entity: serde_json::Map<String, serde_json::Value> =
                            e.iter().map(|(t, n)| (t.clone(), json!(n))).collect();
                        json!({"entity": entity, "quotas": v})
                    })
                    .collect();
                cli::print_json(&json!(out));
            } else {
                let rows: Vec<Vec<String>> = found
                    .iter()
                    .flat_map(|(e, v)| {
                        v.iter()
                            .map(move |(k, val)| vec![show(e), k.clone(), format!("{val}")])
                    })
                    .collect();
                cli::print_table(&["ENTITY", "QUOTA", "VALUE"], &rows);
            }
            Ok(())
        }
    }
}

pub fn run(args: Args) -> ExitCode {
    cli::run_command("quotas", execute(args.command))
}
