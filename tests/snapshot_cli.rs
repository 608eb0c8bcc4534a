//! `memplan snapshot FILE.pickle`: the text report (snapshotted), the JSON's stable keys
//! and figures (the library's, for the same file), `--emit`'s files read back by
//! independent readers (the SVG as XML, the trace as JSON whose counters and events agree
//! with the report, the CSV through `memplan alloc`), and the exit statuses of bad input.

#[path = "support/bin.rs"]
mod bin;
use bin::*;

use std::time::Duration;

use memplan::checker::check_offsets;
use memplan::formats::buffer_list::parse_buffer_list;
use memplan::formats::torch_snapshot::{self as snapshot, timeline};
use memplan::solve::offsets::SolveOptions;

const HANDMADE: &str = "tests/data/torch_snapshots/handmade_p4.pickle";

fn ok(args: &[&str]) -> String {
    let out = memplan(args);
    assert_eq!(out.status.code(), Some(0), "memplan {args:?}:\n{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn the_text_report_says_where_the_memory_went() {
    let report = ok(&["snapshot", HANDMADE]);
    insta::assert_snapshot!("handmade_text", report);
    for needle in [
        "your step peaked at 8388608 B (8.00 MiB) reserved (after event 8, +0.000070 s) and 5645728 B (5.38 MiB) allocated",
        "its allocations fit in 5646336 B (5.38 MiB) (lower bound 5646336 B (5.38 MiB))",
        "/home/me/model.py:42 in forward",
        "free in 1 unused segment",
        "out of memory: 1 event",
    ] {
        assert!(report.contains(needle), "missing {needle:?} in:\n{report}");
    }
    // --top 1: one allocation and one segment listed, the rest summed.
    let short = ok(&["snapshot", HANDMADE, "--top", "1"]);
    assert!(short.contains("  ... and 3 more, 3548576 B (3.38 MiB)"), "{short}");
    assert!(short.contains("  ... and 2 more segments"), "{short}");
    // The same figures from every protocol.
    let p2 = ok(&["snapshot", "tests/data/torch_snapshots/handmade_p2.pickle"]);
    assert_eq!(p2.replace("handmade_p2.pickle", "X").replace("protocol 2", "protocol N"), report.replace("handmade_p4.pickle", "X").replace("protocol 4", "protocol N"));
}

#[test]
fn json_has_stable_keys_and_the_librarys_figures() {
    let json: serde_json::Value = serde_json::from_str(&ok(&["snapshot", HANDMADE, "--format", "json"])).expect("valid JSON");
    let bytes = std::fs::read(HANDMADE).unwrap();
    let s = snapshot::parse(&bytes).unwrap();
    let t = timeline::replay(&s, None).unwrap();
    let options = SolveOptions { search_nodes: 20_000, time_limit: Duration::from_secs(2), ..SolveOptions::default() };
    let ideal = timeline::ideal(&t, 512, &options).unwrap();
    assert_eq!(json["schema_version"], 1);
    for (key, value) in [
        ("max_reserved", t.max_reserved.bytes),
        ("max_reserved_at", t.max_reserved.at as u64),
        ("max_allocated", t.max_allocated.bytes),
        ("max_allocated_at", t.max_allocated.at as u64),
        ("reserved_at_end", t.reserved[t.events]),
        ("allocated_at_end", t.allocated[t.events]),
        ("ideal_arena", ideal.arena),
        ("lower_bound", ideal.lower_bound),
        ("alignment", 512),
        ("events", 17),
        ("device", 0),
    ] {
        assert_eq!(json[key].as_u64(), Some(value), "{key} in {json}");
    }
    let live = json["live_at_peak"].as_array().unwrap();
    assert_eq!(live.len(), 4);
    let sum: u64 = live.iter().map(|a| a["bytes"].as_u64().unwrap()).sum();
    assert_eq!(sum, t.max_allocated.bytes);
    assert!(live.windows(2).all(|w| w[0]["bytes"].as_u64() >= w[1]["bytes"].as_u64()), "largest first");
    assert_eq!(live[1]["frames"][2]["filename"], "/home/me/model.py");
    assert_eq!(live[1]["frames"][2]["user"], true);
    let f = &json["fragmentation"];
    let parts = ["rounding", "free_in_split_segments", "free_in_unused_segments"].map(|k| f[k].as_u64().unwrap());
    assert_eq!(parts.iter().sum::<u64>(), f["not_allocated"].as_u64().unwrap());
    assert_eq!(f["segments"].as_array().unwrap().len(), 3);
    assert_eq!(json["ooms"][0]["bytes"], 8 << 20);
    assert_eq!(json["allocations"]["before_trace"], 1);
    assert!(json["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("ring buffer")));
}

#[test]
fn emit_writes_its_fixed_names_and_each_reads_back() {
    let dir = scratch_dir("snapshot", "emit");
    let out = dir.join("out");
    let out_str = out.to_str().unwrap();
    let stdout = ok(&["snapshot", HANDMADE, "--emit", "text,json,svg,trace,csv", "-o", out_str]);
    assert_eq!(file_names(&out), ["allocations.csv", "memory.svg", "report.txt", "snapshot.json", "trace.json"]);
    assert_eq!(stdout.lines().count(), 5, "{stdout}");
    assert_eq!(std::fs::read_to_string(out.join("report.txt")).unwrap(), ok(&["snapshot", HANDMADE]));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("snapshot.json")).unwrap()).unwrap();
    let (max_reserved, max_allocated) = (json["max_reserved"].as_u64().unwrap(), json["max_allocated"].as_u64().unwrap());

    // The SVG: XML, the two curves, their peaks drawn at the top of the plot's scale.
    let svg = std::fs::read_to_string(out.join("memory.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is XML");
    let by_id = |id: &str| doc.descendants().find(|n| n.attribute("id") == Some(id)).unwrap_or_else(|| panic!("no #{id}"));
    for id in ["reserved", "allocated", "ideal", "lower-bound", "reserved-peak", "allocated-peak", "legend", "ooms"] {
        by_id(id);
    }
    let points = |id: &str| -> Vec<(f64, f64)> {
        by_id(id).attribute("points").unwrap().split(' ').map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        }).collect()
    };
    let top = |id: &str| points(id).iter().map(|p| p.1).fold(f64::MAX, f64::min);
    // y = 72 + 590 (1 - bytes / max): the reserved peak is the scale's top.
    assert!((top("reserved") - 72.0).abs() < 0.01, "{}", top("reserved"));
    let expected = 72.0 + 590.0 * (1.0 - max_allocated as f64 / max_reserved as f64);
    assert!((top("allocated") - expected).abs() < 0.01, "{} vs {expected}", top("allocated"));

    // The trace: JSON; the counter peaks at the report's figures; one event per allocation,
    // lanes never overlap.
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let counter_max = |series: &str| events.iter().filter(|e| e["ph"] == "C").map(|e| e["args"][series].as_u64().unwrap()).max().unwrap();
    assert_eq!((counter_max("reserved"), counter_max("allocated")), (max_reserved, max_allocated));
    let allocations: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(allocations.len(), 7);
    for a in &allocations {
        for b in &allocations {
            if a["args"]["allocation"] != b["args"]["allocation"] && a["tid"] == b["tid"] {
                let (a0, a1) = (a["ts"].as_u64().unwrap(), a["ts"].as_u64().unwrap() + a["dur"].as_u64().unwrap());
                let (b0, b1) = (b["ts"].as_u64().unwrap(), b["ts"].as_u64().unwrap() + b["dur"].as_u64().unwrap());
                assert!(a1 <= b0 || b1 <= a0, "{a} and {b} share a lane");
            }
        }
    }
    assert_eq!(trace["otherData"]["ideal_arena"], json["ideal_arena"]);

    // The CSV: a buffer list whose offsets pass the check, and which `memplan alloc` reads.
    let csv = std::fs::read_to_string(out.join("allocations.csv")).unwrap();
    let list = parse_buffer_list(&csv).unwrap();
    assert_eq!(list.len(), 7);
    let triples: Vec<_> = list.iter().map(|b| (b.lower as usize, (b.upper - 1) as usize, b.size)).collect();
    let offsets: Vec<u64> = list.iter().map(|b| b.offset.unwrap()).collect();
    check_offsets(&triples, &offsets, None).unwrap();
    assert_eq!(list.iter().map(|b| b.offset.unwrap() + b.size).max(), json["ideal_arena"].as_u64());
    let alloc = ok(&["alloc", out.join("allocations.csv").to_str().unwrap()]);
    assert!(alloc.contains(&format!("lower bound: {}", json["lower_bound"])), "{alloc}");

    // Again into the same directory: only those names, replaced; a name that is a directory
    // is refused and nothing is written.
    ok(&["snapshot", HANDMADE, "--emit", "svg", "-o", out_str]);
    assert_eq!(file_names(&out).len(), 5);
    std::fs::remove_file(out.join("trace.json")).unwrap();
    std::fs::create_dir(out.join("trace.json")).unwrap();
    let refused = memplan(&["snapshot", HANDMADE, "--emit", "svg,trace", "-o", out_str]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("is not a regular file"), "{}", text(&refused.stderr));
}

#[test]
fn bad_input_exits_1_with_a_clear_error() {
    let dir = scratch_dir("snapshot", "bad");
    let truncated = dir.join("truncated.pickle");
    let bytes = std::fs::read(HANDMADE).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let truncated = truncated.to_str().unwrap().to_string();
    let cases: [(&[&str], &str); 7] = [
        (&["snapshot", "tests/data/torch_snapshots/python_object.pickle"], "memplan never runs code from a pickle"),
        (&["snapshot", &truncated], "the pickle is truncated: it ends at byte"),
        (&["snapshot", "ir/models/mlp.step"], "is not a pickle opcode"),
        (&["snapshot", "tests/data/torch_snapshots/no-such.pickle"], "cannot read"),
        (&["snapshot", HANDMADE, "--device", "3"], "the snapshot has no events or segments for device 3 (devices with data: 0)"),
        (&["snapshot", HANDMADE, "--align", "3"], "--align 3 is not a power of two"),
        (&["snapshot", HANDMADE, "--format", "json", "--emit", "svg"], "cannot be used with"),
    ];
    for (args, needle) in cases {
        let out = memplan(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: missing {needle:?} in {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
}
