//! Durations written as text (`500ms`, `10s`, `1m30s`, `2h`), as the environment gives them.
//!
//! rlock has one grammar for them, the one `#[distributed_lock]` checks `ttl`, `wait` and
//! `max_hold` with: a whole number and a unit (`ms`, `s`, `m`, `h`), units combined from the
//! largest to the smallest and each used at most once, without spaces, signs or fractions.
//! Its parser lives in the macro crate; `__duration_grammar!` expands to that parser's own
//! source, so this crate compiles the very same code instead of a copy that could drift.

use std::time::Duration;

/// The attribute's parser (`parse`, `Millis`), expanded from its source file.
mod grammar {
    rlock_macros::__duration_grammar!();
}

/// `text` as a duration, or a sentence saying what is wrong and how to write it instead.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    grammar::parse(text).map(|millis| Duration::from_millis(millis.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attributes_grammar() {
        assert_eq!(parse("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h2m3s4ms"), Ok(Duration::from_millis(3_723_004)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        for (text, why) in [
            ("30s1m", "out of order"),
            ("1s1s", "twice"),
            ("10", "no unit"),
            ("1.5s", "fraction"),
            ("10 s", "without them"),
            ("2d", "`48h`"),
            ("99999999999999999999h", "too large"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
