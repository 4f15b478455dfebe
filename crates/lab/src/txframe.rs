//! Test frames kept in transmit-ring slots: a slot is built once for a flow and frame size
//! ([`crate::packet::build_frame`]), and every later frame for the same flow and size only gets
//! a new test tag (sequence number, timestamp) and a UDP checksum adjusted for it (RFC 1624),
//! which costs a few dozen bytes of writes whatever the frame size.
//!
//! The tag sits at the start of the UDP payload, right after the UDP checksum; where that is
//! (IPv4, IPv6, IPv6 in an outer IPv4 header) is found in the built frame, so this module does
//! not depend on the header layout. The IPv4 identification that `build_frame` derives from
//! the sequence number keeps the value of the frame the slot was built for (the frames carry
//! DF, so it identifies nothing; RFC 6864 4.1).

use crate::packet::{build_frame, fold, sum16, Flow, Tag, FCS_LEN, TAG_LEN};

/// The tag's bytes as `build_frame` writes them: tag u16 | flow u32 | seq u32 | tx_ns u64, big
/// endian.
pub fn tag_bytes(t: &Tag) -> [u8; TAG_LEN] {
    let mut b = [0u8; TAG_LEN];
    b[0..2].copy_from_slice(&t.tag.to_be_bytes());
    b[2..6].copy_from_slice(&t.flow.to_be_bytes());
    b[6..10].copy_from_slice(&t.seq.to_be_bytes());
    b[10..18].copy_from_slice(&t.tx_ns.to_be_bytes());
    b
}

/// What a frame needs besides its flow and tag.
#[derive(Debug, Clone, Copy)]
pub struct Link<'a> {
    pub v6: bool,
    pub dst_mac: &'a [u8; 6],
    pub src_mac: &'a [u8; 6],
}

/// The frame a slot holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotFrame {
    /// (flow index, frame size with FCS) of the frame in the slot; None when the slot has none.
    key: Option<(usize, usize)>,
    len: usize,
    tag_off: usize,
    /// One's-complement sum of everything the UDP checksum covers except the tag (and the
    /// checksum field itself), folded to 16 bits.
    base: u16,
}

impl SlotFrame {
    /// Writes the frame for flow `fi` (`flow`), size `frame` (with FCS) and `tag` into `buf`,
    /// which holds what this slot last held; returns its length (without FCS). None when the
    /// frame cannot be built (too small, or larger than `buf`).
    pub fn write(
        &mut self,
        buf: &mut [u8],
        fi: usize,
        flow: &Flow,
        frame: usize,
        link: &Link<'_>,
        tag: Tag,
    ) -> Option<usize> {
        if self.key == Some((fi, frame)) {
            let b = buf.get_mut(self.tag_off - 2..self.tag_off + TAG_LEN)?;
            let t = tag_bytes(&tag);
            b[2..].copy_from_slice(&t);
            let mut c = fold(u32::from(self.base) + sum16(&t));
            if c == 0 {
                c = 0xffff; // RFC 768: a computed zero is sent as all ones
            }
            b[..2].copy_from_slice(&c.to_be_bytes());
            return Some(self.len);
        }
        self.key = None;
        // build_frame leaves the payload past the tag as it is: clear what an earlier frame
        // (another size or layout) left there.
        let want = frame.checked_sub(FCS_LEN)?;
        buf.get_mut(..want)?.fill(0);
        let len = build_frame(buf, frame, link.v6, link.dst_mac, link.src_mac, flow, tag)?;
        let t = tag_bytes(&tag);
        let tag_off = buf[..len].windows(TAG_LEN).position(|w| w == t)?;
        if tag_off < 8 {
            return None;
        }
        let c = u16::from_be_bytes([buf[tag_off - 2], buf[tag_off - 1]]);
        // RFC 1624: the sum without the tag is the sum with it plus the complement of each of
        // its words.
        let neg: u32 = t
            .chunks_exact(2)
            .map(|w| u32::from(!u16::from_be_bytes([w[0], w[1]])))
            .sum();
        let base = !fold(u32::from(!c) + neg);
        *self = SlotFrame {
            key: Some((fi, frame)),
            len,
            tag_off,
            base,
        };
        Some(len)
    }
}

/// Ring slots for a trial: a multiple of the period after which the sender's schedule (flow
/// = position mod flows, size = the IMIX pattern position) repeats, so that every slot always
/// holds the same flow and size and only needs its tag patched; at least `min` slots, at most
/// `max`. When the period is longer than `max`, `min` slots (every frame is then built).
pub fn ring_slots(nflows: usize, pattern: usize, min: usize, max: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let lcm = |a: usize, b: usize| a / gcd(a, b) * b;
    // Slots come in pairs (two per page).
    let period = lcm(lcm(nflows.max(1), pattern.max(1)), 2);
    if period > max {
        return min;
    }
    period * min.div_ceil(period).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{flows_v4, flows_v6, parse_tag, SizeMix};

    fn udp_ok(f: &[u8], v6: bool) -> bool {
        if v6 {
            let udp = &f[54..];
            fold(sum16(&f[22..54]) + 17 + udp.len() as u32 + sum16(udp)) == 0
        } else {
            let udp = &f[34..];
            fold(sum16(&f[26..34]) + 17 + udp.len() as u32 + sum16(udp)) == 0
                && fold(sum16(&f[14..34])) == 0
        }
    }

    fn tag(seq: u32, tx_ns: u64) -> Tag {
        Tag {
            tag: 0x1234,
            flow: 3,
            seq,
            tx_ns,
        }
    }

    #[test]
    fn patched_frames_carry_the_tag_and_valid_checksums() {
        let link = Link {
            v6: false,
            dst_mac: &[2; 6],
            src_mac: &[4; 6],
        };
        let flows = flows_v4(4, 0, [198, 19, 0, 2]);
        let mut buf = vec![0u8; 2016];
        let mut slot = SlotFrame::default();
        for size in [64usize, 570, 1518, 64] {
            // Built once, then patched: every tag value round-trips and checksums verify.
            for (i, (seq, ts)) in [
                (0u32, 0u64),
                (1, 1),
                (0xffff_ffff, u64::MAX),
                (77, 0x0102_0304_0506_0708),
                (0x8000_0000, 0xffff_0000_ffff_0000),
            ]
            .into_iter()
            .enumerate()
            {
                let t = tag(seq, ts);
                let n = slot.write(&mut buf, 3, &flows[3], size, &link, t).unwrap();
                assert_eq!(n, size - FCS_LEN);
                assert_eq!(slot.key, Some((3, size)), "built or reused ({i})");
                assert_eq!(parse_tag(&buf[..n]), Some(t));
                assert!(udp_ok(&buf[..n], false), "size {size} seq {seq}");
                // The payload past the tag stays zero.
                assert!(buf[slot.tag_off + TAG_LEN..n].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn patched_frame_equals_a_built_one_but_for_the_ip_id() {
        let link = Link {
            v6: false,
            dst_mac: &[2; 6],
            src_mac: &[4; 6],
        };
        let flows = flows_v4(1, 0, [198, 19, 0, 2]);
        let mut slot = SlotFrame::default();
        let mut buf = vec![0u8; 2016];
        slot.write(&mut buf, 0, &flows[0], 128, &link, tag(9, 5))
            .unwrap();
        let t = tag(10, 99);
        let n = slot.write(&mut buf, 0, &flows[0], 128, &link, t).unwrap();
        let mut fresh = vec![0u8; 2016];
        let m = build_frame(&mut fresh, 128, false, &[2; 6], &[4; 6], &flows[0], t).unwrap();
        assert_eq!(n, m);
        // IPv4 identification (and so the header checksum) are the first build's.
        let mut a = buf[..n].to_vec();
        let mut b = fresh[..m].to_vec();
        for x in [&mut a, &mut b] {
            x[18..20].fill(0);
            x[24..26].fill(0);
        }
        assert_eq!(a, b);
    }

    #[test]
    fn a_slot_changing_flow_or_size_is_rebuilt() {
        let mut dst = [0u8; 16];
        dst[..4].copy_from_slice(&[0x20, 1, 0, 2]);
        dst[15] = 2;
        let flows = flows_v6(2, 0, dst);
        let link = Link {
            v6: true,
            dst_mac: &[2; 6],
            src_mac: &[4; 6],
        };
        let mut slot = SlotFrame::default();
        let mut buf = vec![0u8; 2016];
        // A large frame first leaves bytes where the small one's payload is checked.
        for (fi, size) in [
            (0usize, 1518usize),
            (1, 1518),
            (1, 128),
            (0, 128),
            (0, 1024),
        ] {
            let t = tag(fi as u32 + size as u32, size as u64);
            let n = slot
                .write(&mut buf, fi, &flows[fi], size, &link, t)
                .unwrap();
            assert_eq!(slot.key, Some((fi, size)));
            assert_eq!(parse_tag(&buf[..n]), Some(t));
            assert!(udp_ok(&buf[..n], true));
            let src: [u8; 16] = buf[22..38].try_into().unwrap();
            assert_eq!(src, flows[fi].src);
        }
        // Too small for IPv6, or larger than the slot: nothing is built.
        assert!(slot
            .write(&mut buf, 0, &flows[0], 64, &link, tag(1, 1))
            .is_none());
        assert!(slot
            .write(&mut buf[..100], 0, &flows[0], 1518, &link, tag(1, 1))
            .is_none());
        assert_eq!(slot.key, None);
    }

    #[test]
    fn ring_slots_repeat_the_schedule() {
        // 100 flows, fixed size: 4,000 slots hold flow i at every slot i + 100k.
        assert_eq!(ring_slots(100, 1, 4096, 16384), 4100);
        // IMIX's 20-frame pattern with 100 flows: period 100.
        assert_eq!(ring_slots(100, 20, 4096, 16384), 4100);
        assert_eq!(ring_slots(1000, 20, 4096, 16384), 5000);
        // Odd counts are doubled to fill pages.
        assert_eq!(ring_slots(3, 1, 10, 100), 12);
        assert_eq!(ring_slots(1, 1, 4096, 16384), 4096);
        // Too long a period: the minimum, every frame built.
        assert_eq!(ring_slots(1_000_000, 1, 4096, 16384), 4096);
        assert_eq!(ring_slots(10_007, 20, 4096, 16384), 4096);
        // The size pattern of IMIX is the period of SizeMix::frame.
        let s = SizeMix::Imix;
        assert_eq!(s.frame(3, false), s.frame(23, false));
    }
}
