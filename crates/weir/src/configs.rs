//! `weir configs`: the configs of a topic, a broker, every broker's defaults or a group on
//! any Kafka-compatible broker, as `kafka-configs --entity-type topics|brokers|groups` shows
//! and changes them (`--entity-default` is `--broker-defaults`).

use std::process::ExitCode;

use serde_json::json;
use weir_client::admin::{Admin, AlterConfigOp, ConfigResource};

use crate::cli::{self, ClientArgs, Failure};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

/// Whose configs: one topic, one broker, every broker's dynamic defaults, or one group.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
struct Entity {
    /// A topic.
    #[arg(long)]
    topic: Option<String>,
    /// A broker, by id.
    #[arg(long)]
    broker: Option<i32>,
    /// The defaults every broker takes (a dynamic config set for the whole cluster).
    #[arg(long)]
    broker_defaults: bool,
    /// A consumer group (its own session timeout, heartbeat interval, …).
    #[arg(long)]
    group: Option<String>,
}

impl Entity {
    fn resource(&self) -> ConfigResource {
        match (&self.topic, self.broker, &self.group) {
            (Some(t), _, _) => ConfigResource::Topic(t.clone()),
            (None, Some(b), _) => ConfigResource::Broker(b),
            (None, None, Some(g)) => ConfigResource::Group(g.clone()),
            (None, None, None) => ConfigResource::BrokerDefaults,
        }
    }

    fn show(&self) -> String {
        match self.resource() {
            ConfigResource::Topic(t) => format!("topic '{t}'"),
            ConfigResource::Broker(b) => format!("broker {b}"),
            ConfigResource::BrokerDefaults => "the brokers' defaults".into(),
            ConfigResource::Group(g) => format!("group '{g}'"),
        }
    }
}

#[derive(clap::Subcommand)]
enum Command {
    /// Set or remove configs (only those named change).
    Alter {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        entity: Entity,
        /// KEY=VALUE to set (repeatable), e.g. --add-config log.retention.ms=3600000.
        #[arg(long = "add-config", value_name = "KEY=VALUE")]
        add: Vec<String>,
        /// A config to remove, back to the next source's value (repeatable).
        #[arg(long = "delete-config", value_name = "KEY")]
        delete: Vec<String>,
    },
    /// Show configs, with where each value comes from.
    Describe {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        entity: Entity,
        /// Every config, defaults included (otherwise only those set somewhere).
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
}

fn admin(client: &ClientArgs) -> Result<Admin, Failure> {
    let settings = client.settings().map_err(Failure::Usage)?;
    Ok(Admin::from_properties(settings)?)
}

async fn execute(command: Command) -> Result<(), Failure> {
    match command {
        Command::Alter {
            client,
            entity,
            add,
            delete,
        } => {
            let mut ops = Vec::new();
            for a in &add {
                let (k, v) = cli::key_value(a, "--add-config").map_err(Failure::Usage)?;
                ops.push(AlterConfigOp::Set(k, v));
            }
            ops.extend(delete.into_iter().map(AlterConfigOp::Delete));
            if ops.is_empty() {
                return Err(Failure::Usage(
                    "nothing to change: --add-config or --delete-config".into(),
                ));
            }
            let a = admin(&client)?;
            a.alter_configs(&entity.resource(), &ops, false)
                .await
                .map_err(|e| Failure::Failed(format!("{}: {e}", entity.show())))?;
            eprintln!("configs of {} changed", entity.show());
            Ok(())
        }
        Command::Describe {
            client,
            entity,
            all,
            json,
        } => {
            let a = admin(&client)?;
            let entries: Vec<_> = a
                .describe_configs(&entity.resource())
                .await?
                .into_iter()
                .filter(|c| all || !c.is_default())
                .collect();
            if json {
                let out: Vec<_> = entries
                    .iter()
                    .map(|c| {
                        json!({
                            "name": c.name,
                            "value": c.value,
                            "source": c.source.name(),
                            "read_only": c.read_only,
                            "sensitive": c.sensitive,
                        })
                    })
                    .collect();
                cli::print_json(&json!(out));
            } else {
                let rows: Vec<Vec<String>> = entries
                    .iter()
                    .map(|c| {
                        vec![
                            c.name.clone(),
                            c.value.clone().unwrap_or_else(|| "(hidden)".into()),
                            c.source.name().to_string(),
                        ]
                    })
                    .collect();
                cli::print_table(&["CONFIG", "VALUE", "SOURCE"], &rows);
            }
            Ok(())
        }
    }
}

pub fn run(args: Args) -> ExitCode {
    cli::run_command("configs", execute(args.command))
}
