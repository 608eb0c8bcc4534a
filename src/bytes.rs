//! Byte counts written for people: the exact count, and beside it a binary-prefixed figure
//! (`802816 B (784.00 KiB)`), so a reader sees the size at a glance and can still compare
//! counts exactly.
//!
//! A leaf module (it imports nothing) because reports, the CLI and the CUDA executor's
//! summary all print byte counts; living in `report` would make the executor depend on the
//! reports.

/// `802816 B (784.00 KiB)`: exact bytes, and a binary-prefixed figure beside them.
pub fn format_bytes(bytes: u64) -> String {
    if bytes < 1024 { format!("{bytes} B") } else { format!("{bytes} B ({})", format_short(bytes)) }
}

/// `784.00 KiB`: the binary-prefixed figure alone, for tables with many columns of sizes
/// (`512 B` below a KiB).
pub fn format_short(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::{format_bytes, format_short};

    #[test]
    fn bytes_are_exact_with_a_binary_figure() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1024 B (1.00 KiB)");
        assert_eq!(format_bytes(802816), "802816 B (784.00 KiB)");
        assert_eq!(format_bytes(3 << 30), "3221225472 B (3.00 GiB)");
    }

    #[test]
    fn short_forms_keep_only_the_figure() {
        assert_eq!(format_short(512), "512 B");
        assert_eq!(format_short(802816), "784.00 KiB");
        assert_eq!(format_short(3 << 30), "3.00 GiB");
    }
}
