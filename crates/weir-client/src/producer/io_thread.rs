//! The producer's I/O thread, as Kafka's producer has its `Sender` thread: the sender task,
//! the connections and the tasks that read their answers run here, on a runtime of their
//! own, and never on the application's.
//!
//! On the application's runtime the sender would wait behind the application's tasks: a
//! task that calls `send` in a loop does not yield while every send finds room, and a task
//! it wakes (the sender, when a batch fills) waits in that worker's next-task slot, which
//! other workers do not steal. Batches would then leave only when the application blocks
//! on memory, whatever `linger.ms` says, and the client would use one core where it has
//! two. A thread of its own also keeps the producer going under a current-thread runtime
//! whose one thread the application holds.

use std::sync::mpsc;

use tokio::runtime::Handle;

use crate::error::{ClientError, Result};

/// A thread running a current-thread runtime until this value is dropped; the tasks still
/// on it then are dropped with it.
pub(crate) struct IoThread {
    handle: Handle,
    /// Dropped with the producer: the thread's runtime then stops.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl IoThread {
    pub(crate) fn start() -> Result<IoThread> {
        let failed = |e: std::io::Error| {
            ClientError::Config(format!("starting the producer's I/O thread: {e}"))
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("weir-producer".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let _ = tx.send(Ok(rt.handle().clone()));
                // Either a stop or the producer dropped: both end the thread.
                let _ = rt.block_on(stopped);
            })
            .map_err(failed)?;
        let handle = rx
            .recv()
            .map_err(|_| ClientError::Config("the producer's I/O thread did not start".into()))?
            .map_err(failed)?;
        Ok(IoThread {
            handle,
            _stop: stop,
        })
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }
}
