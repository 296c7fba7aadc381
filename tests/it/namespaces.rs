//! What the sandbox init's namespaces and the seccomp additions stop, each attempted for real:
//! the host's Unix sockets (pathname and abstract), metadata changes outside every grant, a
//! setuid file made inside the workspace, the host's System V IPC objects, the host's processes
//! in /proc, and the side doors around TCP port rules (TCP Fast Open, MPTCP). Also the
//! fallback where namespaces cannot be had (`CORDON_SIMULATE_MISSING=namespaces`): seccomp
//! refuses Unix sockets and SysV IPC instead, and every report says the level is weaker.
//!
//! Each attack runs in its own `cordon exec`; where cheap, the same `cordon probe` runs
//! unconfined first to show the action works on this machine, so its refusal under cordon is
//! the confinement's doing.

use crate::common::{
    CORDON, HANG_GUARD, Need, Sandbox, path_str, run_guarded, skip, skip_msg, unconfined,
    unique_token,
};
use crate::stdio_server::{StdioServer, structured, text};
use cordon::testing::confine::selftest::HostSysvObjects;
use serde_json::json;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::Path;
use std::process::Command;

const PYTHON: &str = "/usr/bin/python3";

fn have_python(test: &str) -> bool {
    if Path::new(PYTHON).exists() {
        return true;
    }
    skip_msg(test, "no /usr/bin/python3 on this machine");
    false
}

/// Asserts a `cordon probe` run (confined) reported a refusal (exit 1).
fn assert_refused(run: &crate::common::Run, what: &str) {
    assert_eq!(run.code(), 1, "{what} was not refused: {run:?}");
    assert!(run.stdout.contains("refused"), "{what}: {run:?}");
}

fn assert_control_allowed(run: &crate::common::Run, what: &str) {
    assert_eq!(
        run.code(),
        0,
        "control: {what} works unconfined on this machine: {run:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Unix sockets of the host
// ---------------------------------------------------------------------------------------

#[cordon_test::test]
fn host_pathname_unix_socket_cannot_be_connected_to() {
    let test = "host_pathname_unix_socket_cannot_be_connected_to";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let path = sb.outside().join("host.sock");
    let _listener = UnixListener::bind(&path).expect("bind a host socket");
    let path = path_str(&path);

    let control = unconfined(&[CORDON, "probe", "unix-connect", path]);
    assert_control_allowed(&control, "connecting to a pathname socket");

    assert_refused(
        &sb.probe("unix-connect", Some(path)),
        "connect to a host socket",
    );
    if have_python(test) {
        let script = format!(
            "import socket\ntry:\n    socket.socket(socket.AF_UNIX).connect({path:?})\n    print('CONNECTED')\nexcept OSError as e:\n    print('refused', e)"
        );
        let run = sb.exec(&[], &["python3", "-c", &script]);
        assert!(
            run.stdout.starts_with("refused"),
            "python reached the host socket: {run:?}"
        );
    }
}

#[cordon_test::test]
fn host_abstract_unix_socket_cannot_be_connected_to() {
    let test = "host_abstract_unix_socket_cannot_be_connected_to";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let name = format!("cordon-test-abstract-{}", unique_token());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = UnixListener::bind_addr(&addr).expect("bind an abstract socket");
    let target = format!("@{name}");

    let control = unconfined(&[CORDON, "probe", "unix-connect", &target]);
    assert_control_allowed(&control, "connecting to an abstract socket");

    let sb = Sandbox::new();
    // The default policy has no network: the init's own network namespace has other
    // abstract names. A TCP policy shares the host's network namespace, so Landlock's
    // abstract-socket scope must stop it there.
    assert_refused(
        &sb.probe("unix-connect", Some(&target)),
        "connect to a host abstract socket (default policy)",
    );
    let tcp = tcp_probe_policy(&sb, 1);
    let run = sb.exec(
        &["--policy", &tcp],
        &[CORDON, "probe", "unix-connect", &target],
    );
    assert_refused(&run, "connect to a host abstract socket (TCP policy)");
}

// ---------------------------------------------------------------------------------------
// Metadata and setuid files
// ---------------------------------------------------------------------------------------

fn snapshot(path: &Path) -> (u32, u32, u32, i64, i64, Option<Vec<u8>>) {
    let m = std::fs::symlink_metadata(path).unwrap();
    let mut buf = [0u8; 64];
    let xattr = rustix::fs::getxattr(path, "user.cordon-probe", &mut buf[..])
        .ok()
        .map(|n| buf[..n].to_vec());
    (m.mode(), m.uid(), m.gid(), m.mtime(), m.mtime_nsec(), xattr)
}

#[cordon_test::test]
fn metadata_of_a_file_outside_every_grant_cannot_change() {
    let test = "metadata_of_a_file_outside_every_grant_cannot_change";
    if skip(test, Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let target = sb.outside().join("owned-by-us");
    std::fs::write(&target, "x").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    let t = path_str(&target);

    // Control on a twin: every way works unconfined (the probe restores the mode).
    let twin = sb.outside().join("twin");
    std::fs::write(&twin, "x").unwrap();
    let control = unconfined(&[CORDON, "probe", "metadata", path_str(&twin)]);
    assert_control_allowed(&control, "chmod/chown/utimensat/setxattr");

    let before = snapshot(&target);
    assert_refused(&sb.probe("metadata", Some(t)), "metadata changes outside");
    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            &format!(
                "chmod 777 {t}; chown 0:0 {t}; touch -d 2001-01-01 {t}; \
                 setfattr -n user.x -v 1 {t} 2>/dev/null; true"
            ),
        ],
    );
    if Path::new(PYTHON).exists() {
        let script = format!(
            "import os\nfor f in (lambda: os.chmod({t:?}, 0o777), lambda: os.utime({t:?}, (0, 0)), lambda: os.setxattr({t:?}, 'user.x', b'1')):\n    try:\n        f(); print('CHANGED')\n    except OSError as e:\n        print('refused', e)"
        );
        let py = sb.exec(&[], &["python3", "-c", &script]);
        assert!(!py.stdout.contains("CHANGED"), "{py:?}");
    }
    assert_eq!(snapshot(&target), before, "metadata changed: {run:?}");
}

#[cordon_test::test]
fn metadata_of_granted_system_files_cannot_change() {
    if skip(
        "metadata_of_granted_system_files_cannot_change",
        Need::Namespaces,
    ) {
        return;
    }
    // /etc is granted read-only: in the view it is a read-only mount, so not even its owner
    // (root, here) changes a mode or a timestamp. No unconfined control: it would change the
    // host's /etc.
    let before = snapshot(Path::new("/etc/hostname"));
    let sb = Sandbox::new();
    assert_refused(
        &sb.probe("metadata", Some("/etc/hostname")),
        "metadata changes of /etc/hostname",
    );
    assert_eq!(snapshot(Path::new("/etc/hostname")), before);
}

fn special_bits(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o7000
}

#[cordon_test::test]
fn setuid_bit_or_file_capability_cannot_be_set_on_a_copied_shell() {
    let test = "setuid_bit_or_file_capability_cannot_be_set_on_a_copied_shell";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    // Control: unconfined, every one of the four syscalls sets the bit.
    let twin = sb.outside().join("sh-copy");
    std::fs::copy("/bin/sh", &twin).unwrap();
    let control = unconfined(&[CORDON, "probe", "setuid-chmod", path_str(&twin)]);
    assert_control_allowed(&control, "chmod 4755");
    assert_ne!(special_bits(&twin), 0, "control left no setuid bit");

    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            "cp /bin/sh ./x && chmod 4755 ./x; chmod u+s ./x; chmod g+s ./x; stat -c %a ./x",
        ],
    );
    assert!(
        run.stderr.contains("Operation not permitted"),
        "chmod 4755 was not refused: {run:?}"
    );
    assert_eq!(special_bits(&sb.ws().join("x")), 0, "{run:?}");

    std::fs::copy("/bin/sh", sb.ws().join("y")).unwrap();
    assert_refused(
        &sb.probe("setuid-chmod", Some("y")),
        "chmod/fchmod/fchmodat/fchmodat2 with S_ISUID, setxattr security.capability",
    );
    assert_eq!(special_bits(&sb.ws().join("y")), 0);
    assert!(
        rustix::fs::getxattr(sb.ws().join("y"), "security.capability", &mut [0u8; 64][..]).is_err(),
        "a file capability was set"
    );
    if have_python(test) {
        let script = "import os\nfor m in (0o4755, 0o2755, 0o6777):\n    try:\n        os.chmod('z', m); print('SET')\n    except OSError as e:\n        print('refused', e)\n    try:\n        os.chmod('z', m, dir_fd=os.open('.', os.O_RDONLY)); print('SET')\n    except OSError as e:\n        print('refused', e)";
        std::fs::copy("/bin/sh", sb.ws().join("z")).unwrap();
        let py = sb.exec(&[], &["python3", "-c", script]);
        assert!(!py.stdout.contains("SET"), "{py:?}");
        assert_eq!(special_bits(&sb.ws().join("z")), 0, "{py:?}");
    }
    // An ordinary chmod still works.
    let run = sb.exec(&[], &["chmod", "700", "y"]);
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(
        std::fs::metadata(sb.ws().join("y")).unwrap().mode() & 0o7777,
        0o700
    );
}

#[cordon_test::test]
fn strict_read_only_workspace_refuses_chmod() {
    if skip(
        "strict_read_only_workspace_refuses_chmod",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("keep"), "x").unwrap();
    std::fs::set_permissions(sb.ws().join("keep"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let file_before = snapshot(&sb.ws().join("keep"));
    let dir_before = snapshot(sb.ws());
    let run = sb.exec(
        &["--policy", "strict"],
        &[
            "sh",
            "-c",
            "chmod 000 keep; chmod 000 .; touch -d 2001-01-01 keep; echo done",
        ],
    );
    assert_eq!(run.stdout, "done\n", "{run:?}");
    assert!(run.stderr.contains("Read-only file system"), "{run:?}");
    assert_eq!(snapshot(&sb.ws().join("keep")), file_before, "{run:?}");
    assert_eq!(snapshot(sb.ws()), dir_before, "{run:?}");
}

// ---------------------------------------------------------------------------------------
// System V IPC
// ---------------------------------------------------------------------------------------

#[cordon_test::test]
fn host_sysv_segment_and_queue_are_invisible() {
    let test = "host_sysv_segment_and_queue_are_invisible";
    if skip(test, Need::Namespaces) {
        return;
    }
    let secret = format!("cordon-sysv-secret-{}", unique_token());
    let ipc = HostSysvObjects::create(secret.as_bytes()).expect("make host SysV objects");
    let (shm, msq) = (ipc.shm_id.to_string(), ipc.msq_id.to_string());

    assert_control_allowed(
        &unconfined(&[CORDON, "probe", "shm-read", &shm]),
        "attaching the segment",
    );
    assert_control_allowed(
        &unconfined(&[CORDON, "probe", "msg-read", &msq]),
        "reading the queue",
    );

    let sb = Sandbox::new();
    assert_refused(
        &sb.probe("shm-read", Some(&shm)),
        "attaching a host segment",
    );
    assert_refused(&sb.probe("msg-read", Some(&msq)), "reading a host queue");
    if Path::new("/usr/bin/ipcs").exists() {
        let run = sb.exec(&[], &["ipcs", "-m", "-q"]);
        assert_eq!(run.code(), 0, "{run:?}");
        // Only headers: no row starts with a key.
        let rows: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("0x")).collect();
        assert!(rows.is_empty(), "host IPC objects listed inside: {run:?}");
    }
    if have_python(test) {
        let script = format!(
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\na = libc.shmat({shm}, None, 0o10000)\nif a in (None, ctypes.c_void_p(-1).value):\n    print('refused', os.strerror(ctypes.get_errno()))\nelse:\n    print('READ', ctypes.string_at(a, 64))"
        );
        let py = sb.exec(&[], &["python3", "-c", &script]);
        assert!(py.stdout.starts_with("refused"), "{py:?}");
        assert!(!py.output().contains(&secret), "{py:?}");
    }
}

// ---------------------------------------------------------------------------------------
// /proc
// ---------------------------------------------------------------------------------------

#[cordon_test::test]
fn proc_shows_no_host_process() {
    if skip("proc_shows_no_host_process", Need::Namespaces) {
        return;
    }
    let token = format!("cordon-test-proc-{}", unique_token());
    // Control: unconfined, the probe finds the shell whose command line carries the token.
    let control = unconfined(&[
        "/bin/sh",
        "-c",
        &format!("{CORDON} probe proc-visible {token}; exit $?"),
    ]);
    assert_control_allowed(&control, "finding a host process in /proc");

    let sb = Sandbox::new();
    // The host-side `cordon exec` carries the token in its own command line.
    assert_refused(
        &sb.probe("proc-visible", Some(&token)),
        "seeing the host's cordon process",
    );
    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            "ls /proc | grep -c '^[0-9]'; tr '\\0' ' ' < /proc/1/cmdline",
        ],
    );
    let mut lines = run.stdout.lines();
    let pids: usize = lines
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{run:?}"));
    // The init, its warm slots and this pipeline; the host has hundreds.
    assert!(pids <= 16, "/proc shows {pids} processes: {run:?}");
    let init = lines.next().unwrap_or_default();
    assert!(
        init.contains("__sandbox-init"),
        "pid 1 is not cordon's init: {run:?}"
    );
}

// ---------------------------------------------------------------------------------------
// TCP port rules
// ---------------------------------------------------------------------------------------

/// A policy like the probe policy with the `tcp` seccomp profile and one allowed port.
fn tcp_probe_policy(sb: &Sandbox, allowed: u16) -> String {
    let probe = std::fs::read_to_string(sb.probe_policy()).unwrap();
    sb.policy(
        "tcp.toml",
        &format!(
            "{probe}\n[network]\ntcp_connect = [{allowed}]\n\n[sandbox]\nseccomp_profile = \"tcp\"\n"
        ),
    )
}

#[cordon_test::test]
fn tcp_port_rules_have_no_fast_open_or_mptcp_side_door() {
    let test = "tcp_port_rules_have_no_fast_open_or_mptcp_side_door";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let allowed_port = allowed.local_addr().unwrap().port();
    let forbidden = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = forbidden.local_addr().unwrap().port().to_string();
    let sb = Sandbox::new();
    let policy = tcp_probe_policy(&sb, allowed_port);
    let probe =
        |name: &str, arg: &str| sb.exec(&["--policy", &policy], &[CORDON, "probe", name, arg]);

    // The policy's port works: TCP is really on.
    let ok = probe("tcp-connect", &allowed_port.to_string());
    assert_eq!(ok.code(), 0, "the allowed port is reachable: {ok:?}");

    assert_control_allowed(
        &unconfined(&[CORDON, "probe", "tcp-connect", &port]),
        "plain connect",
    );
    assert_refused(
        &probe("tcp-connect", &port),
        "plain connect to a port not allowed",
    );

    assert_control_allowed(
        &unconfined(&[CORDON, "probe", "tcp-fastopen", &port]),
        "TCP Fast Open",
    );
    assert_refused(
        &probe("tcp-fastopen", &port),
        "sendto/sendmsg/sendmmsg(MSG_FASTOPEN)",
    );

    let mptcp_control = unconfined(&[CORDON, "probe", "mptcp", &port]);
    if mptcp_control.code() == 0 {
        assert_refused(&probe("mptcp", &port), "an MPTCP socket");
    } else {
        skip_msg(
            test,
            &format!("MPTCP part: this kernel has no MPTCP ({mptcp_control:?})"),
        );
    }

    if have_python(test) {
        let script = format!(
            "import socket\ndef t(name, f):\n    try:\n        f(); print(name, 'CONNECTED')\n    except OSError as e:\n        print(name, 'refused', e)\n\
             t('connect', lambda: socket.create_connection(('127.0.0.1', {port}), timeout=5))\n\
             t('fastopen', lambda: socket.socket().sendto(b'x', 0x20000000, ('127.0.0.1', {port})))\n\
             t('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(('127.0.0.1', {port})))\n\
             t('mptcp6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, 262).connect(('::1', {port})))"
        );
        let py = sb.exec(&["--policy", &policy], &["python3", "-c", &script]);
        assert_eq!(py.code(), 0, "{py:?}");
        assert!(!py.stdout.contains("CONNECTED"), "{py:?}");
    }
    drop(allowed);
}

// ---------------------------------------------------------------------------------------
// The sandbox's own loopback
// ---------------------------------------------------------------------------------------

/// A server and its client in one call, on port 0, IPv4 and IPv6, plus NETLINK_ROUTE (what
/// `ip addr` uses); other netlink families and raw sockets stay refused.
const LOOPBACK_SCRIPT: &str = r#"
import socket, threading, urllib.request
srv = socket.create_server(('127.0.0.1', 0))
port = srv.getsockname()[1]
def serve():
    c, _ = srv.accept(); buf = b''
    while b'\r\n\r\n' not in buf:
        buf += c.recv(4096)
    c.sendall(b'HTTP/1.0 200 OK\r\n\r\nloopback-ok'); c.close()
threading.Thread(target=serve).start()
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
print(opener.open('http://127.0.0.1:%d/' % port, timeout=10).read().decode())
s6 = socket.create_server(('::1', 0), family=socket.AF_INET6)
socket.create_connection(('::1', s6.getsockname()[1]), timeout=5).close(); print('v6-ok')
socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close(); print('netlink-route-ok')
for name, args in [('netlink-audit', (socket.AF_NETLINK, socket.SOCK_RAW, 9)), ('raw', (socket.AF_INET, socket.SOCK_RAW, 1)), ('packet', (17, socket.SOCK_RAW, 0))]:
    try:
        socket.socket(*args); print(name, 'ALLOWED')
    except OSError as e:
        print(name, 'refused', e.errno)
"#;

#[cordon_test::test]
fn a_server_and_its_client_in_one_call_work_on_the_sandbox_loopback() {
    let test = "a_server_and_its_client_in_one_call_work_on_the_sandbox_loopback";
    if skip(test, Need::Namespaces) || !have_python(test) {
        return;
    }
    let sb = Sandbox::new();
    let eperm = libc::EPERM;
    let expected = format!(
        "loopback-ok\nv6-ok\nnetlink-route-ok\nnetlink-audit refused {eperm}\nraw refused {eperm}\npacket refused {eperm}\n"
    );
    for policy in ["default", "dev"] {
        let run = sb.exec(&["--policy", policy], &[PYTHON, "-c", LOOPBACK_SCRIPT]);
        assert_eq!(run.code(), 0, "{policy}: {run:?}");
        assert_eq!(run.stdout, expected, "{policy}: {run:?}");
    }
}

#[cordon_test::test]
fn the_sandbox_loopback_is_not_the_hosts() {
    let test = "the_sandbox_loopback_is_not_the_hosts";
    if skip(test, Need::Namespaces) || !have_python(test) {
        return;
    }
    // A host server on 127.0.0.1 and a host UDP receiver: inet sockets are allowed in the
    // sandbox's namespace, but its 127.0.0.1 is its own, and nothing else is routed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let (tcp_port, udp_port) = (
        listener.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port(),
    );
    let script = format!(
        r#"
import socket
for addr in [('127.0.0.1', {tcp_port}), ('10.255.255.1', 80), ('1.1.1.1', 443)]:
    try:
        socket.create_connection(addr, timeout=3); print('CONNECTED', addr)
    except OSError as e:
        print('refused')
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(b'x', ('127.0.0.1', {udp_port}))
try:
    s.sendto(b'x', ('1.1.1.1', 53)); print('UDP OUT SENT')
except OSError:
    print('refused')
"#
    );
    let sb = Sandbox::new();
    for policy in ["default", "dev"] {
        let run = sb.exec(&["--policy", policy], &[PYTHON, "-c", &script]);
        assert_eq!(
            run.stdout, "refused\nrefused\nrefused\nrefused\n",
            "{policy}: {run:?}"
        );
        assert!(
            listener.accept().is_err(),
            "{policy}: reached the host's listener"
        );
        assert!(
            udp.recv_from(&mut [0u8; 8]).is_err(),
            "{policy}: a datagram reached the host's loopback"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The fallback: no namespaces
// ---------------------------------------------------------------------------------------

const SIMULATE: (&str, &str) = ("CORDON_SIMULATE_MISSING", "namespaces");

#[cordon_test::test]
fn without_namespaces_unix_sockets_and_sysv_ipc_are_refused() {
    let test = "without_namespaces_unix_sockets_and_sysv_ipc_are_refused";
    if skip(test, Need::LandlockSeccomp) || !have_python(test) {
        return;
    }
    let sb = Sandbox::new();
    let path = sb.outside().join("host.sock");
    let _listener = UnixListener::bind(&path).unwrap();
    let ipc = HostSysvObjects::create(b"cordon-fallback-secret").unwrap();
    let policy = sb.probe_policy();
    let with_env = |argv: &[&str]| {
        let mut cmd = sb.command(&["--policy", &policy], argv);
        cmd.env(SIMULATE.0, SIMULATE.1);
        sb.exec_cmd(cmd)
    };
    let run = with_env(&[CORDON, "probe", "unix-connect", path_str(&path)]);
    assert_refused(&run, "a Unix socket without namespaces");
    assert!(
        run.stderr.contains("cordon: enforcement reduced") && run.stderr.contains("NO namespaces"),
        "the weaker level is not said: {run:?}"
    );
    assert_refused(
        &with_env(&[CORDON, "probe", "shm-read", &ipc.shm_id.to_string()]),
        "shmat without namespaces",
    );
    let script = "import socket, ctypes, os\n\
        a, b = socket.socketpair(); a.send(b'pair'); print('socketpair', b.recv(4).decode())\n\
        try:\n    socket.socket(socket.AF_UNIX); print('unix ALLOWED')\nexcept OSError as e:\n    print('unix refused', e.errno)\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        print('shmget', libc.shmget(0, 4096, 0o1600), ctypes.get_errno())\n\
        print('msgget', libc.msgget(0, 0o1600), ctypes.get_errno())";
    let py = with_env(&["python3", "-c", script]);
    let eperm = libc::EPERM;
    assert_eq!(
        py.stdout,
        format!("socketpair pair\nunix refused {eperm}\nshmget -1 {eperm}\nmsgget -1 {eperm}\n"),
        "{py:?}"
    );
}

#[cordon_test::test]
fn without_namespaces_results_and_doctor_report_the_weaker_level() {
    let test = "without_namespaces_results_and_doctor_report_the_weaker_level";
    if skip(test, Need::Cgroups) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[SIMULATE]);
    let result = server.call("shell_exec", json!({"command": "echo hi"}));
    assert_eq!(structured(&result)["exit_code"], 0, "{result}");
    assert_eq!(structured(&result)["enforcement"], "reduced", "{result}");
    assert!(text(&result).contains("NO namespaces"), "{result}");
    let cell = server.call("code_interpreter", json!({"code": "6*7"}));
    assert_eq!(structured(&cell)["enforcement"], "reduced", "{cell}");
    drop(server);

    let mut cmd = Command::new(CORDON);
    cmd.args(["doctor", "--json"]).env(SIMULATE.0, SIMULATE.1);
    let run = run_guarded(cmd, HANG_GUARD);
    let report: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}): {run:?}"));
    assert_eq!(report["enforcement"]["namespaces"], false, "{run:?}");
    assert_eq!(report["enforcement"]["level"], "reduced", "{run:?}");
    // Doctor does not pretend: the promise only namespaces keep is reported broken.
    let proc_probe = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == "see a host process in /proc")
        .unwrap_or_else(|| panic!("no /proc probe: {run:?}"));
    assert_eq!(proc_probe["pass"], false, "{proc_probe}");
    assert_ne!(run.code(), 0, "doctor passed without namespaces: {run:?}");
}
