//! Property test against a simple model of Linux's pipe rules, generalised to any slot size:
//! covers fat slots (no kernel reference exists) and the chunk APIs mixed with reads and writes.

use pagepipe::{Builder, Reader, Writer};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};

/// One slot of the model: the bytes not yet read, and where they end in the slot's page.
struct MSlot {
    data: VecDeque<u8>,
    end: usize,
    can_merge: bool,
}

/// Linux's rules, written as plainly as possible.
struct Model {
    slot: usize,
    limit: usize,
    packet: bool,
    slots: VecDeque<MSlot>,
}

type Res<T> = Result<T, ErrorKind>;

impl Model {
    fn push_slot(&mut self, bytes: &[u8]) {
        let can_merge = !self.packet;
        self.slots.push_back(MSlot {
            data: bytes.iter().copied().collect(),
            end: bytes.len(),
            can_merge,
        });
    }

    fn write(&mut self, buf: &[u8]) -> Res<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let chars = buf.len() % self.slot;
        let mut done = 0;
        if let Some(last) = self.slots.back_mut() {
            if chars > 0 && last.can_merge && last.end + chars <= self.slot {
                last.data.extend(&buf[..chars]);
                last.end += chars;
                done = chars;
            }
        }
        while done < buf.len() && self.slots.len() < self.limit {
            let n = (buf.len() - done).min(self.slot);
            self.push_slot(&buf[done..done + n]);
            done += n;
        }
        if done == 0 {
            Err(ErrorKind::WouldBlock)
        } else {
            Ok(done)
        }
    }

    fn commit(&mut self, bytes: &[u8]) -> Res<usize> {
        if self.slots.len() == self.limit {
            return Err(ErrorKind::WouldBlock);
        }
        let room = (self.limit - self.slots.len()) * self.slot;
        let n = bytes.len().min(room);
        for c in bytes[..n].chunks(self.slot) {
            self.push_slot(c);
        }
        Ok(n)
    }

    fn read(&mut self, len: usize, packet_reads: bool, writers: bool) -> Res<Vec<u8>> {
        if len == 0 {
            return Ok(vec![]);
        }
        if self.slots.is_empty() {
            return if writers {
                Err(ErrorKind::WouldBlock)
            } else {
                Ok(vec![])
            };
        }
        let mut out = Vec::new();
        while out.len() < len {
            let Some(front) = self.slots.front_mut() else {
                break;
            };
            let c = front.data.len().min(len - out.len());
            out.extend(front.data.drain(..c));
            if (self.packet && packet_reads) || front.data.is_empty() {
                self.slots.pop_front();
            }
            if self.packet && packet_reads {
                break;
            }
        }
        Ok(out)
    }

    fn set_capacity(&mut self, bytes: usize) -> Res<usize> {
        if bytes == 0 || bytes > pagepipe::MAX_CAPACITY {
            return Err(ErrorKind::InvalidInput);
        }
        let ring = ((bytes.div_ceil(4096).next_power_of_two() * 4096) / self.slot).max(1);
        if ring < self.slots.len() {
            return Err(ErrorKind::ResourceBusy);
        }
        self.limit = ring;
        Ok(ring * self.slot)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write(usize),
    Read(usize),
    Commit(usize),
    Consume(usize),
    SetCapacity(usize),
    CloseWriter,
}

fn ops(slot: usize) -> impl Strategy<Value = Vec<Op>> {
    let len = prop_oneof![0..64usize, 0..2 * slot, 0..6 * slot];
    prop::collection::vec(
        prop_oneof![
            6 => len.clone().prop_map(Op::Write),
            6 => len.clone().prop_map(Op::Read),
            2 => len.clone().prop_map(Op::Commit),
            2 => len.prop_map(Op::Consume),
            1 => (1usize..(1 << 19)).prop_map(Op::SetCapacity),
            1 => Just(Op::CloseWriter),
        ],
        1..50,
    )
}

fn bytes(seq: &mut u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|_| {
            *seq = seq.wrapping_add(1);
            *seq
        })
        .collect()
}

fn check(slot: usize, packet: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let (w, r): (Writer, Reader) = Builder::new()
        .slot_size(slot)
        .capacity(4 * slot)
        .packet_mode(packet)
        .build()
        .unwrap();
    w.set_nonblocking(true).unwrap();
    r.set_nonblocking(true).unwrap();
    let mut w = Some(w);
    let mut r = r;
    let mut m = Model {
        slot,
        limit: 4,
        packet,
        slots: VecDeque::new(),
    };
    let mut seq = 0u8;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Write(n) => {
                let Some(w) = w.as_mut() else { continue };
                let data = bytes(&mut seq, n);
                prop_assert_eq!(
                    w.write(&data).map_err(|e| e.kind()),
                    m.write(&data),
                    "op {}",
                    i
                );
            }
            Op::Commit(n) => {
                let Some(w) = w.as_ref() else { continue };
                let data = bytes(&mut seq, n);
                let ours = w.write_chunk().map_err(|e| e.kind()).map(|mut c| {
                    let take = n.min(c.len());
                    let (a, b) = c.as_mut_slices();
                    let k = take.min(a.len());
                    a[..k].copy_from_slice(&data[..k]);
                    b[..take - k].copy_from_slice(&data[k..take]);
                    c.commit(take)
                });
                prop_assert_eq!(ours, m.commit(&data), "op {}", i);
            }
            Op::Read(n) => {
                let mut buf = vec![0u8; n];
                let ours = r
                    .read(&mut buf)
                    .map(|k| buf[..k].to_vec())
                    .map_err(|e| e.kind());
                prop_assert_eq!(ours, m.read(n, true, w.is_some()), "op {}", i);
            }
            Op::Consume(n) => {
                let ours = r.read_chunk().map_err(|e| e.kind()).map(|c| {
                    let got: Vec<u8> = c.slices().flatten().copied().take(n).collect();
                    c.consume(got.len());
                    got
                });
                let expect = if m.slots.is_empty() {
                    if w.is_some() {
                        Err(ErrorKind::WouldBlock)
                    } else {
                        Ok(vec![])
                    }
                } else {
                    m.read(n, false, true)
                };
                prop_assert_eq!(ours, expect, "op {}", i);
            }
            Op::SetCapacity(b) => {
                prop_assert_eq!(
                    r.set_capacity(b).map_err(|e| e.kind()),
                    m.set_capacity(b),
                    "op {}",
                    i
                );
            }
            Op::CloseWriter => w = None,
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn page_slots_match_the_model(ops in ops(4096)) { check(4096, false, &ops)?; }

    #[test]
    fn fat_slots_match_the_model(ops in ops(16384)) { check(16384, false, &ops)?; }

    #[test]
    fn fat_packet_slots_match_the_model(ops in ops(8192)) { check(8192, true, &ops)?; }
}
