//! Notification pipes (Linux's watch queue, `kernel/watch_queue.c`): records of 8 to 127 bytes
//! posted by a [`Notifier`] that never sleeps, into a ring whose slots are all reserved for them.
//!
//! Shape. A notification pipe is a pipe whose ring holds one record per slot (at the start of
//! the slot's page) and refuses data: there is no [`crate::Writer`], only notifiers, and a
//! [`NotificationReader`] that reads whole records. The ring has `records.next_power_of_two()` slots, as
//! Linux sizes a watch queue's pipe ring (its notes bitmap always has at least as many notes).
//!
//! The post protocol. Posters serialize among themselves on the write side's lock, taken with
//! [`crate::lock::Wait::Spin`]: they spin (and yield), never sleep, and hold it only to copy one record
//! and publish it; a poster that died holding it is taken over from, as a writer would be. They
//! never take the read side's lock. The reader runs concurrently, as with any pipe:
//! - room (`head - tail < ring_size`): the poster copies the record into slot `head`, sets the
//!   slot's state to the record's length and publishes it with the head RMW.
//! - full: the poster flags the last record, `head - 1`, with [`crate::region::LOSS`] by a CAS on its state
//!   that fails if the reader released the slot meanwhile (the reader's release is a CAS on the
//!   same word, so exactly one of the two happens first). The reader sees the flag when it
//!   releases the record and hands out one LOSS record after it (Linux's `note_loss`).
//! - full, but the last record already released (the reader is between its release CAS and
//!   its tail update): the poster waits for the tail, spinning; if no live thread holds the
//!   read side (its holder died there, or a peer wrote the flag) it flags the released slot,
//!   and the next reader, taking the side over, finds the flag on the slots it skips (see
//!   `Shared::lock_read`). A tail that stays stuck for a second is `InvalidData`: nothing waits
//!   forever on a peer's word.
//!
//! Filters are a small table in the region under a sequence lock (`Header::filter_seq`) that
//! the reader rewrites under its side lock and posters read optimistically, without a lock.

mod notifier;
mod reader;
mod record;

pub use notifier::Notifier;
pub use reader::{NotificationReader, Notifications};
pub use record::{Filter, Notification, LOSS_SUBTYPE, MAX_FILTERS, MAX_PAYLOAD, META_KIND};
