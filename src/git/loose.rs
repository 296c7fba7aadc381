//! One loose object read out of the shadow's object store by the server itself, for the
//! in-process import (`direct`).
//!
//! The shadow is written by confined processes, so this reads the one file git would name
//! for the object (`objects/xx/yyyy…`) and nothing else of the shadow: never its config,
//! alternates or packs. The file is opened beneath the shadow's handle by the kernel
//! (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), non-blocking (a FIFO there
//! cannot stall the server), and only when it is a regular file no larger than
//! [`MAX_COMPRESSED`]; the inflated object is bounded by [`MAX_OBJECT`] before any
//! allocation of its size, and its content must hash to its name (SHA-1 with git's
//! collision detection, or SHA-256). Whatever fails is not read further: the caller leaves
//! the import to git run confined.

use std::io::Read;

use cap_std::fs::Dir;

use super::open::{Opened, open_regular};
use gix_hash::{ObjectId, oid};

/// Largest object inflated in the server (a larger one takes the confined path).
pub const MAX_OBJECT: u64 = 16 << 20;
/// Largest compressed loose object file read (zlib can only grow incompressible data by a
/// few bytes per 16 KiB block).
const MAX_COMPRESSED: u64 = MAX_OBJECT + (MAX_OBJECT >> 8) + 4096;
/// Bytes inflated first to read the object's header (`blob 123\0`).
const HEADER_PREFIX: usize = 64;

/// Why an object was not read from the shadow: either way the caller does not use this path.
#[derive(Debug, thiserror::Error)]
pub(super) enum LooseError {
    /// The shadow has no loose file for it (packed, or not there at all).
    #[error("object {0} is not a loose object in the sandbox's repository")]
    Absent(ObjectId),
    /// A file is there but not one this reader takes (its reason).
    #[error("object {id}: {why}")]
    Unusable { id: ObjectId, why: String },
}

/// The object `id` from the shadow whose gitdir is `shadow`: its kind and content.
pub(super) fn read(shadow: &Dir, id: &oid) -> Result<(gix_object::Kind, Vec<u8>), LooseError> {
    let unusable = |why: String| LooseError::Unusable {
        id: id.to_owned(),
        why,
    };
    let hex = id.to_hex().to_string();
    let path = format!("objects/{}/{}", &hex[..2], &hex[2..]);
    let file = match open_regular(shadow, &path) {
        Ok(file) => file,
        Err(Opened::Absent) => return Err(LooseError::Absent(id.to_owned())),
        Err(Opened::Not(why)) => return Err(unusable(why)),
    };
    let size = file
        .metadata()
        .map_err(|e| unusable(format!("cannot be read ({e})")))?
        .len();
    if size > MAX_COMPRESSED {
        return Err(unusable(format!("larger than {MAX_COMPRESSED} bytes")));
    }
    let mut compressed = Vec::with_capacity(size as usize);
    file.take(MAX_COMPRESSED + 1)
        .read_to_end(&mut compressed)
        .map_err(|e| unusable(format!("cannot be read ({e})")))?;
    let (kind, data) = inflate(&compressed, unusable)?;
    let computed = gix_object::compute_hash(id.kind(), kind, &data)
        .map_err(|e| unusable(format!("cannot be hashed ({e})")))?;
    if computed != id {
        return Err(unusable(format!("its content hashes to {computed}")));
    }
    Ok((kind, data))
}

/// A loose object file's kind and content, or why not (the reader's checks but the name's).
pub fn decode(compressed: &[u8]) -> Result<(gix_object::Kind, Vec<u8>), String> {
    inflate(compressed, |why| LooseError::Unusable {
        id: gix_hash::Kind::Sha1.null(),
        why,
    })
    .map_err(|e| e.to_string())
}

/// The loose object's kind and content: the header first, then exactly the size it states.
fn inflate(
    compressed: &[u8],
    unusable: impl Fn(String) -> LooseError,
) -> Result<(gix_object::Kind, Vec<u8>), LooseError> {
    let mut head = [0u8; HEADER_PREFIX];
    let (_, _, got) = gix_zlib::Inflate::default()
        .once(compressed, &mut head)
        .map_err(|e| unusable(format!("not zlib data ({e})")))?;
    let (kind, size, header_len) = gix_object::decode::loose_header(&head[..got])
        .map_err(|e| unusable(format!("no object header ({e})")))?;
    if size > MAX_OBJECT {
        return Err(unusable(format!("larger than {MAX_OBJECT} bytes inflated")));
    }
    let total = header_len + size as usize;
    // One byte more than the header says: a stream that goes on past it is refused, not cut.
    let mut out = vec![0u8; total + 1];
    let (status, _, written) = gix_zlib::Inflate::default()
        .once(compressed, &mut out)
        .map_err(|e| unusable(format!("not zlib data ({e})")))?;
    if status != gix_zlib::Status::StreamEnd || written != total {
        return Err(unusable(format!(
            "its content is not the {size} bytes its header states"
        )));
    }
    out.truncate(total);
    out.drain(..header_len);
    Ok((kind, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shadow_with(objects: &[(&str, Vec<u8>)]) -> (tempfile::TempDir, Dir) {
        let tmp = tempfile::tempdir().unwrap();
        for (hex, bytes) in objects {
            let dir = tmp.path().join("objects").join(&hex[..2]);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(&hex[2..]), bytes).unwrap();
        }
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        (tmp, dir)
    }

    fn deflate(raw: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut out = gix_zlib::stream::deflate::Write::new(Vec::new(), Default::default());
        out.write_all(raw).unwrap();
        out.flush().unwrap();
        out.into_inner()
    }

    fn blob_id(content: &[u8]) -> ObjectId {
        gix_object::compute_hash(gix_hash::Kind::Sha1, gix_object::Kind::Blob, content).unwrap()
    }

    #[test]
    fn a_loose_blob_is_read_and_checked_against_its_name() {
        let id = blob_id(b"hello\n");
        let hex = id.to_hex().to_string();
        let (_tmp, dir) = shadow_with(&[(&hex, deflate(b"blob 6\0hello\n"))]);
        let (kind, data) = read(&dir, &id).unwrap();
        assert_eq!(
            (kind, data.as_slice()),
            (gix_object::Kind::Blob, &b"hello\n"[..])
        );
    }

    #[test]
    fn content_that_does_not_hash_to_the_name_is_refused() {
        let id = blob_id(b"hello\n");
        let hex = id.to_hex().to_string();
        let (_tmp, dir) = shadow_with(&[(&hex, deflate(b"blob 6\0evil!\n"))]);
        let err = read(&dir, &id).unwrap_err().to_string();
        assert!(err.contains("hashes to"), "{err}");
    }

    #[test]
    fn a_stream_longer_or_shorter_than_its_header_is_refused() {
        let id = blob_id(b"hello\n");
        let hex = id.to_hex().to_string();
        for raw in [&b"blob 6\0hello\nmore"[..], &b"blob 6\0hel"[..]] {
            let (_tmp, dir) = shadow_with(&[(&hex, deflate(raw))]);
            let err = read(&dir, &id).unwrap_err().to_string();
            assert!(err.contains("not the 6 bytes"), "{err}");
        }
    }

    #[test]
    fn a_huge_header_is_refused_before_any_allocation_of_its_size() {
        let id = blob_id(b"x");
        let hex = id.to_hex().to_string();
        let (_tmp, dir) = shadow_with(&[(&hex, deflate(b"blob 99999999999\0x"))]);
        let err = read(&dir, &id).unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");
    }

    #[test]
    fn links_fifos_and_absent_objects_are_not_read() {
        let id = blob_id(b"hello\n");
        let hex = id.to_hex().to_string();
        let (tmp, dir) = shadow_with(&[]);
        assert!(matches!(read(&dir, &id), Err(LooseError::Absent(_))));
        let fan = tmp.path().join("objects").join(&hex[..2]);
        std::fs::create_dir_all(&fan).unwrap();
        let real = tmp.path().join("real");
        std::fs::write(&real, deflate(b"blob 6\0hello\n")).unwrap();
        std::os::unix::fs::symlink(&real, fan.join(&hex[2..])).unwrap();
        assert!(matches!(read(&dir, &id), Err(LooseError::Unusable { .. })));
        std::fs::remove_file(fan.join(&hex[2..])).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            fan.join(&hex[2..]),
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let err = read(&dir, &id).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        // A link in the fan-out directory's place is not followed either.
        std::fs::remove_dir_all(&fan).unwrap();
        std::os::unix::fs::symlink(tmp.path(), &fan).unwrap();
        assert!(matches!(read(&dir, &id), Err(LooseError::Unusable { .. })));
    }
}
