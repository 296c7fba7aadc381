//! The in-process git import (issue 29's after-commit cost): the server itself brings an
//! agent's ordinary commits into the operator's repository, and leaves everything outside
//! its strict subset to git run confined.
//!
//! Each server here runs with `CORDON_SIMULATE_MISSING=git-export`, under which every import
//! left to the confined export is refused. So a commit that reaches the operator's repository
//! proves the server's own path took it, and a refusal that names the simulated export proves
//! the change was left to git's checks. The operator is played by the real `git` on the host:
//! after each import the repository must pass `git fsck` (which also checks the index's
//! checksum), show nothing staged or changed, and `git write-tree` must give `HEAD`'s tree (a
//! stale cache tree in the index cordon edited would make the operator's next commit record
//! old content).

use std::path::Path;

use crate::common::{Need, skip};
use crate::git_protection::{Client, connect_with_env, denied, host_git, operator_repo, shell};

const EXPORT_MISSING: (&str, &str) = ("CORDON_SIMULATE_MISSING", "git-export");

/// The operator's repository with files in nested directories, committed on the host.
fn operator_tree(ws: &Path) {
    operator_repo(ws);
    for dir in ["src/a", "src/b", "docs"] {
        std::fs::create_dir_all(ws.join(dir)).unwrap();
        for i in 0..20 {
            std::fs::write(
                ws.join(dir).join(format!("f{i}.txt")),
                format!("{dir} {i}\n"),
            )
            .unwrap();
        }
    }
    std::fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
    for args in [&["add", "-A"][..], &["commit", "-qm", "files"]] {
        let out = host_git(ws, args);
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
}

fn stdout(out: std::process::Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// What the operator's git sees is whole and consistent with `HEAD`.
fn assert_operator_consistent(ws: &Path, subject: &str) {
    assert_eq!(stdout(host_git(ws, &["log", "-1", "--format=%s"])), subject);
    let fsck = host_git(ws, &["fsck", "--no-dangling", "--strict"]);
    assert!(fsck.status.success(), "git fsck: {fsck:?}");
    assert_eq!(
        stdout(host_git(ws, &["status", "--porcelain"])),
        "",
        "the operator's index and work tree match HEAD after `{subject}`"
    );
    assert_eq!(
        stdout(host_git(ws, &["write-tree"])),
        stdout(host_git(ws, &["rev-parse", "HEAD^{tree}"])),
        "the index's cache tree was not left stale by `{subject}`"
    );
}

async fn session(test: &str) -> Option<(tempfile::TempDir, Client)> {
    if skip(test, Need::Namespaces) {
        return None;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_tree(ws.path());
    let (client, _) = connect_with_env(ws.path(), &[EXPORT_MISSING]).await;
    Some((ws, client))
}

const COMMIT: &str = "git -c user.name=a -c user.email=a@example.invalid commit -q";

/// `command` in one call, which must be refused with the operator's branch where it was: the
/// refusal's text.
async fn refused_and_unmoved(client: &Client, ws: &Path, command: &str) -> String {
    let before = stdout(host_git(ws, &["rev-parse", "HEAD"]));
    let out = shell(client, command).await;
    assert!(denied(&out), "{}", out.1);
    assert_eq!(
        stdout(host_git(ws, &["rev-parse", "HEAD"])),
        before,
        "the operator's branch did not move"
    );
    out.1.to_string()
}

/// `change` then `git commit -am <subject>` in one call, which must succeed (with the
/// confined export simulated missing, only the server's own import can bring it), and the
/// operator's repository checked after it.
async fn commit_imported(client: &Client, ws: &Path, change: &str, subject: &str) {
    let out = shell(client, &format!("{change} && {COMMIT} -am '{subject}'")).await;
    assert!(!out.0, "`{subject}`: {}", out.1);
    assert_operator_consistent(ws, subject);
}

#[cordon_test::test]
async fn ordinary_commits_are_imported_by_the_server_itself() {
    let Some((ws, client)) = session("ordinary_commits_are_imported_by_the_server_itself").await
    else {
        return;
    };
    let ws = ws.path();
    let steps: [(&str, &str); 5] = [
        ("echo more >> src/a/f3.txt", "one file"),
        (
            "mkdir -p src/c/deep && echo new > src/c/deep/n.txt && git rm -q docs/f0.txt \
             && chmod +x src/b/f1.txt && git add -A",
            "a new directory, a removal, a mode",
        ),
        (
            "git rm -q -r docs && echo file > docs && git add docs",
            "a directory becomes a file",
        ),
        (
            "echo a >> src/a/f0.txt && git add -A && git commit -qm first -- src/a \
             && echo b >> src/b/f0.txt && git add -A",
            "two commits in one call",
        ),
        (
            "git checkout -q -b agent && echo x >> src/a/f9.txt && git add -A",
            "on a new branch",
        ),
    ];
    for (change, subject) in steps {
        commit_imported(&client, ws, change, subject).await;
    }
    let content = stdout(host_git(ws, &["show", "HEAD:src/c/deep/n.txt"]));
    assert_eq!(content, "new");
    assert_eq!(
        stdout(host_git(ws, &["rev-parse", "--abbrev-ref", "HEAD"])),
        "agent"
    );
    // The operator's own `git status` rewrites the index (it refreshes what cordon left
    // unhashed), so cordon no longer knows its tree: the next import asks the index.
    stdout(host_git(ws, &["status"]));
    commit_imported(&client, ws, "echo y >> src/b/f2.txt", "after-status").await;
    // The operator's next commit on the host records exactly its own change.
    std::fs::write(ws.join("src/a/f5.txt"), "operator\n").unwrap();
    for args in [
        &["add", "src/a/f5.txt"][..],
        &["commit", "-qm", "operator's"],
    ] {
        stdout(host_git(ws, args));
    }
    assert_eq!(
        stdout(host_git(ws, &["diff", "--name-only", "HEAD~1", "HEAD"])),
        "src/a/f5.txt"
    );
}

#[cordon_test::test]
async fn an_operator_index_without_a_hash_stays_so() {
    let Some((ws, client)) = session("an_operator_index_without_a_hash_stays_so").await else {
        return;
    };
    let ws = ws.path();
    stdout(host_git(ws, &["config", "index.skipHash", "true"]));
    commit_imported(&client, ws, "echo z >> docs/f1.txt", "skip").await;
    let index = std::fs::read(ws.join(".git/index")).unwrap();
    assert_eq!(
        &index[index.len() - 20..],
        &[0u8; 20],
        "git's own choice is kept"
    );
}

/// Each change the server's checks do not vouch for is left to git run confined (here
/// refused, the confined export being simulated missing), and the operator's branch stays.
#[cordon_test::test]
async fn what_the_servers_checks_do_not_vouch_for_is_left_to_git() {
    if skip(
        "what_the_servers_checks_do_not_vouch_for_is_left_to_git",
        Need::Namespaces,
    ) {
        return;
    }
    let cases = [
        (
            "a .gitmodules file",
            "printf '[x]\\n' > .gitmodules && git add .gitmodules",
        ),
        (
            "a .gitattributes file",
            "echo '* text' > .gitattributes && git add -A",
        ),
        (
            "a new symbolic link",
            "ln -s src/a/f1.txt link && git add link",
        ),
        ("a name with a tilde", "echo x > 'notes~' && git add -A"),
        (
            "a non-ASCII name",
            "echo x > \"$(printf '\\342\\200\\214.git')\" && git add -A",
        ),
        (
            "packed objects",
            "echo p >> src/a/f1.txt && git add -A && git commit -qm p && git gc -q",
        ),
        (
            "directories 300 deep",
            "d=$(printf 'd/%.0s' $(seq 300)) && mkdir -p $d && echo x > ${d}f && git add -A",
        ),
        (
            "a merge",
            "git checkout -q -b side && echo s >> src/b/f4.txt && git commit -qam s \
             && git checkout -q - && echo m >> src/a/f4.txt && git commit -qam m \
             && git merge -q --no-edit side",
        ),
    ];
    for (what, change) in cases {
        let ws = tempfile::tempdir().unwrap();
        operator_tree(ws.path());
        let (client, _) = connect_with_env(ws.path(), &[EXPORT_MISSING]).await;
        let text = refused_and_unmoved(
            &client,
            ws.path(),
            &format!("{change} && {{ git diff --cached --quiet || {COMMIT} -m '{what}'; }}"),
        )
        .await;
        assert!(
            text.contains("simulated missing"),
            "{what} was left to git: {text}"
        );
        client.cancel().await.ok();
    }
}

#[cordon_test::test]
async fn a_new_gitlink_is_refused_by_the_servers_own_checks() {
    let Some((ws, client)) = session("a_new_gitlink_is_refused_by_the_servers_own_checks").await
    else {
        return;
    };
    let text = refused_and_unmoved(
        &client,
        ws.path(),
        &format!(
            "git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),vendor/lib \
             && {COMMIT} -m link"
        ),
    )
    .await;
    assert!(text.contains("became a gitlink"), "{text}");
    assert!(!text.contains("simulated missing"), "{text}");
}

/// A loose object the sandbox rewrote after git wrote it (its content no longer hashes to
/// its name) is not vouched for: the server leaves it to git, which refuses it too.
#[cordon_test::test]
async fn a_loose_object_that_does_not_hash_to_its_name_is_never_imported() {
    let Some((ws, client)) =
        session("a_loose_object_that_does_not_hash_to_its_name_is_never_imported").await
    else {
        return;
    };
    let text = refused_and_unmoved(
        &client,
        ws.path(),
        &format!(
            "echo good >> src/a/f7.txt && {COMMIT} -am forged \
             && blob=$(git rev-parse HEAD:src/a/f7.txt) \
             && evil=$(echo evil | git hash-object -w --stdin) \
             && f=.git/objects/$(echo $blob | cut -c1-2)/$(echo $blob | cut -c3-) \
             && e=.git/objects/$(echo $evil | cut -c1-2)/$(echo $evil | cut -c3-) \
             && chmod u+w $f && cp $e $f"
        ),
    )
    .await;
    assert!(text.contains("simulated missing"), "{text}");
    let fsck = host_git(ws.path(), &["fsck", "--no-dangling"]);
    assert!(fsck.status.success(), "{fsck:?}");
}

/// A FIFO a call puts where git keeps a file of the shadow is never opened for reading by
/// the server (that open would wait for a writer, with the repository's import and every
/// later call's behind it): at `HEAD` or `packed-refs` the state is refused at once, at the
/// index it is no index (nothing of it imported).
#[cordon_test::test]
async fn a_fifo_where_git_keeps_a_file_does_not_hang_the_import() {
    let Some((ws, client)) =
        session("a_fifo_where_git_keeps_a_file_does_not_hang_the_import").await
    else {
        return;
    };
    let before = stdout(host_git(ws.path(), &["rev-parse", "HEAD"]));
    for (name, refused) in [("packed-refs", true), ("HEAD", true), ("index", false)] {
        let plant = format!(
            "cp .git/{name} .cordon-test-kept 2>/dev/null; rm -f .git/{name} && mkfifo .git/{name}"
        );
        let out = tokio::time::timeout(std::time::Duration::from_secs(30), shell(&client, &plant))
            .await
            .unwrap_or_else(|_| panic!("a FIFO at .git/{name} hung the import"));
        assert_eq!(denied(&out), refused, "{name}: {}", out.1);
        if refused {
            assert!(out.1.to_string().contains(name), "{}", out.1);
        }
        let restore = format!(
            "rm .git/{name} && {{ ! [ -e .cordon-test-kept ] || mv .cordon-test-kept .git/{name}; }}"
        );
        let out = shell(&client, &restore).await;
        assert!(!out.0, "{}", out.1);
    }
    assert_eq!(stdout(host_git(ws.path(), &["rev-parse", "HEAD"])), before);
}
