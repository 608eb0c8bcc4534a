//! Buffer lists in minimalloc's CSV format: `id,lower,upper,size` with an optional
//! `offset` column; each buffer lives on the half-open interval `[lower, upper)`.
//!
//! This is how offset solvers are benchmarked against other tools and how any plan can be
//! cross-checked with them: [`from_plan`] writes a plan's buffers in the format. Reading is strict and located: a malformed line gives its
//! `line:column`, what was expected and a hint, never a panic. Numbers are u64; an interval
//! must have `lower < upper` (an empty lifetime would hold no bytes at any time).

use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

use crate::plan::{Plan, align_up};

/// One buffer of a list.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ListedBuffer {
    pub id: String,
    /// First time step it is live.
    pub lower: u64,
    /// First time step it is no longer live.
    pub upper: u64,
    pub size: u64,
    /// The offset, when the file has an `offset` column.
    pub offset: Option<u64>,
    /// Its line in the file (from 1; the header is line 1).
    pub line: usize,
}

/// What is wrong with a buffer-list file.
#[derive(Debug, Error, Diagnostic)]
pub enum BufferListError {
    /// The first line is not the expected header.
    #[error("expected the header `id,lower,upper,size` (optionally `,offset`)")]
    #[diagnostic(help("minimalloc's CSV format: one buffer per line, `id,lower,upper,size`, interval [lower, upper)"))]
    Header {
        #[label("found this")]
        span: SourceSpan,
    },
    /// A line has the wrong number of fields.
    #[error("line {line}: expected {expected} comma-separated fields, found {found}")]
    FieldCount {
        line: usize,
        expected: usize,
        found: usize,
        #[label("this line")]
        span: SourceSpan,
    },
    /// A numeric field is not a non-negative integer that fits in 64 bits.
    #[error("line {line}: `{text}` is not a valid {field} (a non-negative integer below 2^64)")]
    Number {
        line: usize,
        field: &'static str,
        text: String,
        #[label("here")]
        span: SourceSpan,
    },
    /// `upper` is not after `lower`.
    #[error("line {line}: buffer {id} has lower {lower} >= upper {upper}")]
    #[diagnostic(help("intervals are half-open [lower, upper): a buffer live at one step t has lower t and upper t+1"))]
    EmptyInterval {
        line: usize,
        id: String,
        lower: u64,
        upper: u64,
        #[label("empty lifetime")]
        span: SourceSpan,
    },
    /// Two buffers share an id.
    #[error("line {line}: buffer id `{id}` appears twice")]
    DuplicateId {
        line: usize,
        id: String,
        #[label("second time")]
        span: SourceSpan,
    },
}

const FIELDS: [&str; 5] = ["id", "lower", "upper", "size", "offset"];

/// Parses a buffer list (see the module docs).
pub fn parse_buffer_list(text: &str) -> Result<Vec<ListedBuffer>, BufferListError> {
    let mut lines = line_spans(text);
    let (header_start, header) = lines.next().unwrap_or((0, ""));
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    let with_offset = match columns[..] {
        ["id", "lower", "upper", "size"] => false,
        ["id", "lower", "upper", "size", "offset"] => true,
        _ => return Err(BufferListError::Header { span: (header_start, header.len()).into() }),
    };
    let expected = if with_offset { 5 } else { 4 };
    // Every id field as written (where, and the line), for the duplicate check at the end.
    let mut ids: Vec<IdField<'_>> = Vec::new();
    let mut buffers = Vec::new();
    let mut fields = [(0usize, ""); 5];
    for (index, (start, line)) in lines.enumerate() {
        let line_no = index + 2;
        if line.trim().is_empty() {
            continue;
        }
        let mut found = 0;
        let mut at = start;
        for field in line.split(',') {
            if let Some(slot) = fields.get_mut(found) {
                *slot = (at, field);
            }
            found += 1;
            at += field.len() + 1;
        }
        if found != expected {
            let error = BufferListError::FieldCount { line: line_no, expected, found, span: (start, line.len()).into() };
            return Err(first_duplicate(&ids).unwrap_or(error));
        }
        let number = |k: usize| -> Result<u64, BufferListError> {
            let (at, raw) = fields[k];
            let trimmed = raw.trim();
            trimmed.parse::<u64>().map_err(|_| BufferListError::Number {
                line: line_no,
                field: FIELDS[k],
                text: trimmed.to_string(),
                span: (at, raw.len().max(1)).into(),
            })
        };
        let id = fields[0].1.trim();
        let numbers = (|| {
            let (lower, upper, size) = (number(1)?, number(2)?, number(3)?);
            let offset = if with_offset { Some(number(4)?) } else { None };
            if lower >= upper {
                return Err(BufferListError::EmptyInterval { line: line_no, id: id.to_string(), lower, upper, span: (start, line.len()).into() });
            }
            Ok((lower, upper, size, offset))
        })();
        let (lower, upper, size, offset) = numbers.map_err(|error| first_duplicate(&ids).unwrap_or(error))?;
        ids.push(IdField { line: line_no, at: fields[0].0, raw: fields[0].1 });
        buffers.push(ListedBuffer { id: id.to_string(), lower, upper, size, offset, line: line_no });
    }
    first_duplicate(&ids).map_or(Ok(buffers), Err)
}

/// The id field of a line: its line number, where it starts and its text as written.
struct IdField<'a> {
    line: usize,
    at: usize,
    raw: &'a str,
}

/// The error for the first line (in file order) whose id an earlier line has, if any: the
/// error a check line by line would stop at. Found by sorting the ids' hashes, not by a
/// hash set filled line by line: 2,000,000 ids missed the cache at every insert, half of
/// reading the list.
fn first_duplicate(ids: &[IdField<'_>]) -> Option<BufferListError> {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    let mut keys: Vec<(u64, usize)> = ids.iter().enumerate().map(|(k, f)| (hasher.hash_one(f.raw.trim()), k)).collect();
    keys.sort_unstable();
    let mut first: Option<usize> = None;
    for group in keys.chunk_by(|a, b| a.0 == b.0).filter(|g| g.len() > 1) {
        // Equal hashes, ids ascending: each id equal to an earlier one is a duplicate.
        for (i, &(_, k)) in group.iter().enumerate() {
            if group[..i].iter().any(|&(_, j)| ids[j].raw.trim() == ids[k].raw.trim()) {
                first = Some(first.map_or(k, |f| f.min(k)));
            }
        }
    }
    first.map(|k| {
        let field = &ids[k];
        BufferListError::DuplicateId { line: field.line, id: field.raw.trim().to_string(), span: (field.at, field.raw.len().max(1)).into() }
    })
}

/// `(byte offset, line without its line ending)` for every line.
fn line_spans(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut start = 0;
    text.split_inclusive('\n').map(move |raw| {
        let at = start;
        start += raw.len();
        (at, raw.trim_end_matches(['\n', '\r']))
    })
}

/// The list as CSV with an `offset` column (`offsets[i]` for buffer `i`).
pub fn write_buffer_list(buffers: &[ListedBuffer], offsets: &[u64]) -> String {
    let mut out = String::from("id,lower,upper,size,offset\n");
    for (b, offset) in buffers.iter().zip(offsets) {
        out.push_str(&format!("{},{},{},{},{}\n", b.id, b.lower, b.upper, b.size, offset));
    }
    out
}

/// The buffer list of `plan`, with an `offset` column: one row per buffer, in buffer order;
/// `id` is the buffer (`buf3`), `[lower, upper)` its live range as half-open schedule steps
/// (`first`, `last + 1`), `size` its bytes rounded up to the plan's alignment (the sizes
/// the offset solver placed), `offset` its offset. Any plan can so be cross-checked with
/// other offset solvers, or its offsets validated by any tool that reads the format.
pub fn from_plan(plan: &Plan) -> String {
    let buffers: Vec<ListedBuffer> = plan
        .buffers
        .iter_enumerated()
        .map(|(id, b)| ListedBuffer {
            line: id.0 as usize + 2,
            id: id.to_string(),
            lower: b.first as u64,
            upper: b.last as u64 + 1,
            size: align_up(b.size, plan.alignment).unwrap_or(u64::MAX),
            offset: Some(b.offset),
        })
        .collect();
    let offsets: Vec<u64> = plan.buffers.iter().map(|b| b.offset).collect();
    write_buffer_list(&buffers, &offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_minimallocs_format_with_and_without_offsets() {
        let list = parse_buffer_list("id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\n").unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[1], ListedBuffer { id: "b2".into(), lower: 3, upper: 9, size: 4, offset: None, line: 3 });
        let text = write_buffer_list(&list, &[0, 4]);
        assert_eq!(text, "id,lower,upper,size,offset\nb1,0,3,4,0\nb2,3,9,4,4\n");
        let again = parse_buffer_list(&text).unwrap();
        assert_eq!(again[1].offset, Some(4));
    }

    #[test]
    fn errors_are_located() {
        let cases = [
            ("lower,upper\n", "header"),
            ("id,lower,upper,size\nb1,0,3\n", "3"),
            ("id,lower,upper,size\nb1,0,x,4\n", "`x` is not a valid upper"),
            ("id,lower,upper,size\nb1,0,99999999999999999999,4\n", "not a valid upper"),
            ("id,lower,upper,size\nb1,3,3,4\n", "lower 3 >= upper 3"),
            ("id,lower,upper,size\nb1,0,3,4\nb1,1,2,4\n", "appears twice"),
            // The first error in file order wins: a duplicate before a bad line, a bad line
            // before a duplicate.
            ("id,lower,upper,size\nb1,0,3,4\nb2,0,3,4\nb1,1,2,4\nb3,0,x,4\nb2,0,1,1\n", "line 4: buffer id `b1` appears twice"),
            ("id,lower,upper,size\nb1,0,3,4\nb3,0,x,4\nb1,1,2,4\n", "`x` is not a valid upper"),
            ("", "header"),
        ];
        for (text, needle) in cases {
            let err = parse_buffer_list(text).unwrap_err();
            assert!(err.to_string().contains(needle), "{text:?}: {err}");
            let rendered = crate::diagnostics::render(&err, "x.csv", text, false);
            assert!(rendered.contains("x.csv:"), "{rendered}");
        }
    }
}
