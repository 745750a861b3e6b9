//! Records and filters: Linux's watch_queue record layout, and the filter table in the region
//! that readers write and posters read.

use crate::error::invalid;
use crate::region::Header;
use crate::sync::{fence, Ordering};
use std::io;

/// The most filters a reader may set (Linux: 16).
pub const MAX_FILTERS: usize = 16;
/// The most payload bytes a record carries: 127 bytes at most, less the 8-byte header.
pub const MAX_PAYLOAD: usize = RECORD_MAX - HEADER;
/// The `kind` of meta records (Linux `WATCH_TYPE_META`).
pub const META_KIND: u32 = 0;
/// The `subtype` of the LOSS meta record (Linux `WATCH_META_LOSS_NOTIFICATION`).
pub const LOSS_SUBTYPE: u8 = 1;

pub(crate) const HEADER: usize = 8;
pub(crate) const RECORD_MAX: usize = 127;
/// The record length's bits in `info` (Linux `WATCH_INFO_LENGTH`).
const INFO_LENGTH: u32 = 0x7f;
/// `info` bit 7: between the length and the id, unused by Linux's layout.
const INFO_RESERVED: u32 = 0x80;
const KIND_MAX: u32 = (1 << 24) - 1;
/// Times a poster rereads a filter table that is being rewritten before it gives up and
/// delivers the record (a reader that died mid-rewrite must not silence every poster).
const FILTER_TRIES: u32 = 64;

/// One notification record, in Linux's watch_queue layout: a 32-bit word with `kind` in its
/// low 24 bits and `subtype` in its high 8, then a 32-bit `info` word (the record's length in
/// bits 0..=6, `id` in bits 8..=15, `info_flags` in bits 16..=31), then the payload. Both words
/// little-endian, as on every Linux target pagepipe runs on.
///
/// ```
/// use pagepipe::Notification;
/// let n = Notification { kind: 1, subtype: 2, id: 3, info_flags: 0x10, payload: b"key".to_vec() };
/// let bytes = n.to_bytes();
/// assert_eq!(bytes.len(), 11);
/// assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 0x0010_030b);
/// assert_eq!(Notification::parse(&bytes)?, (n, 11));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Notification {
    /// The record's type: 24 bits (0 is [`META_KIND`]).
    pub kind: u32,
    /// Its subtype.
    pub subtype: u8,
    /// The watch id it came through (Linux: `info` bits 8..=15).
    pub id: u8,
    /// Type-specific flags (Linux: `info` bits 16..=31).
    pub info_flags: u16,
    /// At most [`MAX_PAYLOAD`] (119) bytes.
    pub payload: Vec<u8>,
}

impl Notification {
    /// The LOSS meta record a reader gets after records were lost: kind 0, subtype 1, 8 bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use pagepipe::{Notification, LOSS_SUBTYPE, META_KIND};
    /// let loss = Notification::loss();
    /// assert!(loss.is_loss());
    /// assert_eq!((loss.kind, loss.subtype), (META_KIND, LOSS_SUBTYPE));
    /// assert_eq!(loss.info(), 8); // length 8, id 0, no flags
    /// assert_eq!(loss.to_bytes().len(), 8);
    /// ```
    pub fn loss() -> Notification {
        Notification {
            kind: META_KIND,
            subtype: LOSS_SUBTYPE,
            ..Notification::default()
        }
    }

    /// True for the LOSS meta record.
    ///
    /// # Examples
    /// See [`Notification::loss`].
    pub fn is_loss(&self) -> bool {
        self.kind == META_KIND && self.subtype == LOSS_SUBTYPE
    }

    /// Whether the record whose bytes start `rec` (at least 4 of them) is a meta record (kind
    /// [`META_KIND`]), which only the pipe itself makes.
    pub(crate) fn is_meta_word(rec: &[u8]) -> bool {
        rec.len() >= 4 && u32::from_le_bytes([rec[0], rec[1], rec[2], 0]) == META_KIND
    }

    /// The record's `info` word: length, id and flags.
    ///
    /// # Examples
    /// See [`Notification::loss`] and the type's example.
    pub fn info(&self) -> u32 {
        let len = (HEADER + self.payload.len()) as u32 & INFO_LENGTH;
        len | u32::from(self.id) << 8 | u32::from(self.info_flags) << 16
    }

    /// The record in Linux's byte layout (see the type's docs).
    ///
    /// # Panics
    /// If `kind` does not fit 24 bits or the payload is longer than [`MAX_PAYLOAD`]
    /// ([`crate::Notifier::post`] reports those as `InvalidInput` instead).
    ///
    /// # Examples
    /// See the type's example.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut buf = [0u8; RECORD_MAX];
        let n = self
            .encode(&mut buf)
            .expect("a notification that fits a record");
        buf[..n].to_vec()
    }

    /// Writes the record into `buf`, returning its length; `InvalidInput` if it is not one.
    pub(crate) fn encode(&self, buf: &mut [u8; RECORD_MAX]) -> io::Result<usize> {
        if self.kind > KIND_MAX || self.payload.len() > MAX_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a notification of kind {:#x} with {} payload bytes (at most 24 bits and {} bytes)",
                    self.kind,
                    self.payload.len(),
                    MAX_PAYLOAD
                ),
            ));
        }
        let len = HEADER + self.payload.len();
        let word = self.kind | u32::from(self.subtype) << 24;
        buf[..4].copy_from_slice(&word.to_le_bytes());
        buf[4..8].copy_from_slice(&self.info().to_le_bytes());
        buf[HEADER..len].copy_from_slice(&self.payload);
        Ok(len)
    }

    /// Parses the record at the start of `buf`: the record and its length (from `info`).
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidData`] when `buf` is shorter than 8 bytes or than the length the
    /// record gives, the length is below 8, or `info` bit 7 (unused by the layout) is set.
    ///
    /// # Examples
    ///
    /// ```
    /// use pagepipe::Notification;
    /// let n = Notification { kind: 2, payload: b"xy".to_vec(), ..Default::default() };
    /// let (back, len) = Notification::parse(&n.to_bytes())?;
    /// assert_eq!((back, len), (n, 10));
    /// assert!(Notification::parse(&[0u8; 4]).is_err()); // shorter than a header
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn parse(buf: &[u8]) -> io::Result<(Notification, usize)> {
        if buf.len() < HEADER {
            return Err(invalid(format!(
                "{} bytes cannot hold a notification record",
                buf.len()
            )));
        }
        let word = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let info = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let len = (info & INFO_LENGTH) as usize;
        if len < HEADER || len > buf.len() || info & INFO_RESERVED != 0 {
            return Err(invalid(format!(
                "a notification record with info {info:#x} in {} bytes",
                buf.len()
            )));
        }
        let n = Notification {
            kind: word & KIND_MAX,
            subtype: (word >> 24) as u8,
            id: (info >> 8) as u8,
            info_flags: (info >> 16) as u16,
            payload: buf[HEADER..len].to_vec(),
        };
        Ok((n, len))
    }
}

/// A filter of a notification reader (Linux `watch_notification_type_filter`): a record passes
/// when some filter has its `kind`, has bit `subtype` set in `subtypes` (subtypes 32 and above
/// never pass) and `info & info_mask == info_filter`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// The record kind this filter applies to (24 bits).
    pub kind: u32,
    /// The `info` bits wanted, under `info_mask`.
    pub info_filter: u32,
    /// The `info` bits compared; must not include the length bits (0x7f).
    pub info_mask: u32,
    /// Bit n set: subtype n passes.
    pub subtypes: u32,
}

impl Filter {
    pub(crate) fn passes(&self, kind: u32, subtype: u8, info: u32) -> bool {
        self.kind == kind
            && u32::from(subtype) < 32
            && self.subtypes >> subtype & 1 == 1
            && info & self.info_mask == self.info_filter
    }

    pub(crate) fn check(&self) -> io::Result<()> {
        if self.kind > KIND_MAX
            || self.info_filter & !self.info_mask != 0
            || self.info_mask & INFO_LENGTH != 0
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "bad filter {self:?}: kind above 24 bits, info_filter bits outside \
                     info_mask, or a mask on the length bits"
                ),
            ));
        }
        Ok(())
    }
}

/// Whether a record with this first word and `info` passes the reader's filters (all pass
/// when none are set).
pub(crate) fn filters_pass(h: &Header, word: u32, info: u32) -> bool {
    let (kind, subtype) = (word & KIND_MAX, (word >> 24) as u8);
    for _ in 0..FILTER_TRIES {
        // Acquire: pairs with the Release store that ends a rewrite in `set_filters`.
        let s1 = h.filter_seq.load(Ordering::Acquire);
        if s1 & 1 == 0 {
            let count = (h.nr_filters.load(Ordering::Relaxed) as usize).min(MAX_FILTERS);
            let pass = count == 0
                || h.filters[..count].iter().any(|f| {
                    let f = f.each_ref().map(|w| w.load(Ordering::Relaxed));
                    Filter {
                        kind: f[0],
                        info_filter: f[1],
                        info_mask: f[2],
                        subtypes: f[3],
                    }
                    .passes(kind, subtype, info)
                });
            // Acquire: pairs with the Release fence in `set_filters`: if we read any word of
            // a rewrite, the reload below sees its odd sequence (or later).
            fence(Ordering::Acquire);
            if h.filter_seq.load(Ordering::Relaxed) == s1 {
                return pass;
            }
        }
        std::hint::spin_loop();
    }
    true
}

/// Rewrites the filter table (the read side held).
pub(crate) fn set_filters(h: &Header, filters: &[Filter]) {
    let odd = h.filter_seq.load(Ordering::Relaxed) | 1;
    h.filter_seq.store(odd, Ordering::Relaxed);
    // Release: pairs with the Acquire fence in `filters_pass`, ordering the odd sequence
    // before the table words below.
    fence(Ordering::Release);
    for (slot, f) in h.filters.iter().zip(filters) {
        for (w, v) in slot
            .iter()
            .zip([f.kind, f.info_filter, f.info_mask, f.subtypes])
        {
            w.store(v, Ordering::Relaxed);
        }
    }
    h.nr_filters.store(filters.len() as u32, Ordering::Relaxed);
    // Release: pairs with the Acquire load of the sequence in `filters_pass`.
    h.filter_seq.store(odd.wrapping_add(1), Ordering::Release);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_malformed_bytes() {
        let n = Notification {
            kind: 0xabcdef,
            subtype: 9,
            id: 0x42,
            info_flags: 0xbeef,
            payload: vec![7; MAX_PAYLOAD],
        };
        let b = n.to_bytes();
        assert_eq!(b.len(), 127);
        assert_eq!(&b[..4], &[0xef, 0xcd, 0xab, 9]);
        assert_eq!(Notification::parse(&b).unwrap(), (n.clone(), 127));
        assert_eq!(Notification::loss().to_bytes(), [0, 0, 0, 1, 8, 0, 0, 0]);
        for bad in [
            &b[..7],
            &b[..100],
            &[0, 0, 0, 0, 7, 0, 0, 0][..],
            &[0, 0, 0, 0, 0x88, 0, 0, 0],
        ] {
            assert_eq!(
                Notification::parse(bad).unwrap_err().kind(),
                io::ErrorKind::InvalidData
            );
        }
        let mut too_big = n;
        too_big.payload.push(0);
        assert!(too_big.encode(&mut [0; RECORD_MAX]).is_err());
    }

    #[test]
    fn filters_match_kind_subtype_and_masked_info() {
        let f = Filter {
            kind: 1,
            info_filter: 0x0100,
            info_mask: 0xff00,
            subtypes: 0b101,
        };
        assert!(f.check().is_ok());
        assert!(f.passes(1, 0, 0x0108));
        assert!(f.passes(1, 2, 0x0108));
        assert!(!f.passes(1, 1, 0x0108));
        assert!(!f.passes(2, 0, 0x0108));
        assert!(!f.passes(1, 0, 0x0208));
        assert!(!f.passes(1, 40, 0x0108));
        for bad in [
            Filter { kind: 1 << 24, ..f },
            Filter {
                info_filter: 0x1_0000,
                ..f
            },
            Filter {
                info_mask: 0xff7f,
                ..f
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }
}
