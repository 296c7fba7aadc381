//! The launcher, exec'd by the server: checks that its parent is still the server, reads and
//! checks the plan, takes cordon's login uid (when the plan says), unshares the namespaces and
//! forks PID 1, then only waits. Its steps, in
//! order, as a failure names them (`FromInit::Failed { stage }`): `parent check`, `read plan`,
//! `parse plan`, `plan`, `join network`, `unshare`, `setgroups`, `uid_map`, `gid_map`, `pipe`,
//! `fork`.

use super::*;

pub(super) fn launcher(control: &OwnedFd) -> Result<i32, StageError> {
    // The death signal was armed before exec; if the server died in between, it never fires.
    let expected = std::env::var(PARENT_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok());
    let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    if expected.is_none() || parent != expected {
        return Err(("parent check", "the server is gone".into()));
    }
    let mut text = Vec::new();
    stage(
        "read plan",
        io::stdin().take(MAX_PLAN).read_to_end(&mut text),
    )?;
    let plan: InitPlan = stage("parse plan", serde_json::from_slice(&text))?;
    if plan.version != wire::PROTOCOL_VERSION {
        return Err((
            "plan",
            format!("version {} is not {}", plan.version, wire::PROTOCOL_VERSION),
        ));
    }
    if let Some(loginuid) = plan.loginuid {
        // Before anything is forked: a task's audit context is decided at its fork, by its
        // login uid then. Not fatal: without it, denials go unrecorded, as with audit off.
        if let Err(e) = std::fs::write("/proc/self/loginuid", loginuid.to_string()) {
            eprintln!("cordon sandbox init: cannot take cordon's login uid: {e}");
        }
    }
    let mut flags =
        libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    if plan.isolate_network && plan.join_network {
        // The first init's namespace, before anything else is unshared (entering it needs
        // CAP_SYS_ADMIN here, which the server only asks for when it runs as root).
        // SAFETY: setns and close take a descriptor the server placed and a flag.
        unsafe {
            if libc::setns(NETNS_FD, libc::CLONE_NEWNET) != 0 {
                return Err(("join network", io::Error::last_os_error().to_string()));
            }
            libc::close(NETNS_FD);
        }
    } else if plan.isolate_network {
        flags |= libc::CLONE_NEWNET;
    }
    if plan.user_namespace.is_some() {
        flags |= libc::CLONE_NEWUSER;
    }
    // SAFETY: unshare takes only flags.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(("unshare", io::Error::last_os_error().to_string()));
    }
    if let Some((uid, gid)) = plan.user_namespace {
        stage("setgroups", std::fs::write("/proc/self/setgroups", "deny"))?;
        stage(
            "uid_map",
            std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")),
        )?;
        stage(
            "gid_map",
            std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")),
        )?;
    }
    let (alive_read, alive_write) = stage(
        "pipe",
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC),
    )?;
    // SAFETY: this process is single-threaded (no runtime was started in this subcommand), so
    // the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(("fork", io::Error::last_os_error().to_string())),
        0 => {
            drop(alive_write);
            pid1(&plan, control, alive_read)
        }
        child => {
            drop(alive_read);
            // Keep `alive_write` open for as long as we live: PID 1 watches it.
            let _keep = alive_write;
            // Only PID 1 talks to the server; the socket must close when PID 1 ends.
            // SAFETY: closing our copy of the control descriptor; `control` is never used
            // again in this process (we only wait below).
            unsafe {
                libc::close(control.as_raw_fd());
            }
            let mut status = 0;
            loop {
                // SAFETY: waitpid writes the status into a live local.
                let r = unsafe { libc::waitpid(child, &mut status, 0) };
                if r == child
                    || (r == -1 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR))
                {
                    break;
                }
            }
            std::process::exit(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                1
            });
        }
    }
}
