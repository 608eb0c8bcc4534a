//! Did-you-mean suggestions for help texts: the known name closest to a misspelt one, by
//! edit distance, when it is close enough to be a likely typo.
//!
//! A leaf module (it imports nothing) because both the parser (`syntax`: unknown roles and
//! dtypes) and resolution (`resolve`: unknown ops, values, attributes, optimizers) suggest
//! names; living in either would make the two import each other.

/// The candidate closest to `word` by edit distance, if close enough to be a likely typo.
pub(super) fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates.into_iter().map(|c| (edit_distance(word, c), c)).filter(|&(d, _)| d <= limit).min().map(|(_, c)| c)
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and
/// transpositions of adjacent characters each cost 1.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // d[i][j]: distance between a[..i] and b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_and_suggestions() {
        assert_eq!(edit_distance("relu", "relu"), 0);
        assert_eq!(edit_distance("reul", "relu"), 1);
        assert_eq!(edit_distance("matmull", "matmul"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(did_you_mean("prm", ["param", "input", "state"]), None);
        assert_eq!(did_you_mean("inptu", ["param", "input", "state"]), Some("input"));
    }
}
