//! The calls' persistent home inside the workspace (`.cordon-home/`, the policy's
//! `{workspace_home}`): created by the server, beneath the workspace and never through a
//! link, with a `.gitignore` holding `*` so that git (and the tools that follow it) leave the
//! caches and tool state there alone. The home is the calls' to write, `.gitignore` included
//! (binding it read-only in the view would pin the home as a mount point of the view, for a
//! file whose loss only makes the caches show up in `git status`); the server writes it
//! again at its next start when it is gone.

use super::spill::{GITIGNORE, GITIGNORE_CONTENT, open_or_create_dir_nofollow};
use super::{PathError, Workspace};
use cap_std::fs::OpenOptions;
use std::io::{self, Write};

impl Workspace {
    /// Ensures `name` (a directory directly in the workspace root) exists with its
    /// `.gitignore`; an existing `.gitignore` is left as it is.
    pub fn ensure_home(&self, name: &str) -> Result<(), PathError> {
        let home = open_or_create_dir_nofollow(&self.dir, name, name)?;
        let shown = format!("{name}/{GITIGNORE}");
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        match home.open_with(GITIGNORE, &options) {
            Ok(mut file) => file
                .write_all(GITIGNORE_CONTENT)
                .map_err(|e| PathError::from_io(&shown, e)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(PathError::from_io(&shown, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_home_is_made_git_ignored_and_a_link_in_its_place_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        ws.ensure_home(".cordon-home").unwrap();
        let ignore = std::fs::read(dir.path().join(".cordon-home/.gitignore")).unwrap();
        assert_eq!(ignore, GITIGNORE_CONTENT);
        ws.ensure_home(".cordon-home").unwrap(); // idempotent

        let outside = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), other.path().join(".cordon-home")).unwrap();
        let ws = Workspace::open(other.path()).unwrap();
        let err = ws.ensure_home(".cordon-home").unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(
            !outside.path().join(".gitignore").exists(),
            "wrote through the link"
        );
    }
}
