//! The `[dynamic_batching]` section of a model's `config.toml`, under Triton's names,
//! checked into an [`accel::batch::Policy`] (what the node's slots batch by). Every
//! value has a bound; a value outside it is refused at load with its key named.
//!
//! ```toml
//! max_batch_size = 64
//! [dynamic_batching]
//! preferred_batch_size = [16, 32]       # dispatched at once when reached
//! max_queue_delay_microseconds = 500    # the oldest call waits at most this for more
//! priority_levels = 2                   # 0: one level
//! default_priority_level = 1
//! [dynamic_batching.default_queue_policy]
//! timeout_action = "REJECT"             # or "DELAY"
//! default_timeout_microseconds = 0      # 0: no timeout
//! allow_timeout_override = false
//! max_queue_size = 0                    # 0: only the slot's queue bound
//! ```

use std::time::Duration;

use accel::batch::{Policy, QueuePolicy, TimeoutAction};
use serde::Deserialize;

/// Most preferred batch sizes.
pub const PREFERRED_MAX: usize = 16;
/// Longest `max_queue_delay_microseconds`: 1 s.
pub const DELAY_US_MAX: u64 = 1_000_000;
/// Most priority levels.
pub const PRIORITY_LEVELS_MAX: u32 = 16;
/// Longest `default_timeout_microseconds`: one hour.
pub const TIMEOUT_US_MAX: u64 = 3_600_000_000;
/// Largest `max_queue_size`.
pub const QUEUE_SIZE_MAX: usize = 1 << 16;
/// Most instances (slots) a model's `[[instance_group]]`s ask for, all together.
pub const INSTANCES_MAX: u32 = 64;

/// One `[[instance_group]]`: `count` instances of the model, each a slot of the CPU
/// device that hosts it (Triton's `KIND_CPU`, the only kind).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InstanceGroup {
    #[serde(default = "one")]
    count: u32,
    #[serde(default)]
    kind: Option<String>,
}

fn one() -> u32 {
    1
}

/// The slots the model's instance groups ask for (1 without any), or why not.
pub(crate) fn instances(groups: &[InstanceGroup]) -> Result<usize, String> {
    if groups.is_empty() {
        return Ok(1);
    }
    let mut total = 0u32;
    for g in groups {
        if let Some(kind) = g.kind.as_deref().filter(|k| *k != "KIND_CPU") {
            return Err(format!(
                "instance_group.kind: `{kind}` is not KIND_CPU (models run on CPU devices)"
            ));
        }
        total = total.saturating_add(g.count);
    }
    if total == 0 || total > INSTANCES_MAX {
        return Err(format!(
            "instance_group.count: {total} instances in all, 1 to {INSTANCES_MAX}"
        ));
    }
    Ok(total as usize)
}

/// `[dynamic_batching]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DynamicBatching {
    #[serde(default)]
    preferred_batch_size: Vec<i64>,
    #[serde(default)]
    max_queue_delay_microseconds: u64,
    #[serde(default)]
    priority_levels: u32,
    #[serde(default)]
    default_priority_level: u32,
    #[serde(default)]
    default_queue_policy: RawQueuePolicy,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueuePolicy {
    #[serde(default)]
    timeout_action: Option<String>,
    #[serde(default)]
    default_timeout_microseconds: u64,
    #[serde(default)]
    allow_timeout_override: bool,
    #[serde(default)]
    max_queue_size: u64,
}

impl DynamicBatching {
    /// The batching of a sequence model's `oldest` strategy: its preferred sizes and
    /// delay, the defaults for the rest.
    pub(crate) fn of_oldest(preferred_batch_size: Vec<i64>, delay_us: u64) -> DynamicBatching {
        DynamicBatching {
            preferred_batch_size,
            max_queue_delay_microseconds: delay_us,
            ..DynamicBatching::default()
        }
    }

    /// Checks the section against its bounds and the model's `max_batch_size`. The
    /// error names the key.
    pub(crate) fn check(self, max_batch_size: u32) -> Result<Policy, String> {
        let key = |k: &str| format!("dynamic_batching.{k}");
        if max_batch_size == 0 {
            return Err("dynamic_batching: a model without a batch axis (max_batch_size = 0) cannot batch calls".to_string());
        }
        let max = max_batch_size as usize;
        let preferred = self.preferred_batch_size;
        if preferred.len() > PREFERRED_MAX {
            return Err(format!(
                "{}: {} sizes, at most {PREFERRED_MAX}",
                key("preferred_batch_size"),
                preferred.len()
            ));
        }
        let mut sizes: Vec<usize> = Vec::with_capacity(preferred.len());
        for p in preferred {
            let size = usize::try_from(p).ok().filter(|&s| (1..=max).contains(&s));
            let size = size.ok_or_else(|| {
                format!(
                    "{}: {p} is not within 1..={max} (max_batch_size)",
                    key("preferred_batch_size")
                )
            })?;
            if sizes.contains(&size) {
                return Err(format!("{}: {size} twice", key("preferred_batch_size")));
            }
            sizes.push(size);
        }
        sizes.sort_unstable();
        if self.max_queue_delay_microseconds > DELAY_US_MAX {
            return Err(format!(
                "{}: {} is more than {DELAY_US_MAX}",
                key("max_queue_delay_microseconds"),
                self.max_queue_delay_microseconds
            ));
        }
        let levels = self.priority_levels;
        if levels > PRIORITY_LEVELS_MAX {
            return Err(format!(
                "{}: {levels} is more than {PRIORITY_LEVELS_MAX}",
                key("priority_levels")
            ));
        }
        let default_level = self.default_priority_level;
        let level_ok = if levels == 0 {
            default_level == 0
        } else {
            (1..=levels).contains(&default_level)
        };
        if !level_ok {
            return Err(format!(
                "{}: {default_level} is not a level of priority_levels = {levels} (1..={levels}; 0 without levels)",
                key("default_priority_level")
            ));
        }
        Ok(Policy {
            max_batch_size: max,
            preferred_batch_sizes: sizes,
            max_queue_delay: Duration::from_micros(self.max_queue_delay_microseconds),
            priority_levels: levels,
            default_priority_level: default_level,
            queue_policy: self.default_queue_policy.check()?,
        })
    }
}

impl RawQueuePolicy {
    fn check(self) -> Result<QueuePolicy, String> {
        let key = |k: &str| format!("dynamic_batching.default_queue_policy.{k}");
        let timeout_action = match self.timeout_action.as_deref() {
            None | Some("REJECT") => TimeoutAction::Reject,
            Some("DELAY") => TimeoutAction::Delay,
            Some(other) => {
                return Err(format!(
                    "{}: `{other}` is not one of REJECT, DELAY",
                    key("timeout_action")
                ))
            }
        };
        if self.default_timeout_microseconds > TIMEOUT_US_MAX {
            return Err(format!(
                "{}: {} is more than {TIMEOUT_US_MAX}",
                key("default_timeout_microseconds"),
                self.default_timeout_microseconds
            ));
        }
        let max_queue_size = usize::try_from(self.max_queue_size)
            .ok()
            .filter(|&n| n <= QUEUE_SIZE_MAX)
            .ok_or_else(|| {
                format!(
                    "{}: {} is more than {QUEUE_SIZE_MAX}",
                    key("max_queue_size"),
                    self.max_queue_size
                )
            })?;
        Ok(QueuePolicy {
            timeout_action,
            default_timeout: Duration::from_micros(self.default_timeout_microseconds),
            allow_timeout_override: self.allow_timeout_override,
            max_queue_size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, max: u32) -> Result<Policy, String> {
        let raw: DynamicBatching =
            toml::from_str(text).map_err(|e| crate::config::toml_error(&e))?;
        raw.check(max)
    }

    #[test]
    fn triton_names_parse_into_the_policy() {
        let p = parse(
            r#"
preferred_batch_size = [32, 16]
max_queue_delay_microseconds = 500
priority_levels = 2
default_priority_level = 1
[default_queue_policy]
timeout_action = "DELAY"
default_timeout_microseconds = 2000
allow_timeout_override = true
max_queue_size = 128
"#,
            64,
        )
        .unwrap();
        assert_eq!(p.preferred_batch_sizes, [16, 32], "sorted");
        assert_eq!(p.max_batch_size, 64);
        assert_eq!(p.max_queue_delay, Duration::from_micros(500));
        assert_eq!((p.priority_levels, p.default_priority_level), (2, 1));
        assert_eq!(p.queue_policy.timeout_action, TimeoutAction::Delay);
        assert_eq!(p.queue_policy.default_timeout, Duration::from_millis(2));
        assert!(p.queue_policy.allow_timeout_override);
        assert_eq!(p.queue_policy.max_queue_size, 128);
        let empty = parse("", 8).unwrap();
        assert_eq!(empty.dispatch_size(), 8);
        assert_eq!(empty.queue_policy.timeout_action, TimeoutAction::Reject);
        assert_eq!(empty.max_queue_delay, Duration::ZERO);
    }

    #[test]
    fn values_out_of_bounds_are_refused_naming_the_key() {
        let err = |text: &str| parse(text, 64).unwrap_err();
        assert!(parse("", 0).unwrap_err().contains("max_batch_size = 0"));
        assert!(err("preferred_batch_size = [65]").contains("preferred_batch_size: 65"));
        assert!(err("preferred_batch_size = [0]").contains("preferred_batch_size: 0"));
        assert!(err("preferred_batch_size = [4, 4]").contains("twice"));
        let many = format!("preferred_batch_size = {:?}", (1..=17).collect::<Vec<_>>());
        assert!(err(&many).contains("at most 16"));
        assert!(
            err("max_queue_delay_microseconds = 1000001").contains("max_queue_delay_microseconds")
        );
        assert!(err("priority_levels = 17").contains("priority_levels: 17"));
        assert!(err("priority_levels = 2\ndefault_priority_level = 3")
            .contains("default_priority_level: 3"));
        assert!(err("default_priority_level = 1").contains("default_priority_level"));
        let policy = |line: &str| err(&format!("[default_queue_policy]\n{line}"));
        assert!(policy("timeout_action = \"DROP\"").contains("timeout_action: `DROP`"));
        assert!(policy("default_timeout_microseconds = 3600000001")
            .contains("default_timeout_microseconds"));
        assert!(policy("max_queue_size = 65537").contains("max_queue_size"));
        assert!(err("colour = 1").contains("unknown field `colour`"));
    }
}
