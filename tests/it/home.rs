//! The calls' persistent home (`{workspace_home}`: `.cordon-home/` in the workspace) and the
//! toolchains of the operator's home (`filesystem.toolchains`): what one call leaves in HOME
//! the next one finds, the home is git-ignored, and a toolchain root is visible without
//! what lies beside it in the operator's home. And what a call leaves in place of cordon's
//! own directories (`.cordon-home`, `.cordon`, `.cordon/outputs`: a link, a file, a FIFO, a
//! directory of another uid or one anyone may write) never stops a later start: it is moved
//! aside, the directory made again, and the start says so.

use crate::common::{HANG_GUARD, Need, Sandbox, skip};
use crate::stdio_server::{StdioServer, structured};
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

#[cordon_test::test]
fn what_a_call_leaves_in_home_the_next_call_finds() {
    if skip(
        "what_a_call_leaves_in_home_the_next_call_finds",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    for policy in ["default", "dev"] {
        let first = sb.exec(
            &["--policy", policy],
            &[
                "sh",
                "-c",
                "mkdir -p ~/.cache/tool && echo kept > ~/.cache/tool/state && \
                 git config --global user.email agent@example.org && echo \"$HOME\"",
            ],
        );
        assert_eq!(first.code(), 0, "{policy}: {first:?}");
        let home = sb.ws().canonicalize().unwrap().join(".cordon-home");
        assert_eq!(first.stdout.trim_end(), home.to_string_lossy(), "{policy}");
        let second = sb.exec(
            &["--policy", policy],
            &[
                "sh",
                "-c",
                "cat ~/.cache/tool/state && git config --global user.email && cat ~/.gitignore",
            ],
        );
        assert_eq!(second.code(), 0, "{policy}: {second:?}");
        assert!(
            second
                .stdout
                .starts_with("kept\nagent@example.org\n# Written by cordon"),
            "{policy}: {second:?}"
        );
    }
    // strict keeps a home that is new every call.
    let run = sb.exec(&["--policy", "strict"], &["sh", "-c", "echo \"$HOME\""]);
    assert!(!run.stdout.contains(".cordon-home"), "{run:?}");
}

#[cordon_test::test]
fn a_toolchain_root_is_visible_and_its_neighbours_are_not() {
    if skip(
        "a_toolchain_root_is_visible_and_its_neighbours_are_not",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    // A home of its own for the server, laid out like rustup's and pyenv's, with secrets.
    let sb = Sandbox::new();
    let home = sb.outside().join("operator");
    for d in [".cargo/bin", ".pyenv/shims", ".ssh", ".rustup"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    let tool = home.join(".cargo/bin/mytool");
    std::fs::write(&tool, "#!/bin/sh\necho mytool-ran \"$RUSTUP_HOME\"\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let shim = home.join(".pyenv/shims/mypy-shim");
    std::fs::write(&shim, "#!/bin/sh\necho shim-ran \"$PYENV_ROOT\"\n").unwrap();
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        home.join(".cargo/credentials.toml"),
        "token = \"SECRET-1\"\n",
    )
    .unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "SECRET-2\n").unwrap();
    std::fs::write(home.join(".npmrc"), "SECRET-3\n").unwrap();

    let mut cmd = sb.command(
        &["--policy", "default"],
        &[
            "sh",
            "-c",
            "mytool; mypy-shim; for f in ~/.cargo/credentials.toml ~/.ssh/id_ed25519 ~/.npmrc; \
             do cat \"$REAL/${f#$HOME/}\" 2>/dev/null || echo unreadable; done",
        ],
    );
    cmd.env("HOME", &home).env("REAL", &home);
    let run = sb.exec_cmd(cmd);
    let h = home.display();
    assert_eq!(
        run.stdout,
        format!(
            "mytool-ran {h}/.rustup\nshim-ran {h}/.pyenv\nunreadable\nunreadable\nunreadable\n"
        ),
        "{run:?}"
    );
}

/// The ways a call can leave something that is not cordon's where cordon keeps a directory.
fn plant(path: &Path, how: &str, outside: &Path) {
    match how {
        "symlink" => std::os::unix::fs::symlink(outside, path).unwrap(),
        "file" => std::fs::write(path, "planted\n").unwrap(),
        "fifo" => {
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid C string; mkfifo only creates a node.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        }
        "other-uid" => {
            std::fs::create_dir(path).unwrap();
            std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
        }
        "world-writable" => {
            std::fs::create_dir(path).unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        _ => unreachable!("{how}"),
    }
}

/// The entries `name.moved-aside-*` beside `path`.
fn moved_aside(path: &Path) -> Vec<std::path::PathBuf> {
    let name = path.file_name().unwrap().to_str().unwrap();
    let prefix = format!("{name}.moved-aside-");
    std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|e| e.path())
        .collect()
}

#[cordon_test::test]
fn what_a_call_leaves_in_place_of_cordons_directories_never_stops_a_start() {
    let test = "what_a_call_leaves_in_place_of_cordons_directories_never_stops_a_start";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let root = rustix_is_root();
    for (entry, how) in [
        (".cordon-home", "symlink"),
        (".cordon-home", "file"),
        (".cordon-home", "fifo"),
        (".cordon-home", "other-uid"),
        (".cordon-home", "world-writable"),
        (".cordon", "symlink"),
        (".cordon", "fifo"),
        (".cordon/outputs", "symlink"),
    ] {
        if how == "other-uid" && !root {
            continue;
        }
        let sb = Sandbox::new();
        if entry == ".cordon/outputs" {
            std::fs::create_dir(sb.ws().join(".cordon")).unwrap();
        }
        let target = sb.outside().join("target");
        std::fs::create_dir(&target).unwrap();
        let path = sb.ws().join(entry);
        plant(&path, how, &target);

        // `serve` starts, and its first log message says what it moved and where.
        let mut server = StdioServer::start(sb.ws(), &["--policy", "default"], "", &[]);
        let id = server.send_request("logging/setLevel", json!({"level": "info"}));
        server.response(id, HANG_GUARD).expect("setLevel answered");
        let notes = server.notifications("notifications/message", Duration::from_secs(10));
        let first = notes
            .iter()
            .find(|n| n["method"] == "notifications/message")
            .unwrap_or_else(|| panic!("{entry} ({how}): no log message: {notes:?}"));
        let data = &first["params"]["data"];
        assert_eq!(
            data["event"], "workspace_repaired",
            "{entry} ({how}): {first}"
        );
        assert_eq!(data["path"], entry, "{entry} ({how}): {first}");
        let moved_to = data["moved_to"].as_str().unwrap().to_owned();
        assert!(
            data["message"].as_str().unwrap().contains("moved aside"),
            "{first}"
        );
        // Moved as it was (a link is still the link), to a name of random hex.
        let moved = moved_aside(&path);
        assert_eq!(moved.len(), 1, "{entry} ({how}): {moved:?}");
        assert_eq!(moved[0], sb.ws().join(&moved_to), "{first}");
        let suffix = moved_to.rsplit('-').next().unwrap();
        assert!(
            suffix.len() == 16 && suffix.bytes().all(|b| b.is_ascii_hexdigit()),
            "{moved_to}"
        );
        let kept = std::fs::symlink_metadata(&moved[0]).unwrap();
        match how {
            "symlink" => assert_eq!(std::fs::read_link(&moved[0]).unwrap(), target),
            "fifo" => assert!(std::os::unix::fs::FileTypeExt::is_fifo(&kept.file_type())),
            "file" => assert_eq!(std::fs::read(&moved[0]).unwrap(), b"planted\n"),
            "other-uid" => assert_eq!(kept.uid(), 65534),
            _ => assert!(kept.is_dir()),
        }
        // In its place, a directory of cordon's own that the calls use.
        let made = std::fs::symlink_metadata(&path).unwrap();
        assert!(made.is_dir() && made.mode() & 0o002 == 0, "{entry} ({how})");
        let result = server.call(
            "shell_exec",
            json!({"command": "echo kept > ~/state && cat ~/state && seq 1 30000"}),
        );
        assert_eq!(
            structured(&result)["exit_code"],
            0,
            "{entry} ({how}): {result}"
        );
        assert!(
            structured(&result)["full_output"]
                .as_str()
                .is_some_and(|p| p.starts_with(".cordon/outputs/")),
            "{entry} ({how}): the spill area works: {result}"
        );
        assert_eq!(
            std::fs::read_to_string(sb.ws().join(".cordon-home/state")).unwrap(),
            "kept\n"
        );
        assert_eq!(
            std::fs::read_dir(&target).unwrap().count(),
            0,
            "{entry} ({how}): something was written through the planted entry"
        );
        drop(server);

        // The next start finds everything cordon's: nothing more is moved.
        let again = sb.exec(&["--policy", "default"], &["true"]);
        assert_eq!(again.code(), 0, "{again:?}");
        assert!(!again.stderr.contains("moved aside"), "{again:?}");
        assert_eq!(moved_aside(&path).len(), 1, "{entry} ({how})");
    }
}

#[cordon_test::test]
fn a_start_that_moves_the_home_aside_says_so_on_stderr() {
    let test = "a_start_that_moves_the_home_aside_says_so_on_stderr";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    // A call replaces its home by a link, then the next start runs.
    let first = sb.exec(
        &["--policy", "default"],
        &[
            "sh",
            "-c",
            "mv .cordon-home gone && ln -s /etc .cordon-home",
        ],
    );
    assert_eq!(first.code(), 0, "{first:?}");
    assert!(
        std::fs::symlink_metadata(sb.ws().join(".cordon-home"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let log = sb.outside().join("serve.log");
    let prefix = format!("exec 2>'{}';", log.display());
    let mut server = StdioServer::start(sb.ws(), &["--policy", "default"], &prefix, &[]);
    let result = server.call("shell_exec", json!({"command": "echo \"$HOME\""}));
    assert_eq!(structured(&result)["exit_code"], 0, "{result}");
    drop(server);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains(".cordon-home was a symbolic link to /etc")
            && stderr.contains("moved aside to .cordon-home.moved-aside-"),
        "{stderr}"
    );
    assert!(
        std::fs::symlink_metadata(sb.ws().join(".cordon-home"))
            .unwrap()
            .is_dir()
    );
}

fn rustix_is_root() -> bool {
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// The operator's `~/.pyenv/shims` and a token with the path a call's probe would take there;
/// None (the test shown as skipped) on a machine without pyenv.
fn shim_probe(test: &str) -> Option<(String, std::path::PathBuf)> {
    let shims = std::env::var_os("HOME")
        .map(|h| Path::new(&h).join(".pyenv/shims"))
        .filter(|s| s.is_dir());
    let Some(shims) = shims else {
        crate::common::skip_msg(test, "no ~/.pyenv/shims on this machine");
        return None;
    };
    let token = crate::common::unique_token();
    let planted = shims.join(format!("cordon-probe-{token}"));
    Some((token, planted))
}

/// Issue 33, item 5: a call may rewrite a toolchain's shims (`pyenv rehash`, which every
/// `pip install` through pyenv's shim runs under `set -e`), in the calls' copy: the operator's
/// shims never change, and another server (here the next `cordon exec`) starts from a fresh
/// copy.
#[cordon_test::test]
fn a_call_rehashes_its_own_copy_of_the_toolchain_shims() {
    let test = "a_call_rehashes_its_own_copy_of_the_toolchain_shims";
    if skip(test, Need::Namespaces) {
        return;
    }
    let Some((token, planted)) = shim_probe(test) else {
        return;
    };
    let sb = Sandbox::new();
    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            &format!(
                "pyenv rehash && echo rehashed && touch \"$PYENV_ROOT/shims/cordon-probe-{token}\" \
                 && echo planted"
            ),
        ],
    );
    assert_eq!(run.stdout, "rehashed\nplanted\n", "{run:?}");
    assert!(
        !planted.exists(),
        "a call's write reached the operator's shims"
    );
    let next = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            &format!(
                "test -e \"$PYENV_ROOT/shims/cordon-probe-{token}\" && echo seen || echo fresh"
            ),
        ],
    );
    assert_eq!(next.stdout, "fresh\n", "{next:?}");
}

/// The same through a server: its calls share one copy of the shims, made when it starts (a
/// later call sees what an earlier one's rehash wrote), and the operator's never change.
/// (`cordon exec`'s one slot makes its own copy on a tmpfs instead: the test above.)
#[cordon_test::test]
fn a_servers_calls_rehash_their_shared_copy_of_the_toolchain_shims() {
    let test = "a_servers_calls_rehash_their_shared_copy_of_the_toolchain_shims";
    if skip(test, Need::Namespaces) {
        return;
    }
    let Some((token, planted)) = shim_probe(test) else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let first = server.call(
        "shell_exec",
        json!({"command": format!(
            "pyenv rehash && echo rehashed && touch \"$PYENV_ROOT/shims/cordon-probe-{token}\" \
             && echo planted"
        )}),
    );
    assert_eq!(
        structured(&first)["stdout"],
        "rehashed\nplanted\n",
        "{first}"
    );
    assert!(
        !planted.exists(),
        "a call's write reached the operator's shims"
    );
    let next = server.call(
        "shell_exec",
        json!({"command": format!(
            "test -e \"$PYENV_ROOT/shims/cordon-probe-{token}\" && echo seen || echo fresh"
        )}),
    );
    assert_eq!(structured(&next)["stdout"], "seen\n", "{next}");
}
