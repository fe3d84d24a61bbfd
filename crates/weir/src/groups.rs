//! `weir groups`: list, describe, delete consumer groups and reset their offsets (Kafka's
//! kafka-consumer-groups.sh), as tables for people or `--json` for scripts.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use serde_json::{json, Value};
use weir_client::admin::{Admin, OffsetSpec, TopicPartitionKey};

use crate::cli::{self, ClientArgs};
use crate::topics::{admin, Failure};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// List the groups and their states.
    List {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        json: bool,
    },
    /// Show a group's state and members, and per partition its committed offset, the log
    /// end offset and the lag.
    Describe {
        #[command(flatten)]
        client: ClientArgs,
        #[arg(long)]
        group: String,
        #[arg(long)]
        json: bool,
    },
    /// Delete groups and their committed offsets (their consumers must be stopped).
    Delete {
        #[command(flatten)]
        client: ClientArgs,
        /// The group (repeatable).
        #[arg(long = "group", required = true)]
        groups: Vec<String>,
    },
    /// Move a group's committed offsets. Shows the plan unless --execute is given; the
    /// group's consumers must be stopped.
    ResetOffsets(ResetArgs),
}

#[derive(clap::Args)]
struct ResetArgs {
    #[command(flatten)]
    client: ClientArgs,
    #[arg(long)]
    group: String,
    /// TOPIC for all its partitions, or TOPIC:P,P,... (repeatable).
    #[arg(long = "topic", value_name = "TOPIC[:PARTITIONS]")]
    topics: Vec<String>,
    /// Every topic the group has committed offsets for.
    #[arg(long, conflicts_with = "topics")]
    all_topics: bool,
    #[command(flatten)]
    to: ResetTarget,
    /// Apply the new offsets (without it, only show them).
    #[arg(long)]
    execute: bool,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
#[group(required = true, multiple = false)]
struct ResetTarget {
    /// The first offset still in the log.
    #[arg(long)]
    to_earliest: bool,
    /// The log end: skip everything written so far.
    #[arg(long)]
    to_latest: bool,
    /// This offset (kept within the log's range).
    #[arg(long, value_name = "OFFSET")]
    to_offset: Option<i64>,
    /// The committed offset moved by N (negative goes back).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    shift_by: Option<i64>,
    /// The first record at or after this time: YYYY-MM-DDTHH:MM:SS[.sss][Z|+HH:MM]
    /// (UTC when no offset is given).
    #[arg(long, value_name = "DATETIME")]
    to_datetime: Option<String>,
}

pub fn run(args: Args) -> ExitCode {
    cli::run_command("groups", execute(args.command))
}

async fn execute(command: Command) -> Result<(), Failure> {
    match command {
        Command::List { client, json } => {
            let groups = admin(&client)?.list_groups().await?;
            if json {
                let v: Vec<Value> = groups
                    .iter()
                    .map(|g| json!({"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type}))
                    .collect();
                cli::print_json(&Value::Array(v));
            } else {
                let rows: Vec<Vec<String>> = groups
                    .into_iter()
                    .map(|g| vec![g.group_id, g.state, g.protocol_type])
                    .collect();
                cli::print_table(&["GROUP", "STATE", "PROTOCOL-TYPE"], &rows);
            }
            Ok(())
        }
        Command::Describe {
            client,
            group,
            json,
        } => describe(&admin(&client)?, &group, json).await,
        Command::Delete { client, groups } => {
            let a = admin(&client)?;
            let mut failed = Vec::new();
            for (g, r) in a.delete_groups(&groups).await? {
                match r {
                    Ok(()) => println!("Deleted group '{g}'."),
                    Err(e) => failed.push(format!("deleting '{g}': {e}")),
                }
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(Failure::Failed(failed.join("; ")))
            }
        }
        Command::ResetOffsets(args) => reset(args).await,
    }
}

async fn describe(a: &Admin, group: &str, json: bool) -> Result<(), Failure> {
    let d = a.describe_group(group).await?;
    let committed = a.list_group_offsets(group, None).await?;
    if d.state == "Dead" && committed.is_empty() {
        return Err(Failure::Failed(format!("group '{group}' does not exist")));
    }
    // Each partition the group owns or has committed, with who owns it.
    let mut owner: BTreeMap<TopicPartitionKey, usize> = BTreeMap::new();
    for (i, m) in d.members.iter().enumerate() {
        for tp in &m.assignment {
            owner.insert(tp.clone(), i);
        }
    }
    let partitions: BTreeSet<TopicPartitionKey> =
        owner.keys().chain(committed.keys()).cloned().collect();
    let specs: Vec<(TopicPartitionKey, OffsetSpec)> = partitions
        .iter()
        .map(|tp| (tp.clone(), OffsetSpec::Latest))
        .collect();
    let ends = if specs.is_empty() {
        BTreeMap::new()
    } else {
        a.list_offsets(&specs).await?
    };
    // (partition, committed offset, log end offset, index of the owning member)
    type Row = (TopicPartitionKey, Option<i64>, Option<i64>, Option<usize>);
    let rows: Vec<Row> = partitions
        .iter()
        .map(|tp| {
            (
                tp.clone(),
                committed.get(tp).copied(),
                ends.get(tp).map(|o| o.offset),
                owner.get(tp).copied(),
            )
        })
        .collect();
    let lag = |c: Option<i64>, e: Option<i64>| match (c, e) {
        (Some(c), Some(e)) => Some((e - c).max(0)),
        _ => None,
    };
    if json {
        let v = json!({
            "group": d.group_id,
            "state": d.state,
            "protocol_type": d.protocol_type,
            "protocol": d.protocol,
            "members": d.members.iter().map(|m| json!({
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": m.assignment.iter().map(|(t, p)| json!([t, p])).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "offsets": rows.iter().map(|((t, p), c, e, o)| json!({
                "topic": t,
                "partition": p,
                "committed": c,
                "log_end": e,
                "lag": lag(*c, *e),
                "member_id": o.map(|i| d.members[i].member_id.clone()),
            })).collect::<Vec<_>>(),
        });
        cli::print_json(&v);
        return Ok(());
    }
    println!(
        "Group '{}': {} ({} members{})",
        d.group_id,
        d.state,
        d.members.len(),
        if d.protocol.is_empty() {
            String::new()
        } else {
            format!(", assignor {}", d.protocol)
        }
    );
    let dash = || "-".to_string();
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|((t, p), c, e, o)| {
            let m = o.map(|i| &d.members[i]);
            vec![
                t.clone(),
                p.to_string(),
                c.map_or_else(dash, |v| v.to_string()),
                e.map_or_else(dash, |v| v.to_string()),
                lag(*c, *e).map_or_else(dash, |v| v.to_string()),
                m.map_or_else(dash, |m| m.member_id.clone()),
                m.map_or_else(dash, |m| m.host.clone()),
                m.map_or_else(dash, |m| m.client_id.clone()),
            ]
        })
        .collect();
    cli::print_table(
        &[
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ],
        &table,
    );
    Ok(())
}

async fn reset(args: ResetArgs) -> Result<(), Failure> {
    let a = admin(&args.client)?;
    let committed = a.list_group_offsets(&args.group, None).await?;
    let partitions = reset_partitions(&a, &args, &committed).await?;
    if partitions.is_empty() {
        return Err(Failure::Usage(
            "no partitions to reset: give --topic, or --all-topics for a group with commits".into(),
        ));
    }
    let range = |spec| {
        partitions
            .iter()
            .map(move |tp| (tp.clone(), spec))
            .collect::<Vec<_>>()
    };
    let earliest = a.list_offsets(&range(OffsetSpec::Earliest)).await?;
    let latest = a.list_offsets(&range(OffsetSpec::Latest)).await?;
    let t = &args.to;
    let mut plan: BTreeMap<TopicPartitionKey, i64> = BTreeMap::new();
    if t.to_earliest {
        plan = earliest
            .iter()
            .map(|(tp, o)| (tp.clone(), o.offset))
            .collect();
    } else if t.to_latest {
        plan = latest
            .iter()
            .map(|(tp, o)| (tp.clone(), o.offset))
            .collect();
    } else if let Some(o) = t.to_offset {
        plan = partitions.iter().map(|tp| (tp.clone(), o)).collect();
    } else if let Some(n) = t.shift_by {
        for tp in &partitions {
            let Some(c) = committed.get(tp) else {
                return Err(Failure::Failed(format!(
                    "cannot shift {}-{}: the group has no committed offset there",
                    tp.0, tp.1
                )));
            };
            plan.insert(tp.clone(), c.saturating_add(n));
        }
    } else if let Some(dt) = &t.to_datetime {
        let ms = parse_datetime(dt).map_err(Failure::Usage)?;
        let found = a.list_offsets(&range(OffsetSpec::Timestamp(ms))).await?;
        for tp in &partitions {
            // No record that late: the log end, as Kafka's tool does.
            let o = found.get(tp).map(|o| o.offset).filter(|o| *o >= 0);
            plan.insert(
                tp.clone(),
                o.unwrap_or_else(|| latest.get(tp).map_or(0, |l| l.offset)),
            );
        }
    }
    // Offsets outside the log are pulled back to its nearest end.
    for (tp, o) in plan.iter_mut() {
        let lo = earliest.get(tp).map_or(0, |x| x.offset);
        let hi = latest.get(tp).map_or(*o, |x| x.offset);
        *o = (*o).clamp(lo, hi.max(lo));
    }
    if args.execute {
        a.alter_group_offsets(&args.group, &plan).await?;
    }
    if args.json {
        let v: Vec<Value> = plan
            .iter()
            .map(|((t, p), o)| json!({"group": args.group, "topic": t, "partition": p, "new_offset": o}))
            .collect();
        cli::print_json(&Value::Array(v));
    } else {
        let rows: Vec<Vec<String>> = plan
            .iter()
            .map(|((t, p), o)| vec![args.group.clone(), t.clone(), p.to_string(), o.to_string()])
            .collect();
        cli::print_table(&["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], &rows);
    }
    if !args.execute {
        eprintln!("(dry run: nothing changed; add --execute to apply)");
    }
    Ok(())
}

/// The partitions a reset covers.
async fn reset_partitions(
    a: &Admin,
    args: &ResetArgs,
    committed: &BTreeMap<TopicPartitionKey, i64>,
) -> Result<Vec<TopicPartitionKey>, Failure> {
    if args.all_topics {
        return Ok(committed.keys().cloned().collect());
    }
    let mut out = BTreeSet::new();
    for spec in &args.topics {
        match spec.split_once(':') {
            Some((topic, list)) => {
                for p in list.split(',') {
                    let p: i32 = p.trim().parse().map_err(|_| {
                        Failure::Usage(format!("--topic '{spec}': '{p}' is not a partition number"))
                    })?;
                    out.insert((topic.to_string(), p));
                }
            }
            None => {
                let d = a.describe_topics(std::slice::from_ref(spec)).await?;
                let d = d[0]
                    .1
                    .clone()
                    .map_err(|e| Failure::Failed(format!("topic '{spec}': {e}")))?;
                out.extend(d.partitions.iter().map(|p| (spec.clone(), p.partition)));
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// Milliseconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.fff][Z|±HH:MM]` (UTC without a
/// zone). Written here because it is the only date the CLI reads.
fn parse_datetime(s: &str) -> Result<i64, String> {
    let bad = || format!("--to-datetime '{s}' is not YYYY-MM-DDTHH:MM:SS[.sss][Z|+HH:MM]");
    let (date, rest) = s.split_once('T').ok_or_else(bad)?;
    let d: Vec<&str> = date.split('-').collect();
    if d.len() != 3 || rest.len() < 8 {
        return Err(bad());
    }
    let num = |x: &str| x.parse::<i64>().map_err(|_| bad());
    let (year, month, day) = (num(d[0])?, num(d[1])?, num(d[2])?);
    let (clock, zone) = match rest.find(['Z', '+', '-']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let t: Vec<&str> = hms.split(':').collect();
    if t.len() != 3 {
        return Err(bad());
    }
    let (h, mi, sec) = (num(t[0])?, num(t[1])?, num(t[2])?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || mi > 59 || sec > 60 {
        return Err(bad());
    }
    let millis = if frac.is_empty() {
        0
    } else {
        let digits: String = frac.chars().chain("00".chars()).take(3).collect();
        num(&digits)?
    };
    let offset_min = match zone {
        "" | "Z" => 0,
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let (zh, zm) = z[1..].split_once(':').unwrap_or((&z[1..], "0"));
            sign * (num(zh)? * 60 + num(zm)?)
        }
    };
    // Days from 1970-01-01 to the civil date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    Ok(secs * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::parse_datetime;

    #[test]
    fn datetimes_parse_to_epoch_millis() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00").unwrap(), 0);
        assert_eq!(
            parse_datetime("2024-02-29T12:34:56.789Z").unwrap(),
            1_709_210_096_789
        );
        assert_eq!(
            parse_datetime("2024-02-29T14:34:56.789+02:00").unwrap(),
            1_709_210_096_789
        );
        assert_eq!(
            parse_datetime("2000-03-01T00:00:00.5").unwrap(),
            951_868_800_500
        );
        assert!(parse_datetime("2024-13-01T00:00:00").is_err());
        assert!(parse_datetime("yesterday").is_err());
    }
}
