//! `weir acls`: add, remove and list ACLs (Kafka's `kafka-acls.sh`), on a running broker
//! through CreateAcls / DescribeAcls / DeleteAcls (`--bootstrap`, any Kafka-compatible
//! broker), or in a stopped broker's data directory (`--data-dir`), for the first rules
//! before anyone can log in to make them.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use weir_client::admin::Admin;
use weir_kafka::acl::{
    AclBinding, AclBindingFilter, Operation, PatternFilter, PatternType, Permission, ResourceType,
    CLUSTER_NAME,
};
use weir_security::Authorizer;

use crate::cli::{self, ClientArgs, Failure};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Add ACLs: every combination of the principals, hosts and operations given.
    Add {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        resource: Resource,
        #[command(flatten)]
        entries: Entries,
    },
    /// Remove ACLs: those the principals, hosts and operations given describe, or every
    /// ACL of the resource when none are given.
    Remove {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        resource: Resource,
        #[command(flatten)]
        entries: Entries,
    },
    /// List ACLs (all, or those of a resource or a principal).
    List {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        resource: Resource,
        /// Only the ACLs of this principal.
        #[arg(long)]
        principal: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

/// Where the ACLs are: a running broker, or a stopped one's data directory.
#[derive(clap::Args)]
struct Target {
    #[command(flatten)]
    client: ClientArgs,
    /// Change the data directory (the first log.dirs entry) of a stopped broker instead.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// The resource the ACLs are for.
#[derive(clap::Args)]
struct Resource {
    #[arg(long, conflicts_with_all = ["group", "cluster", "transactional_id"])]
    topic: Option<String>,
    #[arg(long, conflicts_with_all = ["cluster", "transactional_id"])]
    group: Option<String>,
    #[arg(long, conflicts_with = "transactional_id")]
    cluster: bool,
    #[arg(long)]
    transactional_id: Option<String>,
    /// literal or prefixed (add); also any or match to list or remove. Default: literal
    /// to add or remove, any to list.
    #[arg(long)]
    resource_pattern_type: Option<String>,
}

/// Who, from where, and what.
#[derive(clap::Args)]
struct Entries {
    /// A principal allowed, e.g. User:alice, or User:* for everyone (repeatable).
    #[arg(long)]
    allow_principal: Vec<String>,
    /// A principal denied (repeatable). DENY wins over ALLOW.
    #[arg(long)]
    deny_principal: Vec<String>,
    /// A client address the ALLOW entries are for (repeatable; default every host).
    #[arg(long)]
    allow_host: Vec<String>,
    /// A client address the DENY entries are for (repeatable; default every host).
    #[arg(long)]
    deny_host: Vec<String>,
    /// read, write, create, delete, alter, describe, describe-configs, alter-configs,
    /// idempotent-write, cluster-action or all (repeatable; default all).
    #[arg(long)]
    operation: Vec<String>,
}

fn usage(msg: impl Into<String>) -> Failure {
    Failure::Usage(msg.into())
}

impl Resource {
    /// The resource named, if one is.
    fn named(&self) -> Option<(ResourceType, String)> {
        if let Some(t) = &self.topic {
            Some((ResourceType::Topic, t.clone()))
        } else if let Some(g) = &self.group {
            Some((ResourceType::Group, g.clone()))
        } else if let Some(t) = &self.transactional_id {
            Some((ResourceType::TransactionalId, t.clone()))
        } else {
            self.cluster
                .then(|| (ResourceType::Cluster, CLUSTER_NAME.to_string()))
        }
    }

    fn pattern(&self, default: PatternFilter) -> Result<PatternFilter, Failure> {
        match self
            .resource_pattern_type
            .as_deref()
            .map(str::to_ascii_lowercase)
        {
            None => Ok(default),
            Some(p) if p == "any" => Ok(PatternFilter::Any),
            Some(p) if p == "match" => Ok(PatternFilter::Match),
            Some(p) => PatternType::parse(&p)
                .map(PatternFilter::Exactly)
                .ok_or_else(|| {
                    usage(format!(
                        "--resource-pattern-type {p}: use literal, prefixed, any or match"
                    ))
                }),
        }
    }
}

impl Entries {
    fn operations(&self) -> Result<Vec<Operation>, Failure> {
        self.operation
            .iter()
            .map(|o| {
                Operation::parse(o).ok_or_else(|| {
                    usage(format!(
                        "--operation {o}: not one of Kafka's operations (read, write, create, \
                         delete, alter, describe, describe-configs, alter-configs, \
                         idempotent-write, cluster-action, all)"
                    ))
                })
            })
            .collect()
    }

    /// (permission, principal, host) for each entry; hosts default to every host.
    fn who(&self) -> Vec<(Permission, String, String)> {
        let mut out = Vec::new();
        for (perm, principals, hosts) in [
            (Permission::Allow, &self.allow_principal, &self.allow_host),
            (Permission::Deny, &self.deny_principal, &self.deny_host),
        ] {
            let hosts = if hosts.is_empty() {
                vec!["*".to_string()]
            } else {
                hosts.clone()
            };
            for p in principals {
                for h in &hosts {
                    out.push((perm, p.clone(), h.clone()));
                }
            }
        }
        out
    }
}

/// The ACLs `add` creates.
fn bindings(resource: &Resource, entries: &Entries) -> Result<Vec<AclBinding>, Failure> {
    let (rt, name) = resource.named().ok_or_else(|| {
        usage("name a resource: --topic, --group, --cluster or --transactional-id")
    })?;
    let pattern_type = match resource.pattern(PatternFilter::Exactly(PatternType::Literal))? {
        PatternFilter::Exactly(t) => t,
        _ => return Err(usage("ACLs are added with a literal or prefixed pattern")),
    };
    let who = entries.who();
    if who.is_empty() {
        return Err(usage("name who: --allow-principal or --deny-principal"));
    }
    let mut ops = entries.operations()?;
    if ops.is_empty() {
        ops.push(Operation::All);
    }
    let mut out = Vec::new();
    for (permission, principal, host) in who {
        for &operation in &ops {
            let b = AclBinding {
                resource_type: rt,
                resource_name: name.clone(),
                pattern_type,
                principal: principal.clone(),
                host: host.clone(),
                operation,
                permission,
            };
            b.validate().map_err(usage)?;
            out.push(b);
        }
    }
    Ok(out)
}

/// The filters `remove` and `list` use.
fn filters(
    resource: &Resource,
    entries: &Entries,
    default_pattern: PatternFilter,
) -> Result<Vec<AclBindingFilter>, Failure> {
    let named = resource.named();
    let base = AclBindingFilter {
        resource_type: named.as_ref().map(|(t, _)| *t),
        resource_name: named.map(|(_, n)| n),
        pattern: resource.pattern(default_pattern)?,
        ..AclBindingFilter::any()
    };
    let ops = entries.operations()?;
    let who = entries.who();
    let mut out = Vec::new();
    let whos: Vec<Option<(Permission, String, String)>> = if who.is_empty() {
        vec![None]
    } else {
        who.into_iter().map(Some).collect()
    };
    let ops: Vec<Option<Operation>> = if ops.is_empty() {
        vec![None]
    } else {
        ops.into_iter().map(Some).collect()
    };
    for w in &whos {
        for op in &ops {
            let mut f = base.clone();
            if let Some((perm, principal, host)) = w {
                f.permission = Some(*perm);
                f.principal = Some(principal.clone());
                // An unnamed host means every host in `add`, any host in a filter.
                let any_host = match perm {
                    Permission::Allow => entries.allow_host.is_empty(),
                    Permission::Deny => entries.deny_host.is_empty(),
                };
                f.host = (!any_host).then(|| host.clone());
            }
            f.operation = *op;
            out.push(f);
        }
    }
    Ok(out)
}

/// The ACLs of a stopped broker's data directory, with its lock.
fn offline(dir: &std::path::Path) -> Result<(Authorizer, std::fs::File), Failure> {
    let lock = crate::users::claim_stopped(
        dir,
        "change ACLs through it (weir acls --bootstrap, or CreateAcls)",
    )
    .map_err(Failure::Failed)?;
    let a = Authorizer::load(dir, Default::default(), false).map_err(Failure::Failed)?;
    Ok((a, lock))
}

fn online(target: &Target) -> Result<Admin, Failure> {
    let settings = target.client.settings().map_err(Failure::Usage)?;
    Admin::from_properties(settings).map_err(|e| Failure::Usage(e.to_string()))
}

fn failed(e: impl std::fmt::Display) -> Failure {
    Failure::Failed(e.to_string())
}

async fn execute(command: Command) -> Result<(), Failure> {
    match command {
        Command::Add {
            target,
            resource,
            entries,
        } => {
            let acls = bindings(&resource, &entries)?;
            match &target.data_dir {
                Some(dir) => {
                    let (a, _lock) = offline(dir)?;
                    a.change(&acls, &[]).map_err(Failure::Failed)?;
                }
                None => {
                    let admin = online(&target)?;
                    for (b, r) in admin.create_acls(&acls).await.map_err(failed)? {
                        r.map_err(|e| failed(format!("{}: {e}", b.describe())))?;
                    }
                }
            }
            for b in &acls {
                eprintln!("added {}", b.describe());
            }
            Ok(())
        }
        Command::Remove {
            target,
            resource,
            entries,
        } => {
            if resource.named().is_none() {
                return Err(usage(
                    "name the resource whose ACLs to remove: --topic, --group, --cluster or \
                     --transactional-id",
                ));
            }
            let fs = filters(
                &resource,
                &entries,
                PatternFilter::Exactly(PatternType::Literal),
            )?;
            let removed: Vec<AclBinding> = match &target.data_dir {
                Some(dir) => {
                    let (a, _lock) = offline(dir)?;
                    a.change(&[], &fs)
                        .map_err(Failure::Failed)?
                        .into_iter()
                        .flatten()
                        .collect()
                }
                None => {
                    let admin = online(&target)?;
                    let mut out = Vec::new();
                    for r in admin.delete_acls(&fs).await.map_err(failed)? {
                        out.extend(r.map_err(failed)?);
                    }
                    out
                }
            };
            if removed.is_empty() {
                eprintln!("no ACL matched");
            }
            for b in &removed {
                eprintln!("removed {}", b.describe());
            }
            Ok(())
        }
        Command::List {
            target,
            resource,
            principal,
            json,
        } => {
            let mut f = filters(&resource, &Entries::none(), PatternFilter::Any)?.remove(0);
            f.principal = principal;
            let mut acls: Vec<AclBinding> = match &target.data_dir {
                Some(dir) => offline(dir)?.0.describe(&f),
                None => {
                    let admin = online(&target)?;
                    admin.describe_acls(&f).await.map_err(failed)?
                }
            };
            acls.sort();
            if json {
                cli::print_json(&json!(acls));
            } else {
                let rows: Vec<Vec<String>> = acls
                    .iter()
                    .map(|b| {
                        vec![
                            b.resource_type.name().to_string(),
                            b.pattern_type.name().to_string(),
                            b.resource_name.clone(),
                            b.principal.clone(),
                            b.host.clone(),
                            b.operation.name().to_string(),
                            b.permission.name().to_string(),
                        ]
                    })
                    .collect();
                cli::print_table(
                    &[
                        "RESOURCE",
                        "PATTERN",
                        "NAME",
                        "PRINCIPAL",
                        "HOST",
                        "OPERATION",
                        "PERMISSION",
                    ],
                    &rows,
                );
            }
            Ok(())
        }
    }
}

impl Entries {
    fn none() -> Entries {
        Entries {
            allow_principal: Vec::new(),
            deny_principal: Vec::new(),
            allow_host: Vec::new(),
            deny_host: Vec::new(),
            operation: Vec::new(),
        }
    }
}

pub fn run(args: Args) -> ExitCode {
    cli::run_command("acls", execute(args.command))
}
