//! Fuzzes what the egress proxy reads in clear from an intercepted request (issue 20): the
//! pkt-line command list of a `git-receive-pack` body and the refusal report made from it, and
//! the placeholder work on a request head, a request body and a response.
//! Invariants: nothing panics; an accepted command list lies within its input and every
//! shorter prefix is "not complete yet"; rewriting toward the bound host leaves no
//! placeholder; toward an unbound host it either refuses (when the placeholder is there) or
//! changes nothing; a scrubbed response keeps its length and holds no real value, however it
//! is split; the body detector finds a placeholder split across pieces exactly when the whole
//! holds one. `@@` in the input stands for the placeholder (random per run, so the fuzzer could
//! not write it itself). The one canonical spelling of a path (`egress::canon`): an accepted
//! path is its own canonical form, rooted, with no dot segment (`..;` included) and no empty
//! one left. The one builder of upstream-derived words (`egress::upstream::describe`): the
//! description of any response head that fails to parse holds no byte of it (a real
//! credential planted anywhere in it never shows, neither in the words nor in the fault's
//! debug form).
#![no_main]

use cordon::testing::egress::canon;
use cordon::testing::egress::pattern::{HostPattern, Target};
use cordon::testing::egress::upstream;
use cordon::testing::egress::pktline;
use cordon::testing::egress::rules::Site;
use cordon::testing::egress::secrets::{
    BoundHost, CredentialRule, Detector, Inject, Secret, SecretSource, Vault,
};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const REAL: &str = "ghp_ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ";

fn vault() -> &'static Vault {
    static VAULT: OnceLock<Vault> = OnceLock::new();
    VAULT.get_or_init(|| {
        let rule = CredentialRule {
            name: "gh".into(),
            hosts: vec![BoundHost {
                pattern: HostPattern::parse("bound.example").unwrap(),
                plain_http: false,
            }],
            env: "GITHUB_TOKEN".into(),
            source: SecretSource::Env("X".into()),
            inject: Inject::Basic("x-access-token".into()),
            site: Site::default(),
        };
        Vault::from_secrets(vec![Secret::new(rule, REAL.into()).unwrap()])
    })
}

fn contains(h: &[u8], n: &[u8]) -> bool {
    h.windows(n.len()).any(|w| w == n)
}

fuzz_target!(|data: &[u8]| {
    // A push's command list.
    if let Ok(Some(commands)) = pktline::parse_commands(data) {
        assert!(commands.len <= data.len() && !commands.updates.is_empty());
        let cut = data.first().map_or(0, |&b| b as usize) % commands.len;
        assert_eq!(pktline::parse_commands(&data[..cut]), Ok(None), "cut {cut}");
        let refused: Vec<(String, String)> = commands
            .updates
            .iter()
            .take(1)
            .map(|u| (u.refname.clone(), "cordon: no\nsecond line".into()))
            .collect();
        let report = pktline::refusal_report(&commands, &refused);
        assert!(report.ends_with(b"0000"));
    }

    // The canonical path: idempotent, rooted, no dot or empty segment left.
    if let Ok(path) = std::str::from_utf8(data)
        && let Ok(c) = canon::canonical(path)
    {
        assert_eq!(canon::canonical(&c).as_deref(), Ok(c.as_str()), "{path:?}");
        if c != "*" {
            assert!(c.starts_with('/'), "{c:?}");
            let segments: Vec<&str> = c[1..].split('/').collect();
            for (i, seg) in segments.iter().enumerate() {
                let bare = seg.split(';').next().unwrap_or("");
                assert!(bare != "." && bare != "..", "{path:?} -> {c:?}");
                assert!(!seg.is_empty() || i + 1 == segments.len(), "{path:?} -> {c:?}");
            }
        }
    }

    // The upstream's words: a head that does not parse is described without its bytes.
    let planted = String::from_utf8_lossy(data).replace("@@", REAL);
    if let Err(fault) = upstream::parse_head(planted.as_bytes()) {
        let words = upstream::describe("bound.example:443", &fault);
        assert!(!words.contains(REAL), "{words}");
        assert!(!format!("{fault:?}").contains(REAL));
    }

    let v = vault();
    let placeholder = v.secrets()[0].placeholder().to_owned();
    let text = String::from_utf8_lossy(data).replace("@@", &placeholder);
    let bytes = text.as_bytes();
    let bound = Target::parse_authority("bound.example:443").unwrap();
    let other = Target::parse_authority("other.example:443").unwrap();

    // A head: the first line is the path, the others `name: value` fields.
    let mut lines = text.lines();
    let path = lines.next().unwrap_or("/").to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    let (mut p, mut h) = (path.clone(), headers.clone());
    if v.rewrite(&mut p, &mut h, &bound, true).is_ok() {
        assert!(!p.contains(&placeholder));
        assert!(h.iter().all(|(_, value)| !value.contains(&placeholder)), "{h:?}");
    }
    let (mut p, mut h) = (path.clone(), headers.clone());
    match v.rewrite(&mut p, &mut h, &other, true) {
        Ok(injected) => {
            assert!(injected.names.is_empty());
            assert_eq!((p, h), (path, headers));
        }
        Err(e) => assert_eq!(e.credential, "gh"),
    }

    // A response, scrubbed in two pieces.
    let split = data.first().map_or(0, |&b| b as usize) % (bytes.len() + 1);
    let echoed = text.replace(&placeholder, REAL);
    let echoed = echoed.as_bytes();
    let split_e = split.min(echoed.len());
    let mut s = v.scrubber();
    let mut out = s.feed(&echoed[..split_e]);
    out.extend(s.feed(&echoed[split_e..]));
    out.extend(s.finish());
    assert_eq!(out.len(), echoed.len());
    assert!(!contains(&out, REAL.as_bytes()));

    // A body, watched in two pieces.
    let mut d = Detector::new(v, &other, true);
    let found = d.feed(&bytes[..split]).is_some() || d.feed(&bytes[split..]).is_some();
    assert_eq!(found, contains(bytes, placeholder.as_bytes()));
});
