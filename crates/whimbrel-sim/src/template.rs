//! The event source mapping settings, read from `template.yaml` (the one
//! place they are defined), so the simulation gives up on records exactly
//! when AWS would.

/// A stream event source mapping's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsmSettings {
    /// `BatchSize` (the `StreamBatchSize` parameter's default).
    pub batch_size: usize,
    /// `MaximumRetryAttempts`.
    pub maximum_retry_attempts: u32,
    /// `MaximumRecordAgeInSeconds`.
    pub maximum_record_age_seconds: i64,
}

const TEMPLATE: &str = include_str!("../../../template.yaml");

fn value_after(lines: &[&str], from: usize, key: &str) -> Option<String> {
    lines[from..].iter().find_map(|l| {
        l.trim()
            .strip_prefix(key)
            .map(|v| v.trim().trim_matches('"').to_string())
    })
}

impl EsmSettings {
    /// The settings of the stream mappings in `template.yaml`.
    ///
    /// Panics if the template does not define them (a test would fail).
    pub fn from_template() -> Self {
        Self::parse(TEMPLATE)
    }

    /// Parse a template's text: the stream mapping is the block with
    /// `MaximumRecordAgeInSeconds`; its retries precede it.
    pub fn parse(text: &str) -> Self {
        let lines: Vec<&str> = text.lines().collect();
        let age_at = lines
            .iter()
            .position(|l| l.trim().starts_with("MaximumRecordAgeInSeconds:"))
            .expect("template: a stream mapping with MaximumRecordAgeInSeconds");
        let retries = lines[..age_at]
            .iter()
            .rev()
            .find_map(|l| l.trim().strip_prefix("MaximumRetryAttempts:"))
            .expect("template: MaximumRetryAttempts")
            .trim()
            .parse()
            .expect("a number");
        let age = value_after(&lines, age_at, "MaximumRecordAgeInSeconds:")
            .expect("age")
            .parse()
            .expect("a number");
        let param = lines
            .iter()
            .position(|l| l.trim() == "StreamBatchSize:")
            .expect("template: StreamBatchSize");
        let batch = value_after(&lines, param, "Default:")
            .expect("StreamBatchSize default")
            .parse()
            .expect("a number");
        EsmSettings {
            batch_size: batch,
            maximum_retry_attempts: retries,
            maximum_record_age_seconds: age,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_sets_bounded_retries_and_record_age() {
        let s = EsmSettings::from_template();
        assert_eq!(s.maximum_retry_attempts, 10);
        assert_eq!(s.maximum_record_age_seconds, 3600);
        assert!(s.batch_size >= 1);
    }
}
