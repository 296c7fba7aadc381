//! The checks every section of a policy shares ([`Check`]): required values, numbers above 0,
//! absolute paths, seconds, each failing with a [`PolicyError::Invalid`] that names the
//! policy's origin and the field.
//!
//! Its own module so that `validate` (the sections) and `interception` (the interception fields
//! of `[network]`, which `validate` calls) both use it without importing each other.

use super::PolicyError;
use super::home::expand_home;
use std::path::PathBuf;
use std::time::Duration;

/// The checks every section shares, for one policy: an error names `origin` (the policy
/// being loaded) and the field.
pub(super) struct Check<'a> {
    pub(super) origin: &'a str,
}

impl Check<'_> {
    pub(super) fn invalid(&self, field: &'static str, message: String) -> PolicyError {
        PolicyError::Invalid {
            origin: self.origin.to_owned(),
            field,
            message,
        }
    }

    pub(super) fn required<T>(
        &self,
        field: &'static str,
        value: Option<T>,
    ) -> Result<T, PolicyError> {
        value.ok_or_else(|| self.invalid(field, "is required".into()))
    }

    /// A required number above 0.
    pub(super) fn positive(
        &self,
        field: &'static str,
        value: Option<u64>,
    ) -> Result<u64, PolicyError> {
        match self.required(field, value)? {
            0 => Err(self.invalid(field, "must be greater than 0".into())),
            v => Ok(v),
        }
    }

    /// A required list of absolute paths (`~/` is the server user's home).
    pub(super) fn paths(
        &self,
        field: &'static str,
        list: Option<Vec<String>>,
    ) -> Result<Vec<PathBuf>, PolicyError> {
        self.required(field, list)?
            .into_iter()
            .map(|p| {
                let p = expand_home(p);
                if !p.starts_with('/') || p.contains('\0') {
                    Err(self.invalid(field, format!("`{p}` must be an absolute path")))
                } else {
                    Ok(PathBuf::from(p))
                }
            })
            .collect()
    }

    /// A required number of seconds above 0.
    pub(super) fn seconds(
        &self,
        field: &'static str,
        value: Option<u64>,
    ) -> Result<Duration, PolicyError> {
        self.positive(field, value).map(Duration::from_secs)
    }
}
