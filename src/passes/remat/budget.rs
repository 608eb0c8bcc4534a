//! A memory budget for a step: a number of bytes, or a fraction of the arena the step needs
//! without recomputation; and how people write one (`12GiB`, `800MB`, `1048576`, `0.8x`,
//! `0.8`).
//!
//! Sizes: a whole number of bytes (`1048576`, `1048576B`), or a number (decimals allowed)
//! with a unit: `KB`, `MB`, `GB`, `TB` (powers of 1000) or `KiB`, `MiB`, `GiB`, `TiB`
//! (powers of 1024); a fractional byte count is rounded down. Units are case-sensitive
//! (`Gb` would read as gigabits to many people; it is refused with a hint). A fraction is a
//! positive finite number followed by `x` (`0.8x`), or a number with a decimal point and no
//! unit (`0.8`: bytes are whole, so it can only be a fraction; `memplan remat --budget`
//! writes fractions so). A whole number without a unit stays a byte count (`1` is one
//! byte; the whole arena is `1x` or `1.0`). Arithmetic is exact (integers in `u128`), so
//! `0.1GB` is 100000000 bytes, and a size past 2^64 - 1 bytes is refused, not wrapped.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::ir::graph::{Graph, Role, ValueDef};
use crate::ir::ops::OpClass;
use crate::plan::align_up;

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

/// What every plan of a step holds at once, whatever it recomputes: the params and the
/// optimizer state (their buffers hold them, then their new values, for the whole step),
/// and, when an optimizer update runs, the gradient it reads. Recomputation never drops
/// any of these (it recomputes forward values only), so no budget below [`Floor::bytes`]
/// can be met. Sizes are rounded up to the plan's alignment, as in the arena.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Floor {
    pub params: u64,
    pub state: u64,
    /// The largest gradient an optimizer op reads (`%name` and its bytes); `None` for a
    /// step without optimizer ops.
    pub gradient: Option<(String, u64)>,
}

impl Floor {
    /// The floor of `graph`'s arena with offsets aligned to `alignment` (`None` on overflow).
    pub fn of(graph: &Graph, alignment: u64) -> Option<Floor> {
        let aligned = |v| graph.values[v].ty.bytes().and_then(|b| align_up(b, alignment));
        let mut floor = Floor { params: 0, state: 0, gradient: None };
        for &arg in &graph.args {
            let total = match graph.values[arg].def {
                ValueDef::Arg(Role::Param) => &mut floor.params,
                ValueDef::Arg(Role::State) => &mut floor.state,
                _ => continue,
            };
            *total = total.checked_add(aligned(arg)?)?;
        }
        for op in graph.ops.iter().filter(|op| op.kind.def().class == OpClass::Optimizer) {
            let Some(k) = op.kind.def().inputs.iter().position(|&name| name == "g") else { continue };
            let g = op.inputs[k];
            let bytes = aligned(g)?;
            if floor.gradient.as_ref().is_none_or(|(_, most)| bytes > *most) {
                floor.gradient = Some((graph.value_name(g), bytes));
            }
        }
        Some(floor)
    }

    /// The bytes every plan holds at once.
    pub fn bytes(&self) -> u64 {
        let gradient = self.gradient.as_ref().map_or(0, |(_, bytes)| *bytes);
        self.params.saturating_add(self.state).saturating_add(gradient)
    }

    /// What the floor is made of, for people: `the params (P bytes), the optimizer state
    /// (S bytes) and %g (G bytes), the largest gradient an update reads, ...`.
    pub fn describe(&self) -> String {
        match &self.gradient {
            Some((name, bytes)) => format!(
                "the params ({} bytes), the optimizer state ({} bytes) and {name} ({bytes} bytes), the largest gradient an \
                 update reads, are live together when that update runs, whatever is recomputed",
                self.params, self.state
            ),
            None => format!(
                "the params ({} bytes) and the optimizer state ({} bytes) are live for the whole step, whatever is recomputed",
                self.params, self.state
            ),
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
    /// A byte count with a fractional part (`12.5B`; `12.5` without a unit is a fraction).
    #[error("`{0}`: a number of bytes must be whole")]
    FractionalBytes(String),
    /// More than 2^64 - 1 bytes.
    #[error("`{0}` is more than 2^64 - 1 bytes")]
    TooLarge(String),
    /// A fraction (`...x`, or a number with a decimal point and no unit) that is zero,
    /// negative, or not finite.
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
            _ => "write a size (12GiB, 800MB, 1048576) or a fraction of the arena without recomputation (0.8x or 0.8)",
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
            let number = number.trim();
            number.parse::<f64>().map_err(|_| BudgetError::NotANumber(text.to_string()))?;
            return fraction(number);
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
            if unit.is_empty() {
                return fraction(number);
            }
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

/// The fraction `number` (a number's text without its `x`).
fn fraction(number: &str) -> Result<Budget, BudgetError> {
    match number.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(Budget::Fraction(f)),
        _ => Err(BudgetError::BadFraction(number.to_string())),
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
        // A number with a decimal point and no unit cannot be bytes: it is a fraction.
        assert_eq!("0.8".parse::<Budget>(), Ok(Budget::Fraction(0.8)));
        assert_eq!(".5".parse::<Budget>(), Ok(Budget::Fraction(0.5)));
        assert_eq!("1.0".parse::<Budget>(), Ok(Budget::Fraction(1.0)));
        assert_eq!("1".parse::<Budget>(), Ok(Budget::Bytes(1)), "a whole number is bytes");
        assert_eq!("0.0".parse::<Budget>(), Err(BudgetError::BadFraction("0.0".into())));
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
        assert_eq!(err("12.5B"), BudgetError::FractionalBytes("12.5B".into()));
        assert_eq!(err("0x"), BudgetError::BadFraction("0".into()));
        assert_eq!(err("-1x"), BudgetError::BadFraction("-1".into()));
        assert_eq!(err("infx"), BudgetError::BadFraction("inf".into()));
        assert_eq!(err("abcx"), BudgetError::NotANumber("abcx".into()));
        assert_eq!(err("16777216TiB"), BudgetError::TooLarge("16777216TiB".into()));
        assert_eq!(err("99999999999999999999999999999999999999999"), BudgetError::TooLarge("99999999999999999999999999999999999999999".into()));
        assert_eq!(Budget::Fraction(f64::NAN).bytes(10), Err(BudgetError::BadFraction("NaN".into())));
    }
}
