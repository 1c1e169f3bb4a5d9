//! A server's command counters, as `INFO all` reports them.

use std::collections::BTreeMap;

/// Command counters of one server, as reported by `INFO all`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Calls per command, keyed by Redis' lower-case name; subcommands appear as
    /// `container|sub` (`"config|resetstat"`, `"client|setinfo"`, `"script|load"`).
    pub by_command: BTreeMap<String, u64>,
    /// `total_commands_processed`.
    pub total: u64,
}

impl Counts {
    /// Calls of one command (`"evalsha"`, `"set"`, ...), 0 when it was never called.
    pub fn calls(&self, command: &str) -> u64 {
        self.by_command.get(command).copied().unwrap_or(0)
    }

    pub(crate) fn add(&mut self, command: &str, n: u64) {
        *self.by_command.entry(command.to_owned()).or_insert(0) += n;
        self.total += n;
    }

    /// `self - earlier`, dropping commands whose count did not change.
    ///
    /// A container counted whole (`config`, as servers before Redis 7.0 count it) is
    /// subtracted its subcommands' counts too (`config|resetstat`, as the harness records
    /// its own calls).
    #[must_use]
    pub fn minus(&self, earlier: &Counts) -> Counts {
        let earlier_calls = |name: &str| -> u64 {
            let subcommands: u64 = if name.contains('|') {
                0
            } else {
                earlier
                    .by_command
                    .iter()
                    .filter(|(sub, _)| sub.strip_prefix(name).is_some_and(|s| s.starts_with('|')))
                    .map(|(_, n)| n)
                    .sum()
            };
            earlier.calls(name) + subcommands
        };
        let by_command = self
            .by_command
            .iter()
            .filter_map(|(name, &n)| {
                let d = n.saturating_sub(earlier_calls(name));
                (d > 0).then(|| (name.clone(), d))
            })
            .collect();
        Counts {
            by_command,
            total: self.total.saturating_sub(earlier.total),
        }
    }
}

pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// Parses `total_commands_processed` and `cmdstat_<name>:calls=<n>,...` lines.
pub(crate) fn parse_counts(info: &str) -> Counts {
    let mut counts = Counts::default();
    for line in info.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("total_commands_processed:") {
            counts.total = v.parse().unwrap_or(0);
        } else if let Some(rest) = line.strip_prefix("cmdstat_") {
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            let calls = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            if calls > 0 {
                counts.by_command.insert(name.to_ascii_lowercase(), calls);
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_info() {
        let info = "# Stats\r\ntotal_commands_processed:7\r\n\r\n# Commandstats\r\n\
            cmdstat_set:calls=2,usec=5,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_config|resetstat:calls=1,usec=58,usec_per_call=58.00,rejected_calls=0,failed_calls=0\r\n";
        let c = parse_counts(info);
        assert_eq!(c.total, 7);
        assert_eq!(c.calls("set"), 2);
        assert_eq!(c.calls("config|resetstat"), 1);
        assert_eq!(c.calls("get"), 0);
    }

    #[test]
    fn a_container_counted_whole_is_subtracted_its_subcommands() {
        let mut before_6_2 = Counts::default();
        before_6_2.add("config", 3);
        before_6_2.add("evalsha", 2);
        let mut own = Counts::default();
        own.add("config|resetstat", 1);
        let left = before_6_2.minus(&own);
        assert_eq!(left.calls("config"), 2);
        assert_eq!(left.calls("evalsha"), 2);
        assert_eq!(left.total, 4);
    }
}
