//! How a worker gets its driver and its output descriptors.
//!
//! The driver script lives in a memory file the server writes once per manager and seals
//! against any change, handed to every worker as descriptor [`DRIVER_FD`]; the worker's argv
//! holds only a one-line bootstrap that reads and runs it. So the 8 KB driver never shows in
//! `ps`, and no worker can alter what the next worker runs. Owns the descriptor numbers the
//! driver expects ([`STDOUT_FD`], [`STDERR_FD`]); what flows through them is `output`'s.

use std::io::{self, Write};
use std::os::fd::OwnedFd;

/// The driver script, compiled in so the binary works from any directory.
const DRIVER: &str = include_str!("driver.py");

/// Where the worker finds the cell-output files the driver moves to its fds 1 and 2.
pub(super) const STDOUT_FD: i32 = 3;
pub(super) const STDERR_FD: i32 = 4;
/// Where the worker finds the driver script.
pub(super) const DRIVER_FD: i32 = 5;

/// The `python -c` program: read the driver from its descriptor, close it, run it. The code
/// object is named `<cordon-driver>` so tracebacks can drop the driver's frames.
pub(super) fn bootstrap() -> String {
    format!(
        "import os;d=os.pread({DRIVER_FD},os.fstat({DRIVER_FD}).st_size,0);os.close({DRIVER_FD});\
         exec(compile(d,'<cordon-driver>','exec'))"
    )
}

/// The sealed memory file holding the driver.
pub(super) struct DriverImage(OwnedFd);

impl DriverImage {
    pub(super) fn new() -> io::Result<Self> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let fd = rustix::fs::memfd_create(
            "cordon-driver",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        let mut file = std::fs::File::from(fd);
        file.write_all(DRIVER.as_bytes())?;
        let fd = OwnedFd::from(file);
        rustix::fs::fcntl_add_seals(
            &fd,
            SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL,
        )?;
        Ok(Self(fd))
    }

    /// A descriptor of the image for one worker (the image itself is read-only for everyone).
    pub(super) fn for_worker(&self) -> io::Result<OwnedFd> {
        self.0.try_clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn the_image_holds_the_driver_and_cannot_be_changed() {
        let image = DriverImage::new().unwrap();
        let file = std::fs::File::from(image.for_worker().unwrap());
        let mut buf = vec![0u8; DRIVER.len() + 1];
        let n = file.read_at(&mut buf, 0).unwrap();
        assert_eq!(&buf[..n], DRIVER.as_bytes());
        assert!(file.write_at(b"import evil", 0).is_err());
        assert!(file.set_len(0).is_err());
    }

    #[test]
    fn the_bootstrap_is_short_and_names_the_driver_descriptor() {
        let boot = bootstrap();
        assert!(boot.len() < 200, "{boot}");
        assert!(boot.contains(&format!("pread({DRIVER_FD},")), "{boot}");
    }
}
