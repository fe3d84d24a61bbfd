//! Listening: bind every configured listener, accept connections within
//! `max.connections` and `max.connections.per.ip`, and hand each to its own task. Shutting
//! down stops accepting, lets open connections finish the request in hand, then closes the
//! logs cleanly.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::connection::Stream;

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
    max: usize,
    per_ip: usize,
    open: Arc<AtomicUsize>,
    by_ip: Mutex<HashMap<IpAddr, usize>>,
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
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let mut m = self.by_ip.lock().ok()?;
        let per = m.entry(ip).or_insert(0);
        if *per >= self.per_ip || self.open.load(Ordering::SeqCst) >= self.max {
            if *per == 0 {
                m.remove(&ip);
            }
            return None;
        }
        *per += 1;
        let n = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        crate::metrics::connections(n);
        Some(Slot {
            limits: self.clone(),
            ip,
        })
    }
}

impl RunningBroker {
    /// Binds the listeners (a port of 0 picks a free one, and is advertised as bound),
    /// starts the broker, and begins accepting connections.
    pub async fn start(mut config: BrokerConfig) -> Result<RunningBroker, String> {
        let mut bound = Vec::new();
        for (i, l) in config.listeners.clone().iter().enumerate() {
            let listener = TcpListener::bind(l.bind_addr())
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
        let broker = tokio::task::block_in_place(|| Broker::start(config))?;
        let open = Arc::new(AtomicUsize::new(0));
        let limits = Arc::new(Limits {
            max: broker.config.max_connections,
            per_ip: broker.config.max_connections_per_ip,
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
            let tls = broker
                .config
                .tls
                .get(&name)
                .map(|c| tokio_rustls::TlsAcceptor::from(c.clone()));
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
                            let Some(slot) = limits.admit(peer.ip()) else {
                                tracing::warn!(%peer, "refusing a connection: max.connections or max.connections.per.ip reached");
                                drop(stream);
                                continue;
                            };
                            let broker = broker.clone();
                            let name = name.clone();
                            let tls = tls.clone();
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
                            tracing::error!("accept failed: {e}");
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
    pub fn serve_metrics(&self, addr: SocketAddr) -> Result<(), String> {
        crate::metrics::serve(addr, self.broker.clone())
    }

    /// Stops accepting, waits up to a few seconds for open connections to end, then
    /// flushes and closes the logs (writing the clean-shutdown marker).
    pub async fn stop(self) -> Result<(), String> {
        let _ = self.broker.shutdown.send(true);
        for t in self.accept_tasks {
            let _ = t.await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.open.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let broker = self.broker.clone();
        tokio::task::spawn_blocking(move || broker.shutdown())
            .await
            .map_err(|e| e.to_string())?
    }
}
