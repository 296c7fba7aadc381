//! Opening a file in a directory a confined process may have written (the shadow gitdir),
//! for the server to read: by the kernel's rules (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`: no `..` out, no link at any step), non-blocking (a FIFO put where
//! git keeps a file would otherwise hold the server's open until a writer came, and the
//! import, which holds its repository's lock, with it), and only a regular file is returned.

use std::os::fd::AsFd;

use cap_std::fs::Dir;

/// Why [`open_regular`] gave no file.
#[derive(Debug)]
pub(crate) enum Opened {
    Absent,
    /// Something is there but it is not a regular file reached without a link (why).
    Not(String),
}

impl std::fmt::Display for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Absent => f.write_str("absent"),
            Self::Not(why) => f.write_str(why),
        }
    }
}

/// Opens `path` beneath `dir` for reading, by the kernel's rules: no `..` out, no link at
/// any step, no blocking on a FIFO; only a regular file is returned.
pub(crate) fn open_regular(dir: &Dir, path: &str) -> Result<std::fs::File, Opened> {
    let fd = match rustix::fs::openat2(
        dir.as_fd(),
        path,
        rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::NONBLOCK
            | rustix::fs::OFlags::NOCTTY
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
        rustix::fs::ResolveFlags::BENEATH
            | rustix::fs::ResolveFlags::NO_SYMLINKS
            | rustix::fs::ResolveFlags::NO_MAGICLINKS
            | rustix::fs::ResolveFlags::NO_XDEV,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Err(Opened::Absent),
        Err(e) => return Err(Opened::Not(format!("cannot be opened ({e})"))),
    };
    let file = std::fs::File::from(fd);
    match file.metadata() {
        Ok(meta) if meta.is_file() => Ok(file),
        Ok(_) => Err(Opened::Not("not a regular file".into())),
        Err(e) => Err(Opened::Not(format!("cannot be read ({e})"))),
    }
}
