//! The etcd v3 calls the session makes, over the `etcdrs` crate, in this crate's own terms
//! (`Kv`, `Event`, `Txn`): reads of a prefix at one revision, compare-and-set transactions,
//! leases and their keep-alives, and a watch of the prefix. Every unary call is bounded by
//! the request timeout, so a hung etcd becomes an error here instead of a stalled broker.
//! Only this module names `etcdrs`.

use std::time::Duration;

use etcdrs::client::{
    Delete, Get, KeepAliveSender, KeepAliveStream, TransactionCheck, TransactionCheckOp,
    TransactionOp, TransactionOpResponse, WatchEvent, WatchStream,
};
use etcdrs::{Client, LeaseId, Record, RetryPolicy, Revision, WatchErrorKind};
use futures_util::StreamExt;

use crate::image::{Event, Kv};

/// Why an etcd call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdError {
    /// etcd did not answer in time, or could not be reached.
    Unavailable(String),
    /// etcd answered with an error.
    Failed(String),
}

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EtcdError::Unavailable(m) => write!(f, "etcd is unreachable: {m}"),
            EtcdError::Failed(m) => write!(f, "etcd refused: {m}"),
        }
    }
}

/// The pause before a call that could not connect is made again.
const CONNECT_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// One comparison of a transaction.
#[derive(Debug, Clone)]
pub enum Cmp {
    /// The key does not exist.
    Absent(String),
    /// The key exists and was last changed at this revision.
    ModRevision(String, i64),
    /// The key exists and was created at this revision (this incarnation of it).
    CreateRevision(String, i64),
}

/// One operation of a transaction.
#[derive(Debug, Clone)]
pub enum Op {
    /// `lease` 0: kept for good.
    Put {
        key: String,
        value: Vec<u8>,
        lease: i64,
    },
    Delete(String),
    /// Every key starting with the prefix.
    DeletePrefix(String),
    Get(String),
}

/// A compare-and-set: `then` if every comparison holds, else `otherwise`.
#[derive(Debug, Clone, Default)]
pub struct Txn {
    pub when: Vec<Cmp>,
    pub then: Vec<Op>,
    pub otherwise: Vec<Op>,
}

/// What a transaction did: which branch ran, at which revision, and the keys its `Get`s
/// read.
#[derive(Debug, Clone)]
pub struct TxnOutcome {
    pub succeeded: bool,
    pub revision: i64,
    pub got: Vec<Option<Kv>>,
}

/// A batch of watch events, or the end of the watch.
#[derive(Debug)]
pub enum Watched {
    Events {
        revision: i64,
        events: Vec<Event>,
    },
    /// The watch cannot go on: read the whole prefix again and watch anew.
    Broken(String),
}

/// The connection to etcd.
#[derive(Clone)]
pub struct Etcd {
    client: Client,
    timeout: Duration,
}

fn kv(r: Record) -> Kv {
    let (m, key, value) = r.into_parts();
    Kv {
        key: String::from_utf8_lossy(&key).into_owned(),
        value,
        create_revision: m.create_revision.get(),
        mod_revision: m.modified_revision.get(),
        lease: m.lease.map_or(0, |l| l.get()),
    }
}

fn revision(n: i64) -> Result<Revision, EtcdError> {
    Revision::new(n).ok_or_else(|| EtcdError::Failed(format!("revision {n} is not one etcd has")))
}

impl Etcd {
    /// A client of etcd at `urls`. Nothing is dialed until the first call.
    pub fn new(urls: &[String], timeout: Duration) -> Result<Etcd, String> {
        let mut b = Client::builder();
        for u in urls {
            b = b
                .add_connection(u)
                .map_err(|e| format!("etcd endpoint {u}: {e}"))?;
        }
        let client = b
            .configure_endpoint(move |ep| {
                Ok(ep
                    .connect_timeout(timeout)
                    .timeout(timeout)
                    // A hung etcd (stopped, or a partition that drops packets) is noticed by
                    // HTTP/2 pings; etcd refuses pings more often than every 5 s.
                    .http2_keep_alive_interval(Duration::from_secs(6))
                    .keep_alive_timeout(Duration::from_secs(3))
                    .keep_alive_while_idle(true))
            })
            // etcdrs retries without backing off (thousands of attempts a second against a
            // refused port): retries are ours, below, with a pause between them.
            .retry_policy(RetryPolicy::Never)
            .build()
            .map_err(|e| format!("etcd client: {e}"))?;
        Ok(Etcd { client, timeout })
    }

    /// Runs a call within the request timeout. A call that could not connect never
    /// reached etcd, so it is made again (another endpoint may answer) after a pause,
    /// while time is left; one that timed out may have landed, and is not.
    async fn bounded<T, E: std::fmt::Display, F: std::future::IntoFuture<Output = Result<T, E>>>(
        &self,
        what: &str,
        call: impl Fn() -> F,
    ) -> Result<T, EtcdError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let e =
                match tokio::time::timeout(left + Duration::from_millis(500), call().into_future())
                    .await
                {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(e)) => format!("{what}: {e}"),
                    Err(_) => {
                        return Err(EtcdError::Unavailable(format!(
                            "{what}: no answer within {:?}",
                            self.timeout
                        )))
                    }
                };
            let lower = e.to_ascii_lowercase();
            let not_sent = lower.contains("connect");
            let away = not_sent
                || lower.contains("unavailable")
                || lower.contains("timeout")
                || lower.contains("timed out")
                || lower.contains("transport")
                || lower.contains("h2 protocol")
                || lower.contains("broken pipe");
            if !away {
                return Err(EtcdError::Failed(e));
            }
            if !not_sent || tokio::time::Instant::now() + CONNECT_RETRY_PAUSE >= deadline {
                return Err(EtcdError::Unavailable(e));
            }
            tokio::time::sleep(CONNECT_RETRY_PAUSE).await;
        }
    }

    /// Every key under `prefix`, as of one revision.
    pub async fn list(&self, prefix: &str) -> Result<(i64, Vec<Kv>), EtcdError> {
        let view = self
            .bounded("reading the metadata", || self.client.list_prefix(prefix))
            .await?;
        let rev = view.revision().get();
        let records: Vec<_> = view.into_stream().collect().await;
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(kv(r.map_err(|e| EtcdError::Failed(e.to_string()))?));
        }
        Ok((rev, out))
    }

    pub async fn get(&self, key: &str) -> Result<Option<Kv>, EtcdError> {
        let r = self
            .bounded("reading a key", || self.client.get(key))
            .await?;
        Ok(r.into_record().map(kv))
    }

    pub async fn txn(&self, txn: Txn) -> Result<TxnOutcome, EtcdError> {
        let mut checks = Vec::with_capacity(txn.when.len());
        for c in &txn.when {
            checks.push(match c {
                Cmp::Absent(k) => TransactionCheck::not_present(k.as_str()),
                Cmp::ModRevision(k, r) => TransactionCheck::modified_revision(
                    k.as_str(),
                    TransactionCheckOp::Equal,
                    revision(*r)?,
                ),
                Cmp::CreateRevision(k, r) => TransactionCheck::create_revision(
                    k.as_str(),
                    TransactionCheckOp::Equal,
                    revision(*r)?,
                ),
            });
        }
        let ops = |ops: &[Op]| -> Result<Vec<TransactionOp>, EtcdError> {
            ops.iter()
                .map(|o| {
                    Ok(match o {
                        Op::Put { key, value, lease } => {
                            let mut put = self.client.put(key.as_str()).value(value.as_slice());
                            if *lease != 0 {
                                put = put.lease(LeaseId::new(*lease).ok_or_else(|| {
                                    EtcdError::Failed(format!("lease {lease} is not one etcd has"))
                                })?);
                            }
                            put.into()
                        }
                        Op::Delete(k) => Delete::new(k.as_str()).into(),
                        Op::DeletePrefix(p) => Delete::with_prefix(p.as_str()).into(),
                        Op::Get(k) => Get::new(k.as_str()).into(),
                    })
                })
                .collect()
        };
        let then = ops(&txn.then)?;
        let otherwise = ops(&txn.otherwise)?;
        let resp = self
            .bounded("a transaction", || {
                self.client
                    .transaction()
                    .when(checks.clone())
                    .and_then(then.clone())
                    .or_else(otherwise.clone())
                    .commit()
            })
            .await?;
        let succeeded = resp.succeeded();
        let revision = resp.revision().get();
        let got = resp
            .take_responses()
            .into_iter()
            .filter_map(|r| match r {
                TransactionOpResponse::Get(r) => Some(r.map(kv)),
                _ => None,
            })
            .collect();
        Ok(TxnOutcome {
            succeeded,
            revision,
            got,
        })
    }

    /// A lease of `ttl` (whole seconds, at least one).
    pub async fn grant(&self, ttl: Duration) -> Result<i64, EtcdError> {
        let ttl = Duration::from_secs(ttl.as_secs().max(1));
        let r = self
            .bounded("granting a lease", || self.client.grant_lease().ttl(ttl))
            .await?;
        Ok(r.lease_id.get())
    }

    pub async fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        let Some(id) = LeaseId::new(lease) else {
            return Ok(());
        };
        self.bounded("revoking a lease", || self.client.revoke_lease(id))
            .await
            .map(|_| ())
    }

    /// A keep-alive stream for leases: send with `keep_alive`, read answers from `next`.
    pub fn keeper(&self) -> Keeper {
        let (sender, stream) = self.client.lease_keeper().into_parts();
        Keeper { sender, stream }
    }

    /// Watches every key under `prefix` from `from` on.
    pub fn watch(&self, prefix: &str, from: i64) -> Result<Watch, EtcdError> {
        let watcher = self
            .client
            .watch()
            .prefix(prefix)
            .start_revision(revision(from)?)
            .start();
        let (sender, stream) = watcher.into_parts();
        Ok(Watch {
            _sender: sender,
            stream,
            broken: None,
        })
    }
}

/// Lease keep-alives.
pub struct Keeper {
    sender: KeepAliveSender,
    stream: KeepAliveStream,
}

impl Keeper {
    pub fn keep_alive(&self, lease: i64) {
        if let Some(id) = LeaseId::new(lease) {
            self.sender.keep_alive(id);
        }
    }

    /// The next answer: the lease's remaining time (`None`: it expired), or why the
    /// stream broke (then make a new keeper).
    pub async fn next(&mut self) -> Result<Option<Duration>, String> {
        match self.stream.next().await {
            Some(Ok(r)) => Ok(r.ttl),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("the keep-alive stream ended".into()),
        }
    }
}

/// A watch of a prefix.
pub struct Watch {
    // Dropping the sender would end the watch.
    _sender: etcdrs::client::WatchSender,
    stream: WatchStream,
    /// Why the stream broke, seen while gathering a batch: said on the next call.
    broken: Option<String>,
}

impl Watch {
    /// The next batch of events.
    pub async fn next(&mut self) -> Watched {
        if let Some(why) = self.broken.take() {
            return Watched::Broken(why);
        }
        let first = match self.stream.next().await {
            None => return Watched::Broken("the watch stream ended".into()),
            Some(Err(e)) => return Watched::Broken(why_broken(&e)),
            Some(Ok(ev)) => ev,
        };
        let mut events = Vec::new();
        let mut revision = 0;
        let add = |ev: WatchEvent, events: &mut Vec<Event>, revision: &mut i64| match ev {
            WatchEvent::Put { record, .. } => {
                let kv = kv(record);
                *revision = (*revision).max(kv.mod_revision);
                events.push(Event::Put(kv));
            }
            WatchEvent::Delete { key, .. } => {
                let (m, k) = key.into_parts();
                let mod_revision = m.modified_revision.get();
                *revision = (*revision).max(mod_revision);
                events.push(Event::Delete {
                    key: String::from_utf8_lossy(&k).into_owned(),
                    mod_revision,
                });
            }
            WatchEvent::Progress { revision: r, .. } => *revision = (*revision).max(r.get()),
        };
        add(first, &mut events, &mut revision);
        // Whatever else has arrived goes in the same batch: one new image for all of it.
        loop {
            match futures_util::FutureExt::now_or_never(self.stream.next()) {
                None => break,
                Some(Some(Ok(ev))) => add(ev, &mut events, &mut revision),
                Some(Some(Err(e))) => {
                    self.broken = Some(why_broken(&e));
                    break;
                }
                Some(None) => {
                    self.broken = Some("the watch stream ended".into());
                    break;
                }
            }
        }
        Watched::Events { revision, events }
    }
}

fn why_broken(e: &etcdrs::WatchError) -> String {
    match e.kind() {
        WatchErrorKind::Compacted => format!(
            "etcd compacted past the watched revision ({:?})",
            e.compact_revision()
        ),
        _ => e.to_string(),
    }
}
