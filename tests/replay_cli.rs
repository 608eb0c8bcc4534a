//! `memplan replay`: an allocation trace through the model of PyTorch's caching allocator,
//! figures computed by hand for a small trace, located errors for bad ones.

#[path = "support/bin.rs"]
mod bin;
use bin::*;

const MIB: u64 = 1 << 20;
const TRACE: &str = "tests/data/traces/fragmented.trace";

#[test]
fn replay_says_what_pytorch_allocates_and_reserves() {
    let out = memplan(&["replay", TRACE, "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    // 30 + 40 MiB live at once; three segments: 30, 30 and 40 MiB (each at least 10 MiB,
    // so its own size rounded to 2 MiB); the 1000-byte sum takes a 2 MiB small segment.
    assert_eq!(json["max_memory_allocated"], 70 * MIB + 1024);
    assert_eq!(json["max_memory_reserved"], 102 * MIB);
    assert_eq!(json["max_requested"], 70 * MIB + 1000);
    // memplan places the same blocks with nothing wasted: the most live at once.
    assert_eq!(json["ideal_arena"], 70 * MIB + 1024);
    assert_eq!(json["lower_bound"], json["ideal_arena"]);
    let live: Vec<&str> = json["live_at_peak"].as_array().unwrap().iter().map(|b| b["label"].as_str().unwrap()).collect();
    assert_eq!(live, ["aten.mm forward h.1", "aten.mm forward h.0", "aten.sum forward (model)"]);
    // One growing range instead: 40 MiB mapped for the first two, one 20 MiB page more.
    let out = memplan(&["replay", TRACE, "--format", "json", "--expandable-segments"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(json["max_memory_reserved"], 80 * MIB + 2 * MIB);
}

#[test]
fn replay_text_names_pytorchs_figures() {
    let out = memplan(&["replay", TRACE]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    insta::assert_snapshot!(text(&out.stdout));
}

#[test]
fn bad_traces_are_located_errors() {
    let dir = std::env::temp_dir().join(format!("memplan-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, body, needle) in [
        ("keyword.trace", "alloc 1 10\nmalloc 2 3\n", ":2:1"),
        ("number.trace", "alloc 1 ten\n", "a size in bytes"),
        ("unknown_free.trace", "alloc 1 10\nfree 2\n", ":2: event 1: storage 2 is freed but is not live"),
        ("twice.trace", "alloc 1 10\nalloc 1 10\n", ":2: event 1: storage 1 is allocated again while still live"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        let out = memplan(&["replay", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(needle), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
