//! The calls' persistent home (`{workspace_home}`: `.cordon-home/` in the workspace) and the
//! toolchains of the operator's home (`filesystem.toolchains`): what one call leaves in HOME
//! the next one finds, the home is git-ignored, and a toolchain root is visible without
//! what lies beside it in the operator's home.

use crate::common::{Need, Sandbox, skip};
use std::os::unix::fs::PermissionsExt;

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
