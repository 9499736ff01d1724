//! The node's log: which filters it accepts.
//!
//! Logs are `tracing` events on stderr. The level comes from `log_level` (config) or
//! `--log-level`: a level name, or a tracing filter of `TARGET=LEVEL` directives. A
//! typo there must not pass silently: to `tracing` a bare word such as `verbose` is a
//! valid filter (every level, but only for a target named `verbose`), so a node
//! started with it logged nothing at all. [`check_filter`] accepts only directives
//! that name a level.

use tracing_subscriber::filter::LevelFilter;

/// Level names `log_level` accepts on its own, in the order of the message that lists
/// them.
const LEVELS: &str = "off, error, warn, info, debug, trace";

/// Checks a `log_level` value: a level name, or comma-separated directives that each
/// end in `=LEVEL` (`info,netaccel_node=debug`) and that `tracing` can parse.
pub fn check_filter(filter: &str) -> Result<(), String> {
    let refuse = |why: &str| {
        format!(
            "log level `{filter}` is not valid ({why}): use one of {LEVELS}, or a tracing \
             filter of TARGET=LEVEL directives such as `info,netaccel_node=debug`"
        )
    };
    let directives: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if directives.is_empty() {
        return Err(refuse("it is empty"));
    }
    for directive in directives {
        let level = match directive.rsplit_once('=') {
            Some((target, _)) if target.trim().is_empty() => {
                return Err(refuse(&format!("`{directive}` names no target")))
            }
            Some((_, level)) => level.trim(),
            None => directive,
        };
        // `LevelFilter` also reads "" as `error`; an empty level is a mistake here.
        if level.is_empty() || level.parse::<LevelFilter>().is_err() {
            return Err(refuse(&format!("`{directive}` names no level")));
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(filter)
        .map(drop)
        .map_err(|e| refuse(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_filters_pass() {
        for ok in [
            "info",
            "DEBUG",
            "off",
            "warn,netaccel_node=debug",
            "netaccel_node=trace",
            "netaccel_node::http=debug, ocl_remote=info",
            "netaccel_node[call{slot=1}]=debug",
        ] {
            check_filter(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn garbage_is_refused_with_the_valid_levels_listed() {
        for bad in [
            "verbose",
            "loud",
            "",
            " , ",
            "info,loud",
            "netaccel_node=",
            "netaccel_node=loud",
            "=debug",
        ] {
            let err = check_filter(bad).expect_err(bad);
            assert!(
                err.contains("off, error, warn, info, debug, trace"),
                "{bad}: {err}"
            );
        }
    }
}
