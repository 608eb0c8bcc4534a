//! Did-you-mean suggestions for help texts: the known name closest to a misspelt one, by
//! edit distance, when it is close enough to be a likely typo.
//!
//! A leaf module (it imports nothing) because both the parser (`syntax`: unknown roles and
//! dtypes) and resolution (`resolve`: unknown ops, values, attributes, optimizers) suggest
//! names; living in either would make the two import each other.

/// Names longer than this many characters get no suggestion and are never suggested: the
/// distance takes time and memory quadratic in the names' lengths, so this bounds it (a
/// hostile file's 20,000-character names took 3.2 GB).
const LONGEST: usize = 64;

/// The candidate closest to `word` by edit distance, if close enough to be a likely typo.
pub(super) fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let length = word.chars().take(LONGEST + 1).count();
    if length > LONGEST {
        return None;
    }
    let limit = (length / 3).max(1);
    // A candidate whose length differs by more than the limit is farther than the limit.
    let near = |c: &&str| c.chars().take(length + limit + 1).count().abs_diff(length) <= limit;
    candidates.into_iter().filter(near).map(|c| (edit_distance(word, c), c)).filter(|&(d, _)| d <= limit).min().map(|(_, c)| c)
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

    /// Long names are neither suggested for nor suggested (the distance was quadratic in
    /// memory: two 20,000-character names took 3.2 GB); names near the limit still are.
    #[test]
    fn long_names_are_bounded() {
        let long = "a".repeat(20_000);
        let other = format!("{}b", "a".repeat(19_999));
        assert_eq!(did_you_mean(&long, [other.as_str()]), None);
        assert_eq!(did_you_mean("aaab", [long.as_str(), "aaaa"]), Some("aaaa"));
        let at_limit = "x".repeat(LONGEST);
        let typo = format!("{}y", "x".repeat(LONGEST - 1));
        assert_eq!(did_you_mean(&typo, [at_limit.as_str()]), Some(at_limit.as_str()));
        assert_eq!(did_you_mean(&format!("{typo}x"), [format!("{at_limit}x").as_str()]), None);
    }
}
