//! The home of the user running cordon: `$HOME` when it names an absolute path, and the
//! `~/` spelling a policy may use for it.
//!
//! Its own module because resolving grants (`resolve`), finding toolchains (`toolchains`) and
//! checking fields (`check`, `validate`, `interception`) all need it, and none of them should
//! import another for it.

/// The home directory of the user running cordon, when `$HOME` names an absolute path.
pub(crate) fn server_home() -> Option<String> {
    std::env::var("HOME")
        .ok()
        .filter(|home| home.starts_with('/'))
        .map(|home| home.trim_end_matches('/').to_owned())
        .map(|home| if home.is_empty() { "/".into() } else { home })
}

/// `~/x` as the server user's home joined with `x`; any other spelling unchanged.
pub(super) fn expand_home(path: String) -> String {
    match (path.strip_prefix("~/"), server_home()) {
        (Some(rest), Some(home)) => format!("{}/{rest}", home.trim_end_matches('/')),
        _ => path,
    }
}
