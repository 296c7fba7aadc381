//! git's pkt-line framing, as far as the proxy reads it: the command list at the start of a
//! `git-receive-pack` request (`<old> <new> <ref>`, one per pkt-line, the first carrying the
//! capabilities after a NUL, ended by a flush), and the report-status answer git prints when
//! the proxy refuses the push (`ng <ref> <reason>`, inside side-band 1 when the client asked
//! for it, with the reason on side-band 2 too so `git push` shows it as `remote:`).
//!
//! Owns the bytes only, pure and bounded (fuzzed by `fuzz/fuzz_targets/intercept_bytes.rs`):
//! anything it does not understand is an error naming what was wrong, never a guess, since a
//! command it skipped would be a ref update nobody judged.

/// Most bytes of a command list read before it must have ended.
pub(crate) const MAX_COMMANDS: usize = 1024 * 1024;

/// One ref update a push asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    pub old: String,
    pub new: String,
    pub refname: String,
}

impl RefUpdate {
    /// A deletion: the new object id is all zeros.
    pub fn is_delete(&self) -> bool {
        self.new.bytes().all(|b| b == b'0')
    }
}

/// The command list of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commands {
    pub updates: Vec<RefUpdate>,
    pub capabilities: Vec<String>,
    /// Bytes of the body it took, flush included (the pack follows).
    pub len: usize,
}

impl Commands {
    pub fn has_capability(&self, name: &str) -> bool {
        self.capabilities.iter().any(|c| c == name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PktError {
    #[error("the push's command list is longer than {MAX_COMMANDS} bytes")]
    TooLong,
    #[error("malformed pkt-line: {0}")]
    Malformed(String),
}

/// Parses the command list at the start of a receive-pack body. `Ok(None)`: not complete yet.
pub fn parse_commands(buf: &[u8]) -> Result<Option<Commands>, PktError> {
    let mut at = 0;
    let mut updates = Vec::new();
    let mut capabilities = Vec::new();
    loop {
        if at > MAX_COMMANDS {
            return Err(PktError::TooLong);
        }
        let Some(len_hex) = buf.get(at..at + 4) else {
            return incomplete(buf);
        };
        let len = std::str::from_utf8(len_hex)
            .ok()
            .filter(|s| s.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .ok_or_else(|| PktError::Malformed("a length is not four hex digits".into()))?;
        if len == 0 {
            if updates.is_empty() {
                return Err(PktError::Malformed("a push without commands".into()));
            }
            return Ok(Some(Commands {
                updates,
                capabilities,
                len: at + 4,
            }));
        }
        if len < 5 {
            return Err(PktError::Malformed(format!(
                "length {len:04x} inside a command list"
            )));
        }
        let Some(payload) = buf.get(at + 4..at + len) else {
            return incomplete(buf);
        };
        at += len;
        let payload = payload.strip_suffix(b"\n").unwrap_or(payload);
        let (line, caps) = match payload.iter().position(|&b| b == 0) {
            Some(nul) if updates.is_empty() => (&payload[..nul], Some(&payload[nul + 1..])),
            Some(_) => {
                return Err(PktError::Malformed(
                    "capabilities after the first command".into(),
                ));
            }
            None => (payload, None),
        };
        let line = std::str::from_utf8(line)
            .map_err(|_| PktError::Malformed("a command is not UTF-8".into()))?;
        if updates.is_empty() && line.starts_with("shallow ") {
            continue; // a shallow clone's boundary, before the commands
        }
        if line.starts_with("push-cert") {
            return Err(PktError::Malformed(
                "signed pushes (push-cert) are not judged by the proxy; push without --signed"
                    .into(),
            ));
        }
        updates.push(command(line)?);
        if let Some(caps) = caps {
            capabilities = String::from_utf8_lossy(caps)
                .split(' ')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
        }
    }
}

fn incomplete(buf: &[u8]) -> Result<Option<Commands>, PktError> {
    if buf.len() > MAX_COMMANDS {
        Err(PktError::TooLong)
    } else {
        Ok(None)
    }
}

fn command(line: &str) -> Result<RefUpdate, PktError> {
    let mut parts = line.split(' ');
    let (Some(old), Some(new), Some(refname), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(PktError::Malformed(format!(
            "expected `<old> <new> <ref>`, got `{}`",
            line.escape_debug()
        )));
    };
    let oid =
        |s: &str| (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !oid(old) || !oid(new) || old.len() != new.len() {
        return Err(PktError::Malformed(format!(
            "object ids in `{}` are not hex of one length",
            line.escape_debug()
        )));
    }
    if !refname.starts_with("refs/") || refname.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(PktError::Malformed(format!(
            "`{}` is not a ref name",
            refname.escape_debug()
        )));
    }
    Ok(RefUpdate {
        old: old.to_owned(),
        new: new.to_owned(),
        refname: refname.to_owned(),
    })
}

/// One pkt-line around `payload`.
pub(crate) fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", payload.len() + 4).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The report-status body of a push the proxy refused: every ref `ng`, the refused ones with
/// their reason, the others because the push is refused as a whole (nothing was forwarded).
/// With `side_band` (the client's `side-band-64k`), wrapped in band 1, the reasons on band 2.
pub fn refusal_report(commands: &Commands, refused: &[(String, String)]) -> Vec<u8> {
    let mut report = pkt(b"unpack ok\n");
    for u in &commands.updates {
        let reason = refused
            .iter()
            .find(|(r, _)| r == &u.refname)
            .map(|(_, why)| why.clone())
            .unwrap_or_else(|| "cordon: not pushed, another ref of this push was refused".into());
        // A reason is one line; git prints it in parentheses.
        let reason = reason.replace(['\n', '\r'], " ");
        report.extend(pkt(format!("ng {} {reason}\n", u.refname).as_bytes()));
    }
    report.extend_from_slice(b"0000");
    if !(commands.has_capability("side-band-64k") || commands.has_capability("side-band")) {
        return report;
    }
    let max = if commands.has_capability("side-band-64k") {
        65515
    } else {
        995
    };
    let mut out = Vec::new();
    for (_, why) in refused {
        let mut band = vec![2u8];
        band.extend_from_slice(why.replace(['\n', '\r'], " ").as_bytes());
        band.push(b'\n');
        band.truncate(max);
        out.extend(pkt(&band));
    }
    for piece in report.chunks(max - 1) {
        let mut band = vec![1u8];
        band.extend_from_slice(piece);
        out.extend(pkt(&band));
    }
    out.extend_from_slice(b"0000");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(lines: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for l in lines {
            out.extend(pkt(l.as_bytes()));
        }
        out.extend_from_slice(b"0000PACK....");
        out
    }

    const Z: &str = "0000000000000000000000000000000000000000";
    const A: &str = "1111111111111111111111111111111111111111";

    #[test]
    fn a_command_list_parses_with_its_capabilities() {
        let body = list(&[
            &format!("{Z} {A} refs/heads/agent/x\0report-status side-band-64k agent=git/2\n"),
            &format!("{A} {Z} refs/heads/old\n"),
        ]);
        let c = parse_commands(&body).unwrap().unwrap();
        assert_eq!(c.updates.len(), 2);
        assert_eq!(c.updates[0].refname, "refs/heads/agent/x");
        assert!(!c.updates[0].is_delete() && c.updates[1].is_delete());
        assert!(c.has_capability("side-band-64k"));
        assert_eq!(&body[c.len..], b"PACK....");
        // Every prefix is "not complete yet", never an error or a shorter list.
        for cut in 0..c.len {
            assert_eq!(parse_commands(&body[..cut]), Ok(None), "cut {cut}");
        }
    }

    #[test]
    fn malformed_lists_are_errors() {
        for bad in [
            b"zzzz".to_vec(),
            b"0003".to_vec(),
            b"0000".to_vec(),
            list(&["not a command"]),
            list(&[&format!("{Z} {A} HEAD")]),
            list(&[
                &format!("{Z} {A} refs/heads/x\0caps"),
                &format!("{Z} {A} refs/x\0again"),
            ]),
            list(&[&format!("{Z} 1234 refs/heads/x")]),
            list(&["push-cert\0caps"]),
        ] {
            assert!(
                parse_commands(&bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(&bad)
            );
        }
    }

    #[test]
    fn a_refusal_report_is_in_gits_format() {
        let body = list(&[&format!("{Z} {A} refs/heads/main\0report-status\n")]);
        let c = parse_commands(&body).unwrap().unwrap();
        let r = refusal_report(&c, &[("refs/heads/main".into(), "cordon: no".into())]);
        assert_eq!(
            String::from_utf8(r).unwrap(),
            "000eunpack ok\n0022ng refs/heads/main cordon: no\n0000"
        );
        let body = list(&[&format!(
            "{Z} {A} refs/heads/main\0report-status side-band-64k\n"
        )]);
        let c = parse_commands(&body).unwrap().unwrap();
        let r = refusal_report(&c, &[("refs/heads/main".into(), "cordon: no".into())]);
        assert!(
            r.starts_with(b"0010\x02cordon: no\n"),
            "{:?}",
            String::from_utf8_lossy(&r)
        );
        assert!(r.ends_with(b"0000"));
    }
}
