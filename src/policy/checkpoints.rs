//! `[checkpoints]`: how much of what calls changed cordon keeps to take it back (issue 35):
//! bytes, count and age of the kept checkpoints, the largest file recorded, and which
//! git-ignored paths are recorded anyway.
//!
//! Owns the raw table as written, its validation (one error per field, saying what to write)
//! and the validated [`CheckpointsPolicy`]. It does not record anything (`crate::checkpoint`).

use serde::{Deserialize, Serialize};

/// `[checkpoints]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCheckpoints {
    pub enabled: Option<bool>,
    pub max_bytes: Option<u64>,
    pub max_count: Option<u64>,
    pub max_age_secs: Option<u64>,
    pub max_file_bytes: Option<u64>,
    pub include: Option<Vec<String>>,
}

impl RawCheckpoints {
    pub fn overlay(self, base: Self) -> Self {
        Self {
            enabled: self.enabled.or(base.enabled),
            max_bytes: self.max_bytes.or(base.max_bytes),
            max_count: self.max_count.or(base.max_count),
            max_age_secs: self.max_age_secs.or(base.max_age_secs),
            max_file_bytes: self.max_file_bytes.or(base.max_file_bytes),
            include: self.include.or(base.include),
        }
    }
}

/// `[checkpoints]`, validated.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointsPolicy {
    /// Record checkpoints at all (false: every result's `checkpoint` is null).
    pub enabled: bool,
    /// Bytes of file contents only checkpoints keep (not the copy of the current tree).
    pub max_bytes: u64,
    /// Checkpoints kept; the oldest go first.
    pub max_count: u64,
    /// A checkpoint older than this is dropped.
    pub max_age_secs: u64,
    /// A file larger than this is recorded by its size only (and listed as not covered).
    pub max_file_bytes: u64,
    /// Git-ignored paths recorded anyway (gitignore syntax, rooted at the workspace).
    pub include: Vec<String>,
}

/// Defaults, as `policies/default.toml` writes them.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 1024 * 1024 * 1024;
pub(crate) const DEFAULT_MAX_COUNT: u64 = 200;
pub(crate) const DEFAULT_MAX_AGE_SECS: u64 = 7 * 24 * 3600;
pub(crate) const DEFAULT_MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Largest `max_file_bytes` (1 GiB): every file up to it is copied whole into cordon's state.
const MAX_FILE_BYTES: u64 = 1024 * 1024 * 1024;

/// Why `[checkpoints]` is not valid: the field and what to write instead.
#[derive(Debug, PartialEq, Eq)]
pub struct CheckpointsError {
    pub field: &'static str,
    pub message: String,
}

impl CheckpointsPolicy {
    /// Validates `raw`; a field left out takes its default.
    pub fn validate(raw: RawCheckpoints) -> Result<Self, CheckpointsError> {
        let err = |field: &'static str, message: String| CheckpointsError { field, message };
        let positive = |field: &'static str, v: Option<u64>, default: u64| match v {
            Some(0) => Err(err(
                field,
                "must be greater than 0 (to record nothing, write `enabled = false`)".into(),
            )),
            v => Ok(v.unwrap_or(default)),
        };
        let max_bytes = positive("checkpoints.max_bytes", raw.max_bytes, DEFAULT_MAX_BYTES)?;
        let max_count = positive("checkpoints.max_count", raw.max_count, DEFAULT_MAX_COUNT)?;
        let max_age_secs = positive(
            "checkpoints.max_age_secs",
            raw.max_age_secs,
            DEFAULT_MAX_AGE_SECS,
        )?;
        let max_file_bytes = positive(
            "checkpoints.max_file_bytes",
            raw.max_file_bytes,
            DEFAULT_MAX_FILE_BYTES,
        )?;
        if max_file_bytes > MAX_FILE_BYTES {
            return Err(err(
                "checkpoints.max_file_bytes",
                format!(
                    "{max_file_bytes} is above {MAX_FILE_BYTES}: every file up to this size is copied \
                     whole into cordon's state"
                ),
            ));
        }
        let include = raw.include.unwrap_or_default();
        for pattern in &include {
            crate::checkpoint::coverage::Coverage::check_pattern(pattern).map_err(|why| {
                err(
                    "checkpoints.include",
                    format!("`{pattern}`: {why} (write gitignore patterns such as `target/keep/`)"),
                )
            })?;
        }
        Ok(Self {
            enabled: raw.enabled.unwrap_or(true),
            max_bytes,
            max_count,
            max_age_secs,
            max_file_bytes,
            include,
        })
    }

    /// The store's settings.
    pub fn settings(&self) -> crate::checkpoint::Settings {
        crate::checkpoint::Settings {
            bounds: crate::checkpoint::store::Bounds {
                max_bytes: self.max_bytes,
                max_count: self.max_count,
                max_age_secs: self.max_age_secs,
            },
            max_file_bytes: self.max_file_bytes,
            include: self.include.clone(),
        }
    }
}

impl Default for CheckpointsPolicy {
    fn default() -> Self {
        Self::validate(RawCheckpoints::default()).expect("the defaults are valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_errors_name_the_field() {
        let p = CheckpointsPolicy::default();
        assert!(p.enabled);
        assert_eq!(p.max_count, DEFAULT_MAX_COUNT);
        assert_eq!(p.max_file_bytes, DEFAULT_MAX_FILE_BYTES);
        let zero = CheckpointsPolicy::validate(RawCheckpoints {
            max_count: Some(0),
            ..Default::default()
        });
        assert_eq!(zero.unwrap_err().field, "checkpoints.max_count");
        let negated = CheckpointsPolicy::validate(RawCheckpoints {
            include: Some(vec!["!target/".into()]),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(negated.field, "checkpoints.include");
        assert!(negated.message.contains("!target/"));
        let huge = CheckpointsPolicy::validate(RawCheckpoints {
            max_file_bytes: Some(MAX_FILE_BYTES + 1),
            ..Default::default()
        });
        assert_eq!(huge.unwrap_err().field, "checkpoints.max_file_bytes");
    }
}
