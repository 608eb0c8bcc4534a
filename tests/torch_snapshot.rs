//! PyTorch memory snapshots (`memplan::formats::torch_snapshot`) read from pickles CPython
//! wrote (tests/data/torch_snapshots, `make_fixtures.py`) and from pickles written here
//! (tests/support/pickle.rs): a hand-made trace whose every figure is worked out below, the
//! same dict in protocols 2, 4 and 5, expandable segments, torch 1.13's format, seeded
//! random traces replayed by brute force (whole, and cut as a ring buffer cuts them), and
//! hostile pickles (code, truncation, sharing bombs, deep nesting, huge numbers), each an
//! error naming where, never a panic and never a run of anything.

#[path = "support/pickle.rs"]
mod pickle;
use pickle::*;

use std::path::Path;
use std::time::{Duration, Instant};

use memplan::checker::check_offsets;
use memplan::formats::pickle::{self as reader, PickleError};
use memplan::formats::torch_snapshot::render::user_first;
use memplan::formats::torch_snapshot::timeline::{self, Ideal, Origin, Timeline};
use memplan::formats::torch_snapshot::{self as snapshot, Frame, Pool, SnapshotError};
use memplan::rng::Rng;
use memplan::solve::offsets::SolveOptions;

const MIB: u64 = 1 << 20;
/// The hand-made trace's segments (make_fixtures.py): A made before the trace, B made in
/// it, C made and freed in it (it starts where B ends).
const A: u64 = 0x7F00_0000_0000;
const B: u64 = 0x7F00_0040_0000;
const C: u64 = 0x7F00_0060_0000;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/torch_snapshots").join(name)).unwrap()
}

fn options() -> SolveOptions {
    SolveOptions { search_nodes: 20_000, time_limit: Duration::from_secs(2), ..SolveOptions::default() }
}

/// Reads, replays and places `bytes` as the command does, the placement checked.
fn analyse(bytes: &[u8], device: Option<usize>) -> (snapshot::Snapshot, Timeline, Ideal) {
    let s = snapshot::parse(bytes).unwrap_or_else(|e| panic!("{e}"));
    let t = timeline::replay(&s, device).unwrap_or_else(|e| panic!("{e}"));
    let ideal = timeline::ideal(&t, 512, &options()).unwrap();
    check_offsets(&ideal.intervals(&t), &ideal.offsets, None).unwrap_or_else(|v| panic!("{v}"));
    assert!(ideal.arena >= ideal.lower_bound);
    (s, t, ideal)
}

fn round512(n: u64) -> u64 {
    n.max(1).div_ceil(512) * 512
}

#[test]
fn the_hand_made_trace_reads_as_worked_out_by_hand() {
    for (name, protocol) in [("handmade_p2.pickle", 2), ("handmade_p4.pickle", 4), ("handmade_p5.pickle", 5)] {
        let (s, t, ideal) = analyse(&fixture(name), None);
        assert_eq!(s.protocol, Some(protocol), "{name}");
        assert_eq!((t.device, t.devices.clone(), t.events), (0, vec![0], 17), "{name}");
        // Allocations (requested bytes): x0 = 1000000 at A, freed by event 1 (its alloc
        // was before the trace); s0 = 1 MiB at A + 2 MiB, live throughout (a block of the
        // snapshot with no alloc); a1 = 1000 (events 3..7), a2 = 2000000 (4..11), a3 =
        // 500000 (5.., live at the end), a4 = 2 MiB (9..13), a5 = 100 (15.., live).
        let (x0, s0, a1, a2, a3, a4, a5) = (1_000_000, MIB, 1000, 2_000_000, 500_000, 2 * MIB, 100);
        let allocated = [
            x0 + s0,                // 0: the trace's start
            s0,                     // 1: x0 freed
            s0,                     // 2: segment B
            s0 + a1,                // 3
            s0 + a1 + a2,           // 4
            s0 + a1 + a2 + a3,      // 5
            s0 + a1 + a2 + a3,      // 6: a1's free requested, not completed
            s0 + a2 + a3,           // 7
            s0 + a2 + a3,           // 8: segment C
            s0 + a2 + a3 + a4,      // 9: the allocated peak
            s0 + a2 + a3 + a4,      // 10
            s0 + a3 + a4,           // 11
            s0 + a3 + a4,           // 12
            s0 + a3,                // 13
            s0 + a3,                // 14: C freed
            s0 + a3 + a5,           // 15
            s0 + a3 + a5,           // 16: oom
            s0 + a3 + a5,           // 17: annotate
        ];
        assert_eq!(t.allocated, allocated, "{name}");
        // Reserved: A (4 MiB) from the start, B (2 MiB) from event 2, C (2 MiB) from 8 to 14.
        let mut reserved = vec![4 * MIB; 2];
        reserved.extend([6 * MIB; 6]);
        reserved.extend([8 * MIB; 6]);
        reserved.extend([6 * MIB; 4]);
        assert_eq!(t.reserved, reserved, "{name}");
        assert_eq!((t.max_allocated.bytes, t.max_allocated.at), (s0 + a2 + a3 + a4, 9));
        assert_eq!((t.max_reserved.bytes, t.max_reserved.at), (8 * MIB, 8));
        assert_eq!(t.elapsed_us(8), Some(70), "time_us is 1000 + 10 k for event k; the first is event 1");
        let c = t.counts;
        assert_eq!((c.traced, c.before_trace, c.standing, c.open_unmatched, c.other_actions), (5, 1, 1, 0, 1));
        assert_eq!((c.realloc, c.segment_mismatches, c.over_reserved, c.frees_requested), (0, 0, 0, false));

        // Live at the allocated peak, largest first.
        let live: Vec<(u64, u64)> = t.live_at(9).iter().map(|&i| (t.allocations[i].address, t.allocations[i].size)).collect();
        assert_eq!(live, [(C, a4), (A, a2), (A + 2 * MIB, s0), (B + 1024, a3)]);
        let a2_frames: Vec<String> =
            user_first(s.stack(t.allocations[t.live_at(9)[1]].frames)).iter().map(|f| format!("{}:{}", f.filename, f.line)).collect();
        assert_eq!(a2_frames[..2], ["/home/me/model.py:42", "/home/me/train.py:20"], "the user's frames first, innermost first");
        assert_eq!(a2_frames.len(), 5);
        let standing = &t.allocations[t.live_at(9)[2]];
        assert_eq!((standing.origin, standing.first, standing.last), (Origin::Standing, 0, 17));
        assert_eq!(s.stack(standing.frames)[0].name.as_ref(), "load_weights", "a standing block keeps the block's frames");

        // Fragmentation at the reserved peak (position 8): x0 and a1 are gone, a4 not yet.
        let f = &t.fragmentation;
        assert_eq!((f.at, f.reserved, f.allocated), (8, 8 * MIB, s0 + a2 + a3));
        // Blocks: a2's request rounded up to 512 B; a3's block is the snapshot's 500224 B.
        let (a2_block, a3_block) = (round512(a2), 500_224);
        assert_eq!(f.rounding, (a2_block - a2) + (a3_block - a3));
        // A: a2 at its start, s0 at 2 MiB: free between them and after s0.
        let a_free = (2 * MIB - a2_block) + MIB;
        // B: 1 KiB before a3 (a1's block, freed) and the rest after it.
        let b_free = 1024 + (2 * MIB - 1024 - a3_block);
        assert_eq!((f.free_split, f.free_unused, f.outside), (a_free + b_free, 2 * MIB, 0));
        assert_eq!(f.reserved - f.allocated, f.rounding + f.free_split + f.free_unused, "every byte not allocated is accounted for");
        let segments: Vec<(u64, u64, Pool, usize, u64, u64, u64)> =
            f.segments.iter().map(|g| (g.address, g.size, g.pool, g.blocks, g.allocated, g.free, g.largest_free)).collect();
        assert_eq!(
            segments,
            [
                (C, 2 * MIB, Pool::Unknown, 0, 0, 2 * MIB, 2 * MIB),
                (B, 2 * MIB, Pool::Small, 1, a3, b_free, 2 * MIB - 1024 - a3_block),
                (A, 4 * MIB, Pool::Large, 2, a2 + s0, a_free, MIB),
            ],
            "C is not merged with B: adjacent, but not an expandable segment's pieces"
        );
        assert!(f.segments[1].split() && f.segments[2].split() && !f.segments[0].split());

        let ooms: Vec<(usize, u64, Option<u64>)> = t.ooms.iter().map(|o| (o.at, o.size, o.device_free)).collect();
        assert_eq!(ooms, [(16, 8 * MIB, Some(MIB))]);

        // The ideal placement: every allocation rounded up to 512 B over its interval; the
        // most live at once is at 9..=10: s0, a2, a3, a4.
        let lower = s0 + round512(a2) + round512(a3) + a4;
        assert_eq!(ideal.lower_bound, lower);
        assert_eq!(ideal.arena, lower, "seven intervals: the solver reaches the bound");
        assert!(ideal.proved_optimal);
    }
}

#[test]
fn protocols_2_4_and_5_decode_to_the_same_snapshot() {
    let decoded: Vec<_> = ["handmade_p2.pickle", "handmade_p4.pickle", "handmade_p5.pickle"]
        .iter()
        .map(|name| {
            let s = snapshot::parse(&fixture(name)).unwrap();
            (s.segments, s.traces, s.stacks, s.has_segments)
        })
        .collect();
    assert_eq!(decoded[0], decoded[1]);
    assert_eq!(decoded[1], decoded[2]);
    // Frames shared in the file (a3's alloc event and its block) decode to one stack.
    let s = snapshot::parse(&fixture("handmade_p4.pickle")).unwrap();
    let a3_event = s.traces[0].iter().find(|e| e.addr == B + 1024).unwrap();
    let a3_block = s.segments[1].blocks.iter().find(|b| b.address == B + 1024).unwrap();
    assert_eq!(a3_event.frames, a3_block.frames);
    assert_ne!(a3_event.frames.0, 0);
}

#[test]
fn expandable_segments_map_and_unmap_pieces_of_one_segment() {
    let (_, t, ideal) = analyse(&fixture("expandable.pickle"), None);
    assert_eq!((t.device, t.devices.clone()), (1, vec![1]), "device 0 has no data: device 1 is read");
    let reserved: Vec<u64> = [0, 2, 2, 4, 4, 4, 6, 6, 6, 4].iter().map(|m| m * MIB).collect();
    assert_eq!(t.reserved, reserved);
    assert_eq!((t.max_reserved.bytes, t.max_reserved.at), (6 * MIB, 6));
    let f = &t.fragmentation;
    assert_eq!(f.segments.len(), 1, "three mapped pieces, one segment: {:?}", f.segments);
    let g = &f.segments[0];
    assert!(g.expandable && g.split());
    assert_eq!((g.address, g.size, g.pool, g.blocks, g.free, g.largest_free), (0x7F40_0000_0000, 6 * MIB, Pool::Large, 1, 4 * MIB, 5 * MIB / 2));
    assert_eq!((t.max_allocated.bytes, ideal.lower_bound, ideal.arena), (4 * MIB, 4 * MIB, 4 * MIB));
    let s = snapshot::parse(&fixture("expandable.pickle")).unwrap();
    match timeline::replay(&s, Some(0)) {
        Err(e @ SnapshotError::Device { .. }) => assert_eq!(e.to_string(), "the snapshot has no events or segments for device 0 (devices with data: 1)"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn torch_1_13_lists_of_segments_read_without_addresses_or_requests() {
    let (s, t, _) = analyse(&fixture("old_format.pickle"), None);
    assert!(s.traces.is_empty() && s.has_segments);
    assert_eq!(t.events, 0);
    // Blocks without addresses follow each other from the segment's start.
    let addresses: Vec<u64> = s.segments[0].blocks.iter().map(|b| b.address).collect();
    assert_eq!(addresses, [A, A + 8 * MIB, A + 12 * MIB, A + 16 * MIB]);
    let live: Vec<(u64, u64)> = t.live_at(0).iter().map(|&i| (t.allocations[i].address, t.allocations[i].size)).collect();
    assert_eq!(live, [(A, 8 * MIB), (A + 12 * MIB, 4 * MIB)]);
    assert_eq!((t.allocated.clone(), t.reserved.clone()), (vec![12 * MIB], vec![22 * MIB]));
    assert_eq!((t.fragmentation.free_split, t.fragmentation.free_unused), (8 * MIB, 2 * MIB));
}

#[test]
fn frames_of_the_users_own_code_are_told_apart() {
    let frame = |filename: &str| Frame { filename: filename.into(), line: 1, name: "f".into() };
    for user in ["/home/me/train.py", "train.py", "/site-packages/torchvision/models/resnet.py", "C:\\work\\model.py"] {
        assert!(frame(user).is_user(), "{user}");
    }
    for internal in ["/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", "torch/autograd/graph.py", "??", "<eval_with_key>.3", "C:\\py\\torch\\nn\\functional.py", "aten/src/ATen/native/cuda/Loss.cu"] {
        assert!(!frame(internal).is_user(), "{internal}");
    }
}

/// One random trace: allocations at fresh addresses inside one large segment made before
/// the trace, extra 2 MiB segments made and freed now and then, each free a
/// `free_requested` + `free_completed` pair. Keeps the snapshot's segments and events as
/// Python values (to cut the trace as a ring buffer does) and, for the brute force, each
/// allocation's (alloc event, free event, size) with events counted from 1 (free `None`:
/// live at the end) and each extra segment's (segment_alloc, segment_free) events.
struct Random {
    segments: Vec<Py>,
    events: Vec<Py>,
    allocations: Vec<(usize, Option<usize>, u64)>,
    extra: Vec<(usize, Option<usize>)>,
}

const BASE: u64 = 0x7E00_0000_0000;
const BASE_SIZE: u64 = 1 << 36;
const EXTRA: u64 = 0x7D00_0000_0000;

fn random_trace(seed: u64) -> Random {
    let mut rng = Rng::new(seed);
    let mut events = Vec::new();
    let mut allocations: Vec<(usize, Option<usize>, u64, u64)> = Vec::new(); // and the address
    let mut extra: Vec<(usize, Option<usize>)> = Vec::new();
    let mut next = BASE;
    let length = 20 + rng.below(120) as usize;
    while events.len() < length {
        let time = events.len() as u64 * 7;
        let open: Vec<usize> = (0..allocations.len()).filter(|&i| allocations[i].1.is_none()).collect();
        let alive: Vec<usize> = (0..extra.len()).filter(|&i| extra[i].1.is_none()).collect();
        match rng.below(10) {
            0..=5 => {
                let size = 1 + rng.below(3 * MIB);
                events.push(event("alloc", next, size, time));
                allocations.push((events.len(), None, size, next));
                next += round512(size);
            }
            6..=8 if !open.is_empty() => {
                let i = open[rng.below(open.len() as u64) as usize];
                let (_, _, size, address) = allocations[i];
                events.push(event("free_requested", address, size, time));
                events.push(event("free_completed", address, size, time + 1));
                allocations[i].1 = Some(events.len());
            }
            _ if !alive.is_empty() && rng.below(2) == 0 => {
                let k = alive[rng.below(alive.len() as u64) as usize];
                events.push(event("segment_free", EXTRA + k as u64 * 4 * MIB, 2 * MIB, time));
                extra[k].1 = Some(events.len());
            }
            _ => {
                events.push(event("segment_alloc", EXTRA + extra.len() as u64 * 4 * MIB, 2 * MIB, time));
                extra.push((events.len(), None));
            }
        }
    }
    // Never end on a free_requested: a cut keeping only it would see no free_completed.
    events.push(event("snapshot", 0, 0, 1 << 20));
    let mut blocks: Vec<(u64, u64, u64, &str)> =
        allocations.iter().filter(|a| a.1.is_none()).map(|&(_, _, size, address)| (address, round512(size), size, "active_allocated")).collect();
    blocks.push((next, 512, 512, "inactive"));
    let mut segments = vec![segment(0, BASE, BASE_SIZE, "large", &blocks)];
    for (k, s) in extra.iter().enumerate() {
        if s.1.is_none() {
            segments.push(segment(0, EXTRA + k as u64 * 4 * MIB, 2 * MIB, "small", &[]));
        }
    }
    Random { segments, events, allocations: allocations.iter().map(|&(a, f, size, _)| (a, f, size)).collect(), extra }
}

/// Live at position p (after event p): from event `from` on, until event `to`.
fn live(p: usize, from: usize, to: Option<usize>) -> bool {
    from <= p && to.is_none_or(|to| p < to)
}

#[test]
fn random_traces_replay_as_a_brute_force_does_whole_and_cut_as_a_ring_buffer() {
    for seed in 0..40u64 {
        let r = random_trace(seed);
        let protocol = if seed % 2 == 0 { 2 } else { 4 };
        let n = r.events.len();
        let allocated: Vec<u64> = (0..=n).map(|p| r.allocations.iter().filter(|a| live(p, a.0, a.1)).map(|a| a.2).sum()).collect();
        let reserved: Vec<u64> = (0..=n).map(|p| BASE_SIZE + r.extra.iter().filter(|s| live(p, s.0, s.1)).count() as u64 * 2 * MIB).collect();
        let lower = (0..=n).map(|p| r.allocations.iter().filter(|a| live(p, a.0, a.1)).map(|a| round512(a.2)).sum::<u64>()).max().unwrap();
        let (_, t, ideal) = analyse(&dumps(&snapshot(r.segments.clone(), r.events.clone()), protocol), None);
        assert_eq!(t.events, n, "seed {seed}");
        assert_eq!(t.allocated, allocated, "seed {seed}");
        assert_eq!(t.reserved, reserved, "seed {seed}");
        assert_eq!(ideal.lower_bound, lower, "seed {seed}");
        assert_eq!(t.max_allocated.bytes, *allocated.iter().max().unwrap());
        assert_eq!(t.max_reserved.bytes, *reserved.iter().max().unwrap());
        assert_eq!((t.counts.before_trace, t.counts.standing, t.counts.segment_mismatches), (0, 0, 0), "seed {seed}");
        // The ring buffer keeps the last events: each cut replays the same bytes from there.
        for cut in [1, 2, n / 3, n / 2, n - 1, n] {
            let bytes = dumps(&snapshot(r.segments.clone(), r.events[cut..].to_vec()), protocol);
            let (_, tc, ideal_cut) = analyse(&bytes, None);
            assert_eq!(tc.events, n - cut);
            assert_eq!(tc.allocated[..], allocated[cut..], "seed {seed}, cut {cut}");
            assert_eq!(tc.reserved[..], reserved[cut..], "seed {seed}, cut {cut}");
            // Allocations alive at the cut are inferred (freed later: allocated before the
            // trace; never freed: standing): none is lost or counted twice.
            let alive_at_cut = r.allocations.iter().filter(|a| live(cut, a.0, a.1)).count();
            assert_eq!(tc.counts.before_trace + tc.counts.standing, alive_at_cut, "seed {seed}, cut {cut}");
            assert_eq!(tc.counts.segment_mismatches, 0);
            assert!(ideal_cut.lower_bound <= ideal.lower_bound);
        }
    }
}

// Hostile pickles: each an error saying where, never a panic, never a run of anything.

#[test]
fn pickles_that_build_python_objects_are_refused_at_their_first_such_opcode() {
    // GLOBAL os.system + REDUCE, as protocol 0 and protocol 2 write it: the payload would
    // create this file if anything ran it.
    let marker = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pickle-payload-ran");
    let _ = std::fs::remove_file(&marker);
    let command = format!("touch {}", marker.display());
    let mut p0 = b"cos\nsystem\n(S'".to_vec();
    p0.extend(command.as_bytes());
    p0.extend(b"'\ntR.");
    let mut p2 = b"\x80\x02cposix\nsystem\nq\x00X".to_vec();
    p2.extend((command.len() as u32).to_le_bytes());
    p2.extend(command.as_bytes());
    p2.extend(b"q\x01\x85q\x02Rq\x03.");
    for (bytes, offset) in [(&p0, 0), (&p2, 2)] {
        let e = reader::parse(bytes).unwrap_err();
        assert_eq!(e, PickleError::PythonObject { offset, opcode: b'c', name: "GLOBAL" });
        let message = snapshot::parse(bytes).unwrap_err().to_string();
        assert!(message.contains("this pickle holds Python objects, not a memory snapshot; memplan never runs code from a pickle"), "{message}");
    }
    // CPython's own protocol 4 for a dict holding a datetime.date: STACK_GLOBAL, then REDUCE.
    let bytes = fixture("python_object.pickle");
    match reader::parse(&bytes) {
        Err(PickleError::PythonObject { name: "STACK_GLOBAL", opcode: 0x93, offset }) => assert_eq!(bytes[offset], 0x93),
        other => panic!("{other:?}"),
    }
    // Every object opcode, alone after PROTO.
    for (opcode, name) in [(b'R', "REDUCE"), (b'b', "BUILD"), (b'i', "INST"), (b'o', "OBJ"), (0x81, "NEWOBJ"), (0x92, "NEWOBJ_EX"), (b'P', "PERSID"), (b'Q', "BINPERSID"), (0x82, "EXT1"), (0x97, "NEXT_BUFFER")] {
        assert_eq!(reader::parse(&[0x80, 4, b'N', opcode, b'.']), Err(PickleError::PythonObject { offset: 3, opcode, name }));
    }
    assert!(!marker.exists(), "nothing ran");
}

#[test]
fn truncated_and_malformed_pickles_are_errors_at_their_byte_offset() {
    let bytes = fixture("handmade_p4.pickle");
    for cut in 0..bytes.len() {
        match reader::parse(&bytes[..cut]) {
            Err(PickleError::Truncated { len, .. }) => assert_eq!(len, cut),
            Err(PickleError::Empty) => assert_eq!(cut, 0),
            other => panic!("cut at {cut}: {other:?}"),
        }
        assert!(snapshot::parse(&bytes[..cut]).is_err());
    }
    let cases: [(&[u8], PickleError); 9] = [
        (b"\x80\x06N.", PickleError::Protocol { offset: 0, version: 6 }),
        (b"\x80\x02\xff", PickleError::UnknownOpcode { offset: 2, byte: 0xff }),
        (b"\x80\x02.", PickleError::Stack { offset: 2, name: "STOP", missing: "no value" }),
        (b"\x80\x02Na.", PickleError::Stack { offset: 3, name: "APPEND", missing: "no value" }),
        (b"\x80\x02NNa.", PickleError::NotAContainer { offset: 4, name: "APPEND", found: "None", expected: "list" }),
        (b"\x80\x02}(N", PickleError::Truncated { offset: 5, len: 5, what: "the pickle (no STOP opcode)" }),
        (b"\x80\x02}(Nu.", PickleError::OddItems { offset: 5, name: "SETITEMS", count: 1 }),
        (b"\x80\x02h\x05.", PickleError::MemoMissing { offset: 2, index: 5 }),
        (b"\x80\x02\x8f.", PickleError::Unsupported { offset: 2, opcode: 0x8f, name: "EMPTY_SET" }),
    ];
    for (bytes, expected) in cases {
        assert_eq!(reader::parse(bytes), Err(expected), "{bytes:?}");
    }
    // A length near 2^64 is a truncation, not an allocation.
    let mut huge = b"\x80\x04\x8d".to_vec();
    huge.extend(u64::MAX.to_le_bytes());
    assert!(matches!(reader::parse(&huge), Err(PickleError::Truncated { offset: 2, .. })));
    // Memo indices anywhere in u32, by LONG_BINPUT, read back by LONG_BINGET.
    let memo = b"\x80\x02K\x07r\xff\xff\xff\xffj\xff\xff\xff\xff\x86.";
    let pickle = reader::parse(memo).unwrap();
    assert_eq!(pickle.items(&pickle.root).unwrap(), [reader::Value::Int(7), reader::Value::Int(7)]);
}

#[test]
fn nesting_and_sharing_cost_no_more_than_the_bytes() {
    // 200,000 lists nested by APPEND: no recursion anywhere reads them.
    let depth = 200_000;
    let mut nested = vec![0x80, 2];
    nested.extend(std::iter::repeat_n(b']', depth));
    nested.extend(std::iter::repeat_n(b'a', depth - 1));
    nested.push(b'.');
    assert!(reader::parse(&nested).is_ok());
    let e = snapshot::parse(&nested).unwrap_err().to_string();
    assert_eq!(e, "`segments[0]`: expected a dict, found a list");
    // MARKs: at most 1000 open.
    let mut marks = vec![0x80, 2];
    marks.extend(std::iter::repeat_n(b'(', 1001));
    assert_eq!(reader::parse(&marks), Err(PickleError::TooDeep { offset: 1002 }));
    // A sharing bomb: 2000 references to one list of 2000 references to one event: four
    // million events from 20 KB. Refused, quickly.
    let text = |s: &str| {
        let mut b = vec![b'X'];
        b.extend((s.len() as u32).to_le_bytes());
        b.extend(s.as_bytes());
        b
    };
    let mut bomb = vec![0x80, 2, b'}', b'('];
    bomb.extend(text("device_traces"));
    bomb.extend(b"]("); // the outer list, and the MARK of its APPENDS
    bomb.extend(b"]r\x00\x01\x00\x00"); // the inner list: memo 256
    bomb.extend(b"}(");
    for (key, value) in [("action", text("alloc")), ("addr", b"M\x00\x10".to_vec()), ("size", b"M\x00\x02".to_vec())] {
        bomb.extend(text(key));
        bomb.extend(value);
    }
    bomb.extend(b"ur\x01\x01\x00\x00a"); // the event: memo 257, appended to the inner list
    bomb.push(b'(');
    bomb.extend(b"j\x01\x01\x00\x00".repeat(1999));
    bomb.push(b'e'); // the inner list holds the event 2000 times
    bomb.extend(b"j\x00\x01\x00\x00".repeat(1999));
    bomb.extend(b"eu."); // the outer list holds the inner one 2000 times
    let started = Instant::now();
    let pickle = reader::parse(&bomb).unwrap();
    let traces = pickle.pairs(&pickle.root).unwrap()[0].1.clone();
    assert_eq!(pickle.items(&traces).unwrap().len(), 2000);
    match snapshot::parse(&bomb) {
        Err(SnapshotError::Sharing { bytes }) => assert_eq!(bytes, bomb.len()),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn fields_out_of_range_are_errors_naming_their_path() {
    let one = |e: Py| dumps(&snapshot(vec![], vec![e]), 2);
    let with = |key: &str, value: Py| {
        let Py::Dict(mut pairs) = event("alloc", 4096, 512, 1) else { unreachable!() };
        for (k, v) in &mut pairs {
            if matches!(k, Py::Str(s) if s == key) {
                *v = value.clone();
            }
        }
        one(Py::Dict(pairs))
    };
    let error = |bytes: Vec<u8>| snapshot::parse(&bytes).unwrap_err().to_string();
    assert_eq!(error(with("size", Py::Int(-5))), "`device_traces[0][0].size`: -5 is negative; a non-negative integer is needed here");
    assert_eq!(error(with("addr", Py::Int(1 << 70))), "`device_traces[0][0].addr`: an integer past 2^63 - 1");
    assert_eq!(error(with("addr", string("0x1000"))), "`device_traces[0][0].addr`: expected a non-negative integer, found a string");
    assert_eq!(error(with("addr", Py::None)), "`device_traces[0][0].addr`: missing (a non-negative integer is needed here)");
    assert_eq!(error(with("frames", dict(&[]))), "`device_traces[0][0].frames`: expected a list, found a dict");
    let over = with("addr", int(i64::MAX as u64));
    assert!(snapshot::parse(&over).is_ok(), "addr + size = 2^63 + 511 fits");
    let bad_state = dumps(&snapshot(vec![segment(0, 4096, 4096, "large", &[(4096, 4096, 4096, "allocated")])], vec![]), 4);
    assert_eq!(
        error(bad_state),
        "`segments[0].blocks[0].state`: `allocated` is not a block state (active_allocated, active_pending_free, inactive)"
    );
    // Addresses are int64 in PyTorch: one past them is refused, the largest reads.
    let past = dumps(&snapshot(vec![segment(0, u64::MAX - 10, 4096, "large", &[])], vec![]), 4);
    assert_eq!(error(past), "`segments[0].address`: an integer past 2^63 - 1");
    let last = dumps(&snapshot(vec![segment(0, i64::MAX as u64, 4096, "large", &[])], vec![]), 4);
    assert_eq!(snapshot::parse(&last).unwrap().segments[0].address, i64::MAX as u64);
    assert_eq!(
        error(dumps(&dict(&[("version", int(1))]), 4)),
        "not a PyTorch memory snapshot: a dict with neither `segments` nor `device_traces` (its keys: `version`)"
    );
    assert_eq!(error(dumps(&int(3), 4)), "not a PyTorch memory snapshot: the pickle holds an integer, not a dict");
    // Five live allocations of 2^62 bytes: more than 2^64 - 1 at once.
    let huge: Vec<Py> = (0..5).map(|k| event("alloc", k << 60, 1 << 62, k)).collect();
    let s = snapshot::parse(&dumps(&snapshot(vec![], huge), 4)).unwrap();
    assert_eq!(timeline::replay(&s, None).unwrap_err().to_string(), "the allocations live at one moment add up to more than 2^64 - 1 bytes");
}
