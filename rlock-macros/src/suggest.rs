//! "Did you mean …?" for misspelled option names, placeholder names and values.

/// The candidate closest to `name`, when it is close enough to be a plausible typo.
///
/// Closeness is the optimal-string-alignment distance (an adjacent swap such as `user_di` →
/// `user_id` counts as one edit); a candidate qualifies within a third of its length, and a
/// difference only in letter case always qualifies.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        let distance = if candidate.eq_ignore_ascii_case(name) {
            0
        } else {
            edit_distance(name, candidate)
        };
        let limit = (candidate.chars().count() / 3).max(1);
        if distance <= limit && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// `; did you mean `x`?` or nothing.
pub(crate) fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    match closest(name, candidates) {
        Some(candidate) => format!("; did you mean `{candidate}`?"),
        None => String::new(),
    }
}

/// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
/// adjacent characters each cost one.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Rows of the dynamic-programming table: two rows back, the previous one and the current.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("ttl", "ttl"), 0);
        assert_eq!(edit_distance("tll", "ttl"), 1);
        assert_eq!(edit_distance("user_di", "user_id"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn suggestions() {
        let options = [
            "key", "ttl", "wait", "renew", "max_hold", "on_lost", "fence", "client", "crate",
        ];
        assert_eq!(closest("tll", options), Some("ttl"));
        assert_eq!(closest("TTL", options), Some("ttl"));
        assert_eq!(closest("maxhold", options), Some("max_hold"));
        assert_eq!(closest("wiat", options), Some("wait"));
        assert_eq!(closest("timeout", options), None);
        assert_eq!(
            closest("user_di", ["user_id", "voucher_id"]),
            Some("user_id")
        );
        assert_eq!(closest("x", ["user_id"]), None);
    }
}
