//! A small pickle WRITER for tests: plain values in protocol 2 (BINUNICODE, BINPUT) or 4
//! (FRAME, SHORT_BINUNICODE, MEMOIZE), the opcodes CPython's `pickle.dump` uses for them,
//! and PyTorch memory snapshots built from events and segments. It writes containers as
//! CPython does (empty container, memoized, then MARK ... SETITEMS/APPENDS in batches of
//! 1000), so the reader meets the same shapes as in a real file. Independent of memplan's
//! reader: it shares no code with src/formats/pickle.rs.
// Each test file uses the part it needs.
#![allow(dead_code)]

/// A Python value.
#[derive(Clone, Debug)]
pub enum Py {
    None,
    Bool(bool),
    Int(i128),
    Str(String),
    List(Vec<Py>),
    Tuple(Vec<Py>),
    Dict(Vec<(Py, Py)>),
}

/// `{"k": v, ...}` with string keys.
pub fn dict(pairs: &[(&str, Py)]) -> Py {
    Py::Dict(pairs.iter().map(|(k, v)| (Py::Str(k.to_string()), v.clone())).collect())
}

pub fn int(n: u64) -> Py {
    Py::Int(i128::from(n))
}

pub fn string(s: &str) -> Py {
    Py::Str(s.to_string())
}

/// `pickle.dumps(value, protocol)` for protocol 2 or 4.
pub fn dumps(value: &Py, protocol: u8) -> Vec<u8> {
    let mut w = Writer { out: Vec::new(), protocol, memo: 0 };
    w.out.extend([0x80, protocol]);
    let body_start = w.out.len();
    if protocol >= 4 {
        // FRAME with its length filled in below.
        w.out.push(0x95);
        w.out.extend([0u8; 8]);
    }
    w.value(value);
    w.out.push(b'.');
    if protocol >= 4 {
        let length = (w.out.len() - body_start - 9) as u64;
        w.out[body_start + 1..body_start + 9].copy_from_slice(&length.to_le_bytes());
    }
    w.out
}

struct Writer {
    out: Vec<u8>,
    protocol: u8,
    memo: u32,
}

impl Writer {
    fn memoize(&mut self) {
        if self.protocol >= 4 {
            self.out.push(0x94);
        } else if self.memo < 256 {
            self.out.extend([b'q', self.memo as u8]);
        } else {
            self.out.push(b'r');
            self.out.extend(self.memo.to_le_bytes());
        }
        self.memo += 1;
    }

    fn value(&mut self, value: &Py) {
        match value {
            Py::None => self.out.push(b'N'),
            Py::Bool(b) => self.out.push(if *b { 0x88 } else { 0x89 }),
            Py::Int(n) => self.int(*n),
            Py::Str(s) => {
                if self.protocol >= 4 && s.len() < 256 {
                    self.out.extend([0x8c, s.len() as u8]);
                } else {
                    self.out.push(b'X');
                    self.out.extend((s.len() as u32).to_le_bytes());
                }
                self.out.extend(s.as_bytes());
                self.memoize();
            }
            Py::List(items) => {
                self.out.push(b']');
                self.memoize();
                for chunk in items.chunks(1000) {
                    if let [one] = chunk {
                        self.value(one);
                        self.out.push(b'a');
                    } else {
                        self.out.push(b'(');
                        for item in chunk {
                            self.value(item);
                        }
                        self.out.push(b'e');
                    }
                }
            }
            Py::Tuple(items) => {
                self.out.push(b'(');
                for item in items {
                    self.value(item);
                }
                self.out.push(b't');
                self.memoize();
            }
            Py::Dict(pairs) => {
                self.out.push(b'}');
                self.memoize();
                for chunk in pairs.chunks(1000) {
                    self.out.push(b'(');
                    for (k, v) in chunk {
                        self.value(k);
                        self.value(v);
                    }
                    self.out.push(b'u');
                }
            }
        }
    }

    fn int(&mut self, n: i128) {
        if (0..256).contains(&n) {
            self.out.extend([b'K', n as u8]);
        } else if (0..65536).contains(&n) {
            self.out.push(b'M');
            self.out.extend((n as u16).to_le_bytes());
        } else if i128::from(i32::MIN) <= n && n <= i128::from(i32::MAX) {
            self.out.push(b'J');
            self.out.extend((n as i32).to_le_bytes());
        } else {
            // LONG1: the shortest little-endian two's complement.
            let bytes = n.to_le_bytes();
            let mut len = 16;
            while len > 1 {
                let (top, next) = (bytes[len - 1], bytes[len - 2]);
                if (top == 0 && next & 0x80 == 0) || (top == 0xff && next & 0x80 != 0) {
                    len -= 1;
                } else {
                    break;
                }
            }
            self.out.extend([0x8a, len as u8]);
            self.out.extend(&bytes[..len]);
        }
    }
}

/// A trace event as PyTorch writes it.
pub fn event(action: &str, addr: u64, size: u64, time_us: u64) -> Py {
    dict(&[
        ("action", string(action)),
        ("addr", int(addr)),
        ("size", int(size)),
        ("stream", int(0)),
        ("time_us", int(time_us)),
        ("frames", Py::List(vec![])),
    ])
}

/// A segment with its blocks `(address, size, requested, state)`.
pub fn segment(device: u64, address: u64, total_size: u64, pool: &str, blocks: &[(u64, u64, u64, &str)]) -> Py {
    let blocks = blocks
        .iter()
        .map(|&(a, size, requested, state)| {
            dict(&[("address", int(a)), ("size", int(size)), ("requested_size", int(requested)), ("state", string(state)), ("frames", Py::List(vec![]))])
        })
        .collect();
    dict(&[
        ("device", int(device)),
        ("address", int(address)),
        ("total_size", int(total_size)),
        ("stream", int(0)),
        ("segment_type", string(pool)),
        ("segment_pool_id", Py::Tuple(vec![int(0), int(0)])),
        ("is_expandable", Py::Bool(false)),
        ("blocks", Py::List(blocks)),
    ])
}

/// `{"segments": ..., "device_traces": [events]}`.
pub fn snapshot(segments: Vec<Py>, events: Vec<Py>) -> Py {
    dict(&[("segments", Py::List(segments)), ("device_traces", Py::List(vec![Py::List(events)]))])
}
