//! Listening: bind every configured listener (with `socket.listen.backlog.size`), accept
//! connections within `max.connections` (and the connections' share of file descriptors),
//! `max.connections.per.ip` and its overrides, and hand each to its own task. A refused
//! connection is logged, once a second at most. Shutting down stops accepting, lets open
//! connections finish the request in hand, then closes the logs cleanly.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::connection::Stream;
use crate::throttled_log::ThrottledLog;

/// Refusals and accept failures are logged once a second at most, with a count of those
/// left out: a flood of connections must not become a flood of log lines.
static REFUSED: ThrottledLog = ThrottledLog::new(Duration::from_secs(1));
static ACCEPT_FAILED: ThrottledLog = ThrottledLog::new(Duration::from_secs(1));

/// How long a client has to finish its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A started broker: its state, where it listens, and how to stop it.
pub struct RunningBroker {
    pub broker: Arc<Broker>,
    /// The bound address of each listener, in configuration order.
    pub addrs: Vec<SocketAddr>,
    open: Arc<AtomicUsize>,
    accept_tasks: Vec<tokio::task::JoinHandle<()>>,
}

struct Limits {
    /// `max.connections`, or the connections' share of descriptors if that is less.
    max: usize,
    /// `max.connections` as configured, to say which bound refused.
    configured_max: usize,
    per_ip: usize,
    /// `max.connections.per.ip.overrides`, resolved.
    per_ip_overrides: HashMap<IpAddr, usize>,
    open: Arc<AtomicUsize>,
    by_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// Why a connection was refused.
enum Refusal {
    Total(usize),
    PerIp(usize),
}

/// Counts one connection for as long as it lives.
struct Slot {
    limits: Arc<Limits>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let n = self.limits.open.fetch_sub(1, Ordering::SeqCst) - 1;
        crate::metrics::connections(n);
        if let Ok(mut m) = self.limits.by_ip.lock() {
            if let Some(c) = m.get_mut(&self.ip) {
                *c -= 1;
                if *c == 0 {
                    m.remove(&self.ip);
                }
            }
        }
    }
}

impl Limits {
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let ip = ip.to_canonical();
        let mut m = self.by_ip.lock().unwrap_or_else(|e| e.into_inner());
        let per_ip = self
            .per_ip_overrides
            .get(&ip)
            .copied()
            .unwrap_or(self.per_ip);
        let per = m.entry(ip).or_insert(0);
        let refusal = if *per >= per_ip {
            Some(Refusal::PerIp(per_ip))
        } else if self.open.load(Ordering::SeqCst) >= self.max {
            Some(Refusal::Total(self.max))
        } else {
            None
        };
        if let Some(r) = refusal {
            if *per == 0 {
                m.remove(&ip);
            }
            return Err(r);
        }
        *per += 1;
        let n = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        crate::metrics::connections(n);
        Ok(Slot {
            limits: self.clone(),
            ip,
        })
    }

    /// Logs a refusal (once a second at most) in words that say which bound to raise.
    fn log_refusal(&self, peer: SocketAddr, listener: &str, r: &Refusal) {
        let Some(left_out) = REFUSED.due(std::time::Instant::now()) else {
            return;
        };
        let why = match r {
            Refusal::PerIp(n) => format!(
                "{} already has {n} connections open (max.connections.per.ip, or its entry in \
                 max.connections.per.ip.overrides)",
                peer.ip()
            ),
            Refusal::Total(n) if *n < self.configured_max => format!(
                "{n} connections are open, all that the broker's file descriptors allow them \
                 (raise its open-files limit, ulimit -n)"
            ),
            Refusal::Total(n) => format!("{n} connections are open (max.connections)"),
        };
        let since = if left_out > 0 {
            format!("; {left_out} more refused since the last such line")
        } else {
            String::new()
        };
        tracing::warn!(%peer, %listener, "refusing a connection: {why}{since}");
    }
}

/// Binds `addr` with a listen backlog of `backlog` (SO_REUSEADDR set, as tokio's own
/// bind does).
async fn bind(addr: &str, backlog: u32) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(a).and_then(|()| socket.listen(backlog)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("the address resolves to nothing")))
}

/// `max.connections.per.ip.overrides`, with host names resolved to their addresses.
async fn resolve_overrides(
    overrides: &[(String, usize)],
) -> Result<HashMap<IpAddr, usize>, String> {
    let mut out = HashMap::new();
    for (host, n) in overrides {
        if let Ok(ip) = host.parse::<IpAddr>() {
            out.insert(ip.to_canonical(), *n);
            continue;
        }
        let addrs = tokio::net::lookup_host((host.as_str(), 0))
            .await
            .map_err(|e| {
                format!("max.connections.per.ip.overrides: cannot resolve '{host}': {e}")
            })?;
        for a in addrs {
            out.insert(a.ip().to_canonical(), *n);
        }
    }
    Ok(out)
}

impl RunningBroker {
    /// Binds the listeners (a port of 0 picks a free one, and is advertised as bound),
    /// starts the broker, and begins accepting connections.
    pub async fn start(mut config: BrokerConfig) -> Result<RunningBroker, String> {
        let mut bound = Vec::new();
        for (i, l) in config.listeners.clone().iter().enumerate() {
            let listener = bind(&l.bind_addr(), config.socket_listen_backlog_size)
                .await
                .map_err(|e| format!("cannot listen on {} ({}): {e}", l.bind_addr(), l.name))?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            if l.port == 0 {
                config.listeners[i].port = addr.port();
                if let Some(a) = config
                    .advertised_listeners
                    .iter_mut()
                    .find(|a| a.name == l.name && a.port == 0)
                {
                    a.port = addr.port();
                }
            }
            bound.push((l.name.clone(), listener, addr));
        }
        let per_ip_overrides = resolve_overrides(&config.max_connections_per_ip_overrides).await?;
        let broker = tokio::task::block_in_place(|| Broker::start(config))?;
        let open = Arc::new(AtomicUsize::new(0));
        let limits = Arc::new(Limits {
            max: broker
                .config
                .max_connections
                .min(broker.descriptors.connections),
            configured_max: broker.config.max_connections,
            per_ip: broker.config.max_connections_per_ip,
            per_ip_overrides,
            open: open.clone(),
            by_ip: Mutex::new(HashMap::new()),
        });
        let mut addrs = Vec::new();
        let mut accept_tasks = Vec::new();
        for (name, listener, addr) in bound {
            tracing::info!(listener = %name, %addr, "accepting Kafka clients");
            addrs.push(addr);
            let broker = broker.clone();
            let limits = limits.clone();
            let has_tls = broker.config.tls.contains_key(&name);
            let name: Arc<str> = name.into();
            // Subscribed before the task starts: a stop sent before its first poll would
            // otherwise count as already seen, and the task would never end.
            let mut shutdown = broker.shutdown.subscribe();
            accept_tasks.push(tokio::spawn(async move {
                loop {
                    let accepted = tokio::select! {
                        a = listener.accept() => a,
                        _ = shutdown.changed() => return,
                    };
                    match accepted {
                        Ok((stream, peer)) => {
                            let slot = match limits.admit(peer.ip()) {
                                Ok(slot) => slot,
                                Err(refusal) => {
                                    limits.log_refusal(peer, &name, &refusal);
                                    drop(stream);
                                    continue;
                                }
                            };
                            // Over its IP's connection_creation_rate quota (KIP-612):
                            // held unserved for the throttle time, then closed, as Kafka
                            // does. It keeps its slot meanwhile, so a flood of them is
                            // bounded by max.connections.per.ip.
                            let throttle =
                                broker.quotas.record_connection(peer.ip(), weir_log::now_ms());
                            if throttle > 0 {
                                tracing::debug!(%peer, listener = %name, throttle_ms = throttle, "connection over its IP's connection_creation_rate: closing it after the throttle time");
                                crate::metrics::throttled(throttle);
                                tokio::spawn(async move {
                                    tokio::time::sleep(Duration::from_millis(throttle.into())).await;
                                    drop(stream);
                                    drop(slot);
                                });
                                continue;
                            }
                            let broker = broker.clone();
                            let name = name.clone();
                            // The listener's TLS as it is now: a keystore set while the
                                // broker runs applies from the next connection on.
                                let tls = has_tls
                                    .then(|| broker.dynamic.tls(&name))
                                    .flatten()
                                    .map(tokio_rustls::TlsAcceptor::from);
                            tokio::spawn(async move {
                                let stream = match tls {
                                    None => Stream::Plain(stream),
                                    Some(acceptor) => {
                                        let handshake = tokio::time::timeout(
                                            TLS_HANDSHAKE_TIMEOUT,
                                            acceptor.accept(stream),
                                        );
                                        match handshake.await {
                                            Ok(Ok(s)) => Stream::Tls(Box::new(s)),
                                            Ok(Err(e)) => {
                                                tracing::debug!(%peer, listener = %name, "TLS handshake failed: {e}");
                                                return;
                                            }
                                            Err(_) => {
                                                tracing::debug!(%peer, listener = %name, "TLS handshake timed out");
                                                return;
                                            }
                                        }
                                    }
                                };
                                crate::connection::serve(broker, stream, peer, name).await;
                                drop(slot);
                            });
                        }
                        Err(e) => {
                            // Out of file descriptors and the like: back off, keep serving.
                            if let Some(left_out) = ACCEPT_FAILED.due(std::time::Instant::now()) {
                                tracing::error!(listener = %name, "accept failed: {e} ({left_out} more failures since the last such line)");
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            }));
        }
        Ok(RunningBroker {
            broker,
            addrs,
            open,
            accept_tasks,
        })
    }

    /// Serves Prometheus metrics on `addr` (request counts and latencies, bytes, connections,
    /// and every partition's log figures).
    /// Resolves once every data directory of the broker is offline (failed disks, a full
    /// one): it can then hold no replica, so it should stop, as Kafka does, letting the
    /// controller give its partitions to brokers that can. Names the directories.
    pub async fn data_dirs_failed(&self) -> String {
        let all = self.broker.config.log_dirs.len();
        loop {
            let offline = self.broker.logs.offline_dirs();
            if offline.len() >= all {
                return offline
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }

    pub fn serve_metrics(&self, addr: SocketAddr) -> Result<(), String> {
        crate::metrics::serve(addr, self.broker.clone())
    }

    /// Stops accepting, waits up to a few seconds for open connections to end, then
    /// flushes and closes the logs (writing the clean-shutdown marker).
    pub async fn stop(self) -> Result<(), String> {
        // A cluster member first hands its leadership to other in-sync replicas
        // (`controlled.shutdown.enable`), while it still serves.
        if let (Some(m), Some(settings)) = (&self.broker.cluster, &self.broker.config.cluster) {
            if settings.controlled_shutdown_enable {
                let timeout = Duration::from_millis(settings.controlled_shutdown_timeout_ms);
                crate::cluster::shut_down_controlled(&self.broker, m, timeout).await;
            }
        }
        let _ = self.broker.shutdown.send(true);
        for t in self.accept_tasks {
            let _ = t.await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.open.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let broker = self.broker.clone();
        let closed = tokio::task::spawn_blocking(move || broker.shutdown())
            .await
            .map_err(|e| e.to_string())?;
        // Only once the logs are closed: the lease goes, and with it the registration.
        if let Some(m) = &self.broker.cluster {
            crate::cluster::leave(m).await;
        }
        closed
    }
}
