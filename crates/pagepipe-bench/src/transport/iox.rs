//! iceoryx2 (shared-memory publish-subscribe, `--features iceoryx2`) as a byte channel for `bw`
//! and `lat`: one writer and one reader.
//!
//! Each `write` copies up to one sample (64 KiB) into a loaned slice and sends it; each `read`
//! copies a received sample out (keeping what does not fit for the next read), as `write(2)` and
//! `read(2)` copy. The service does not overflow: a full subscriber buffer blocks the publisher
//! (iceoryx2's `BackpressureStrategy::RetryUntilDelivered`). A reader waits
//! in one of two ways:
//! - `iceoryx2` (the comparison by default): the writer notifies an event service after every
//!   sample and the reader sleeps on its listener, as a pipe reader sleeps;
//! - `iceoryx2-spin`: no event; the reader polls its subscriber, burning its core.
//!
//! Ports are made in the process that first uses an end (iceoryx2 ports belong to the node,
//! and so the process, that made them), so ends can be handed to forked children unused.
//! End of file: no publisher left after one was seen; BrokenPipe: no subscriber left.

use iceoryx2::port::listener::Listener;
use iceoryx2::port::notifier::Notifier;
use iceoryx2::port::publisher::Publisher;
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::prelude::*;
use iceoryx2::service::port_factory::event::PortFactory as EventService;
use iceoryx2::service::port_factory::publish_subscribe::PortFactory as DataService;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Largest sample, and so the most one write moves.
const MAX_SAMPLE: usize = 64 * 1024;
/// How often a sleeping reader checks whether the writer is gone.
const TICK: Duration = Duration::from_millis(50);

/// The thread-safe flavour: ends are boxed as `Send` and may move to a worker thread.
type Ipc = ipc_threadsafe::Service;

fn err(what: &str, e: impl std::fmt::Debug) -> io::Error {
    io::Error::other(format!("iceoryx2 {what}: {e:?}"))
}

/// A fresh name per channel: services of killed runs do not collide with later ones.
fn fresh_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "pagepipe-bench/{}/{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// One channel's two ends; `spin` makes the reader poll instead of waiting on an event.
pub fn channel(capacity: usize, spin: bool) -> (IoxWriter, IoxReader) {
    // Keeps "no config file was loaded" (defaults are what we want) out of the tables.
    set_log_level(LogLevel::Error);
    let spec = Spec {
        name: fresh_name(),
        buffer: capacity.div_ceil(MAX_SAMPLE).max(2),
        spin,
    };
    (
        IoxWriter {
            spec: spec.clone(),
            port: None,
            connected: false,
        },
        IoxReader {
            spec,
            port: None,
            left: Vec::new(),
            at: 0,
            connected: false,
        },
    )
}

/// What both ends must open alike.
#[derive(Clone)]
struct Spec {
    name: String,
    /// Samples the subscriber buffers.
    buffer: usize,
    spin: bool,
}

/// A node and the channel's two services, opened in this process.
struct Opened {
    _node: Node<Ipc>,
    data: DataService<Ipc, [u8], ()>,
    event: Option<EventService<Ipc>>,
}

impl Spec {
    fn open(&self) -> io::Result<Opened> {
        let node = NodeBuilder::new()
            .signal_handling_mode(SignalHandlingMode::Disabled)
            .create::<Ipc>()
            .map_err(|e| err("node", e))?;
        let data_name: ServiceName = format!("{}/data", self.name)
            .as_str()
            .try_into()
            .map_err(|e| err("service name", e))?;
        let data = node
            .service_builder(&data_name)
            .publish_subscribe::<[u8]>()
            .enable_safe_overflow(false)
            .subscriber_max_buffer_size(self.buffer)
            .history_size(0)
            .max_publishers(1)
            .max_subscribers(1)
            .open_or_create()
            .map_err(|e| err("publish-subscribe service", e))?;
        let event = if self.spin {
            None
        } else {
            let name: ServiceName = format!("{}/event", self.name)
                .as_str()
                .try_into()
                .map_err(|e| err("service name", e))?;
            let event = node
                .service_builder(&name)
                .event()
                .open_or_create()
                .map_err(|e| err("event service", e))?;
            Some(event)
        };
        Ok(Opened {
            _node: node,
            data,
            event,
        })
    }
}

/// A writer's ports: the publisher, the notifier (none when the reader spins), the services.
type WritePort = (Publisher<Ipc, [u8], ()>, Option<Notifier<Ipc>>, Opened);
/// A reader's ports: the subscriber, the listener (none when it spins), the services.
type ReadPort = (Subscriber<Ipc, [u8], ()>, Option<Listener<Ipc>>, Opened);

/// The writing end.
pub struct IoxWriter {
    spec: Spec,
    port: Option<WritePort>,
    /// A subscriber was seen: from then on, none is BrokenPipe.
    connected: bool,
}

impl Write for IoxWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.port.is_none() {
            let o = self.spec.open()?;
            let publisher = o
                .data
                .publisher_builder()
                .initial_max_slice_len(MAX_SAMPLE)
                .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
                .create()
                .map_err(|e| err("publisher", e))?;
            let notifier = match &o.event {
                Some(ev) => Some(
                    ev.notifier_builder()
                        .create()
                        .map_err(|e| err("notifier", e))?,
                ),
                None => None,
            };
            self.port = Some((publisher, notifier, o));
        }
        let (publisher, notifier, o) = self.port.as_ref().expect("opened above");
        loop {
            let subscribers = o.data.dynamic_config().number_of_subscribers();
            match (subscribers, self.connected) {
                (0, true) => return Err(io::ErrorKind::BrokenPipe.into()),
                (0, false) => std::thread::sleep(Duration::from_millis(1)),
                _ => break,
            }
        }
        self.connected = true;
        let n = buf.len().min(MAX_SAMPLE);
        let sample = publisher
            .loan_slice_uninit(n)
            .map_err(|e| err("loan", e))?
            .write_from_slice(&buf[..n]);
        sample.send().map_err(|e| err("send", e))?;
        if let Some(notifier) = notifier {
            notifier.notify().map_err(|e| err("notify", e))?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The reading end.
pub struct IoxReader {
    spec: Spec,
    port: Option<ReadPort>,
    /// What the last sample held beyond the last read, from `at` on.
    left: Vec<u8>,
    at: usize,
    /// A publisher was seen: from then on, none (and nothing queued) is end of file.
    connected: bool,
}

impl IoxReader {
    fn port(&mut self) -> io::Result<()> {
        if self.port.is_none() {
            let o = self.spec.open()?;
            let subscriber = o
                .data
                .subscriber_builder()
                .create()
                .map_err(|e| err("subscriber", e))?;
            let listener = match &o.event {
                Some(ev) => Some(
                    ev.listener_builder()
                        .create()
                        .map_err(|e| err("listener", e))?,
                ),
                None => None,
            };
            self.port = Some((subscriber, listener, o));
        }
        Ok(())
    }
}

impl Read for IoxReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at < self.left.len() {
            let n = buf.len().min(self.left.len() - self.at);
            buf[..n].copy_from_slice(&self.left[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        self.port()?;
        let (subscriber, listener, o) = self.port.as_ref().expect("opened above");
        loop {
            if let Some(sample) = subscriber.receive().map_err(|e| err("receive", e))? {
                let p = sample.payload();
                let n = buf.len().min(p.len());
                buf[..n].copy_from_slice(&p[..n]);
                self.left.clear();
                self.left.extend_from_slice(&p[n..]);
                self.at = 0;
                return Ok(n);
            }
            let publishers = o.data.dynamic_config().number_of_publishers();
            if publishers == 0 && self.connected {
                // The last sample may have landed after the receive above.
                if !subscriber
                    .has_samples()
                    .map_err(|e| err("has_samples", e))?
                {
                    return Ok(0);
                }
                continue;
            }
            self.connected |= publishers > 0;
            match listener {
                Some(l) => {
                    l.timed_wait(|_| {}, TICK).map_err(|e| err("wait", e))?;
                }
                None => std::hint::spin_loop(),
            }
        }
    }
}
