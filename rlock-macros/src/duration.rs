//! Durations written as text (`500ms`, `10s`, `1m30s`, `2h`): the one grammar of rlock, which
//! the attribute parses its options with while it expands and `rlock-runtime` its environment
//! variables with at run time.
//!
//! The grammar is one or more `<number><unit>` parts, units `h`, `m`, `s` and `ms`, each used at
//! most once and from the largest to the smallest, with no spaces or signs. Keeping it this
//! strict means a duration reads the same way everywhere and `1m30s` can never be mistaken for
//! `1ms30`.
//!
//! The runtime compiles this file's items too (through `__duration_grammar!`, see `grammar`),
//! so they use nothing but `core` and `std`, and its tests stay in a `#[cfg(test)] mod`.

/// A duration in whole milliseconds, the resolution Redis works with (`PX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Millis(pub(crate) u64);

impl Millis {
    pub(crate) const SECOND: Millis = Millis(1_000);
    pub(crate) const MINUTE: Millis = Millis(60 * 1_000);
    pub(crate) const HOUR: Millis = Millis(60 * 60 * 1_000);
    pub(crate) const DAY: Millis = Millis(24 * 60 * 60 * 1_000);
}

impl std::fmt::Display for Millis {
    /// Writes the duration in the same notation the parser reads (`1m30s`, `250ms`, `0s`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 == 0 {
            return f.write_str("0s");
        }
        let mut rest = self.0;
        for (unit, size) in [
            ("h", Self::HOUR.0),
            ("m", Self::MINUTE.0),
            ("s", Self::SECOND.0),
            ("ms", 1),
        ] {
            if rest >= size {
                write!(f, "{}{unit}", rest / size)?;
                rest %= size;
            }
        }
        Ok(())
    }
}

/// The units in the order they must appear, with their size in milliseconds.
const UNITS: [(&str, u64); 4] = [
    ("h", Millis::HOUR.0),
    ("m", Millis::MINUTE.0),
    ("s", Millis::SECOND.0),
    ("ms", 1),
];

/// Parses `text`; the error is a complete sentence that says how to write it instead.
pub(crate) fn parse(text: &str) -> Result<Millis, String> {
    const FORMAT: &str = "write a number followed by a unit (`ms`, `s`, `m` or `h`), \
                          for example `500ms`, `10s`, `1m30s` or `2h`";
    if text.is_empty() {
        return Err(format!("the duration is empty; {FORMAT}"));
    }
    if text.chars().any(char::is_whitespace) {
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        return Err(match parse(&compact) {
            Ok(_) => format!(
                "the duration `{text}` contains spaces; write it without them, as `{compact}`"
            ),
            // Report what else is wrong, quoting the duration as the user wrote it.
            Err(err) => format!(
                "{}; durations are written without spaces",
                err.replace(&format!("`{compact}`"), &format!("`{text}`"))
            ),
        });
    }

    let mut total: u64 = 0;
    // Index into UNITS of the last unit used; the next one must come strictly later.
    let mut last_unit: Option<usize> = None;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            let found = rest.chars().next().unwrap_or(' ');
            return Err(match found {
                '-' => format!("the duration `{text}` is negative; durations cannot be negative"),
                '+' => format!("the duration `{text}` has a sign; write it without `+`"),
                '.' | ',' => format!(
                    "the duration `{text}` has a fraction; write it with smaller units instead, \
                     as in `1s500ms` for one and a half seconds"
                ),
                _ => format!("the duration `{text}` is not understood; {FORMAT}"),
            });
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(match after.chars().next() {
                Some('.') | Some(',') => format!(
                    "the duration `{text}` has a fraction; write it with smaller units instead, \
                     as in `1s500ms` for one and a half seconds"
                ),
                Some(_) => format!("the duration `{text}` is not understood; {FORMAT}"),
                None => format!(
                    "the duration `{text}` has no unit after `{number}`; \
                     write `{number}s` for seconds or `{number}ms` for milliseconds"
                ),
            });
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(unknown_unit(text, number, unit));
        };
        if let Some(last) = last_unit {
            if index == last {
                return Err(format!(
                    "the duration `{text}` uses the unit `{unit}` twice; \
                     use each unit at most once, as in `1m30s`"
                ));
            }
            if index < last {
                return Err(format!(
                    "the units in the duration `{text}` are out of order; \
                     write them from the largest to the smallest, as in `1m30s` or `2s500ms`"
                ));
            }
        }
        last_unit = Some(index);

        let too_large = || format!("the duration `{text}` is far too large");
        let value: u64 = number.parse().map_err(|_| too_large())?;
        let part = value.checked_mul(UNITS[index].1).ok_or_else(too_large)?;
        total = total.checked_add(part).ok_or_else(too_large)?;
        rest = after;
    }
    Ok(Millis(total))
}

fn unknown_unit(text: &str, number: &str, unit: &str) -> String {
    let hint = match unit {
        "d" | "day" | "days" => match number.parse::<u64>().ok().and_then(|n| n.checked_mul(24)) {
            Some(hours) => format!("; write `{hours}h` for {number} day(s)"),
            None => String::new(),
        },
        "sec" | "secs" | "second" | "seconds" | "S" => format!("; write `{number}s`"),
        "min" | "mins" | "minute" | "minutes" | "M" => format!("; write `{number}m`"),
        "hr" | "hrs" | "hour" | "hours" | "H" => format!("; write `{number}h`"),
        "msec" | "millis" | "MS" | "Ms" | "mS" => format!("; write `{number}ms`"),
        "us" | "ns" | "µs" => "; the smallest unit is `ms`, the resolution of Redis".to_string(),
        _ => String::new(),
    };
    format!("unknown unit `{unit}` in the duration `{text}`; expected one of: ms, s, m, h{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse("500ms"), Ok(Millis(500)));
        assert_eq!(parse("10s"), Ok(Millis(10_000)));
        assert_eq!(parse("1m30s"), Ok(Millis(90_000)));
        assert_eq!(parse("2h"), Ok(Millis(7_200_000)));
        assert_eq!(parse("1h2m3s4ms"), Ok(Millis(3_723_004)));
        assert_eq!(parse("0s"), Ok(Millis(0)));
        assert_eq!(parse("90m"), Ok(Millis(5_400_000)));
    }

    #[test]
    fn rejects_everything_else_with_a_fix() {
        for (text, needle) in [
            ("", "empty"),
            ("10", "no unit"),
            ("10 s", "as `10s`"),
            ("10 seconds", "write `10s`"),
            ("1.5s", "fraction"),
            ("1,5s", "fraction"),
            ("-1s", "negative"),
            ("+1s", "sign"),
            ("2d", "`48h`"),
            ("5sec", "`5s`"),
            ("10us", "smallest unit"),
            ("30s1m", "out of order"),
            ("1s1s", "twice"),
            ("1ms1s", "out of order"),
            ("s", "not understood"),
            ("99999999999999999999s", "too large"),
            ("18446744073709551615h", "too large"),
            ("1s5", "no unit after `5`"),
            ("10s!", "not understood"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for ms in [
            0, 1, 999, 1_000, 1_500, 60_000, 90_000, 3_723_004, 86_400_000,
        ] {
            assert_eq!(parse(&Millis(ms).to_string()), Ok(Millis(ms)));
        }
        assert_eq!(Millis(90_000).to_string(), "1m30s");
    }
}
