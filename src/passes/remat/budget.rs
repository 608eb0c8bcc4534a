//! A memory budget for a step: a number of bytes, or a fraction of the arena the step needs
//! without recomputation; and how people write one (`12GiB`, `800MB`, `1048576`, `0.8x`).
//!
//! Sizes: a whole number of bytes (`1048576`, `1048576B`), or a number (decimals allowed)
//! with a unit: `KB`, `MB`, `GB`, `TB` (powers of 1000) or `KiB`, `MiB`, `GiB`, `TiB`
//! (powers of 1024); a fractional byte count is rounded down. Units are case-sensitive
//! (`Gb` would read as gigabits to many people; it is refused with a hint). A fraction is a
//! positive finite number followed by `x`. Arithmetic is exact (integers in `u128`), so
//! `0.1GB` is 100000000 bytes, and a size past 2^64 - 1 bytes is refused, not wrapped.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// How much memory the step may use (its arena, after in-place reuse and offsets).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Budget {
    /// At most this many bytes.
    Bytes(u64),
    /// At most this fraction of the arena the same step needs without recomputation
    /// (`0.8`: 80%); above 1 nothing needs recomputing.
    Fraction(f64),
}

impl Budget {
    /// The budget in bytes for a step whose arena without recomputation is `arena_without`
    /// (a fraction is rounded down); `Err` for a fraction that is not positive and finite.
    pub fn bytes(self, arena_without: u64) -> Result<u64, BudgetError> {
        match self {
            Budget::Bytes(bytes) => Ok(bytes),
            Budget::Fraction(f) if f.is_finite() && f > 0.0 => Ok((f * arena_without as f64).floor() as u64),
            Budget::Fraction(f) => Err(BudgetError::BadFraction(f.to_string())),
        }
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Budget::Bytes(bytes) => write!(f, "{bytes}"),
            Budget::Fraction(x) => write!(f, "{x}x"),
        }
    }
}

/// Why a budget is not understood.
#[derive(Clone, PartialEq, Eq, Debug, Error)]
pub enum BudgetError {
    /// Nothing was written.
    #[error("the budget is empty")]
    Empty,
    /// The number part is not a number (`12,5GB`, `GiB`).
    #[error("`{0}` does not start with a number")]
    NotANumber(String),
    /// The unit after the number is not one memplan knows.
    #[error("`{text}`: unknown unit `{unit}` (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")]
    UnknownUnit { text: String, unit: String },
    /// A byte count with a fractional part and no unit to scale it (`12.5`, `12.5B`).
    #[error("`{0}`: a number of bytes must be whole")]
    FractionalBytes(String),
    /// More than 2^64 - 1 bytes.
    #[error("`{0}` is more than 2^64 - 1 bytes")]
    TooLarge(String),
    /// A fraction (`...x`) that is zero, negative, or not finite.
    #[error("`{0}x`: a fraction of the arena must be a positive finite number")]
    BadFraction(String),
}

impl BudgetError {
    /// What to write instead.
    pub fn hint(&self) -> &'static str {
        match self {
            BudgetError::UnknownUnit { .. } => {
                "units are case-sensitive: 12GiB (2^30 bytes each), 800MB (10^6 bytes each), or plain bytes: 1048576"
            }
            _ => "write a size (12GiB, 800MB, 1048576) or a fraction of the arena without recomputation (0.8x)",
        }
    }
}

/// `(unit, bytes per unit)`.
const UNITS: [(&str, u128); 9] = [
    ("B", 1),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
];

impl FromStr for Budget {
    type Err = BudgetError;

    fn from_str(text: &str) -> Result<Budget, BudgetError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(BudgetError::Empty);
        }
        if let Some(number) = text.strip_suffix('x') {
            let f: f64 = number.trim().parse().map_err(|_| BudgetError::NotANumber(text.to_string()))?;
            return if f.is_finite() && f > 0.0 { Ok(Budget::Fraction(f)) } else { Err(BudgetError::BadFraction(number.to_string())) };
        }
        let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
        let (number, unit) = (&text[..split], text[split..].trim_start());
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && frac.is_empty() || frac.contains('.') {
            return Err(BudgetError::NotANumber(text.to_string()));
        }
        let scale = match unit {
            "" => 1,
            unit => match UNITS.iter().find(|(name, _)| *name == unit) {
                Some(&(_, scale)) => scale,
                None => return Err(BudgetError::UnknownUnit { text: text.to_string(), unit: unit.to_string() }),
            },
        };
        if scale == 1 && !frac.is_empty() {
            return Err(BudgetError::FractionalBytes(text.to_string()));
        }
        let too_large = || BudgetError::TooLarge(text.to_string());
        // number = digits / 10^frac.len(); bytes = floor(digits * scale / 10^frac.len()).
        let mut digits: u128 = 0;
        for c in whole.chars().chain(frac.chars()) {
            let d = u128::from(c.to_digit(10).expect("only digits and one dot were kept"));
            digits = digits.checked_mul(10).and_then(|x| x.checked_add(d)).ok_or_else(too_large)?;
        }
        let divisor = 10u128.checked_pow(frac.len() as u32).ok_or_else(too_large)?;
        let bytes = digits.checked_mul(scale).ok_or_else(too_large)? / divisor;
        u64::try_from(bytes).map(Budget::Bytes).map_err(|_| too_large())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(text: &str) -> u64 {
        match text.parse::<Budget>() {
            Ok(Budget::Bytes(b)) => b,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn sizes_in_every_unit() {
        assert_eq!(bytes("1048576"), 1 << 20);
        assert_eq!(bytes("1048576B"), 1 << 20);
        assert_eq!(bytes("12GiB"), 12 << 30);
        assert_eq!(bytes("12 GiB"), 12 << 30);
        assert_eq!(bytes("800MB"), 800_000_000);
        assert_eq!(bytes("1.5KiB"), 1536);
        assert_eq!(bytes("0.1GB"), 100_000_000);
        assert_eq!(bytes("1.0000001KB"), 1000, "fractional bytes round down");
        assert_eq!(bytes("2TiB"), 2 << 40);
    }

    #[test]
    fn fractions() {
        assert_eq!("0.8x".parse::<Budget>(), Ok(Budget::Fraction(0.8)));
        assert_eq!("1x".parse::<Budget>(), Ok(Budget::Fraction(1.0)));
        assert_eq!(Budget::Fraction(0.5).bytes(1001), Ok(500));
        assert_eq!(Budget::Bytes(7).bytes(1001), Ok(7));
    }

    #[test]
    fn bad_spellings_say_what_is_wrong() {
        let err = |text: &str| text.parse::<Budget>().unwrap_err();
        assert_eq!(err(""), BudgetError::Empty);
        assert_eq!(err("12Gb"), BudgetError::UnknownUnit { text: "12Gb".into(), unit: "Gb".into() });
        assert!(err("12Gb").hint().contains("case-sensitive"));
        assert_eq!(err("GiB"), BudgetError::NotANumber("GiB".into()));
        assert_eq!(err("1.2.3MB"), BudgetError::NotANumber("1.2.3MB".into()));
        assert_eq!(err("12.5"), BudgetError::FractionalBytes("12.5".into()));
        assert_eq!(err("0x"), BudgetError::BadFraction("0".into()));
        assert_eq!(err("-1x"), BudgetError::BadFraction("-1".into()));
        assert_eq!(err("infx"), BudgetError::BadFraction("inf".into()));
        assert_eq!(err("abcx"), BudgetError::NotANumber("abcx".into()));
        assert_eq!(err("16777216TiB"), BudgetError::TooLarge("16777216TiB".into()));
        assert_eq!(err("99999999999999999999999999999999999999999"), BudgetError::TooLarge("99999999999999999999999999999999999999999".into()));
        assert_eq!(Budget::Fraction(f64::NAN).bytes(10), Err(BudgetError::BadFraction("NaN".into())));
    }
}
