//! A `cordon serve` driven by hand-written JSON-RPC lines, for tests that need what an MCP
//! client library hides: the server's pid (to signal it mid-call), descriptors it inherits
//! from a shell (`exec 7>file`), its environment, and calls left pending while it dies.

#![allow(dead_code)] // each test module uses a different subset

use crate::common::{CORDON, HANG_GUARD};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

pub struct StdioServer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    next_id: u64,
    /// Responses read while waiting for another one.
    early: Vec<Value>,
    /// Notifications (progress, log messages) read while waiting for responses.
    notes: Vec<Value>,
    /// Requests the server sent the client (`elicitation/create`), not yet taken.
    asked: Vec<Value>,
    /// The server's answer to `initialize`.
    pub initialize: Value,
}

impl StdioServer {
    /// `cordon serve --workspace ws [args]`, started through `sh -c '<prefix> exec cordon …'`
    /// so the shell can hand it descriptors (`exec 7>>file;`); `env` is added to its
    /// environment. The initialize handshake is done before this returns.
    pub fn start(ws: &Path, args: &[&str], shell_prefix: &str, env: &[(&str, &str)]) -> Self {
        Self::start_declaring(ws, args, shell_prefix, env, json!({}))
    }

    /// [`Self::start`] for a client that declares `capabilities` at `initialize` (e.g.
    /// `{"elicitation": {"form": {}}}`).
    pub fn start_declaring(
        ws: &Path,
        args: &[&str],
        shell_prefix: &str,
        env: &[(&str, &str)],
        capabilities: Value,
    ) -> Self {
        let mut script = format!("{shell_prefix} exec \"$0\" serve --workspace \"$1\"");
        for i in 0..args.len() {
            script.push_str(&format!(" \"${}\"", i + 2));
        }
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script).arg(CORDON).arg(ws).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn cordon serve");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        let mut server = Self {
            stdin: child.stdin.take(),
            child,
            lines,
            next_id: 1,
            early: Vec::new(),
            notes: Vec::new(),
            asked: Vec::new(),
            initialize: Value::Null,
        };
        let id = server.send_request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                   "clientInfo": {"name": "cordon-it", "version": "1"}}),
        );
        let init = server
            .response(id, HANG_GUARD)
            .expect("cordon serve answers initialize");
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        server.initialize = init;
        server.notify("notifications/initialized");
        server
    }

    /// The notifications seen so far (progress, `notifications/message`), in order: every
    /// line already sent is read first (so a repeated notification is counted, not left
    /// unread), then it waits up to `within` for one with `method` if none has come yet.
    pub fn notifications(&mut self, method: &str, within: Duration) -> Vec<Value> {
        while let Ok(v) = self.lines.try_recv() {
            self.keep(v);
        }
        let deadline = Instant::now() + within;
        while !self.notes.iter().any(|n| n["method"] == method) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => self.keep(v),
                Err(_) => break,
            }
        }
        self.notes.clone()
    }

    /// A line read off-turn: a notification, or an answer kept for whoever waits for it.
    fn keep(&mut self, v: Value) {
        if v.get("method").is_some() && v.get("id").is_none() {
            self.notes.push(v);
        } else if v.get("method").is_some() {
            self.asked.push(v);
        } else {
            self.early.push(v);
        }
    }

    /// The next request the server sent the client with `method` (e.g.
    /// `elicitation/create`), waiting up to `within`.
    pub fn server_request(&mut self, method: &str, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(i) = self.asked.iter().position(|v| v["method"] == method) {
                return Some(self.asked.remove(i));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => self.keep(v),
                Err(_) => return None,
            }
        }
    }

    /// Answers the server's request `id` with `result`.
    pub fn reply(&mut self, id: &Value, result: Value) {
        self.write_line(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    /// The pid of `cordon serve` itself (the shell exec'd into it).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn write_line(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).expect("serialize");
        line.push(b'\n');
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(&line).expect("write to cordon serve");
        stdin.flush().expect("flush");
    }

    pub fn notify(&mut self, method: &str) {
        self.write_line(&json!({"jsonrpc": "2.0", "method": method}));
    }

    /// Sends a request and returns its id without waiting.
    pub fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.write_line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Starts a `tools/call` and returns its id.
    pub fn start_call(&mut self, tool: &str, arguments: Value) -> u64 {
        self.send_request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// The response with `id`, or None when the server's stdout ended or `within` passed.
    pub fn response(&mut self, id: u64, within: Duration) -> Option<Value> {
        if let Some(i) = self
            .early
            .iter()
            .position(|v| v["id"] == id && v.get("method").is_none())
        {
            return Some(self.early.remove(i));
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) if v["id"] == id && v.get("method").is_none() => return Some(v),
                Ok(v) if v.get("method").is_some() && v.get("id").is_some() => self.asked.push(v),
                Ok(v) if v.get("id").is_some() && v.get("method").is_none() => self.early.push(v),
                Ok(v) if v.get("method").is_some() && v.get("id").is_none() => self.notes.push(v),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// A whole tool call: its `result` (structured content and text), failing the test on a
    /// protocol error or a hang.
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let id = self.start_call(tool, arguments);
        let response = self
            .response(id, HANG_GUARD)
            .unwrap_or_else(|| panic!("no answer to {tool} within {HANG_GUARD:?}"));
        response
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{tool} failed at the protocol level: {response}"))
    }

    /// Closes the server's stdin: the client going away.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends `signal` to the server process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child; no memory is involved.
        let ret = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(ret, 0, "kill({}, {signal})", self.pid());
    }

    /// Waits (bounded) for the server to exit.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The structured content of a tool result.
pub fn structured(result: &Value) -> &Value {
    result
        .get("structuredContent")
        .unwrap_or_else(|| panic!("no structuredContent: {result}"))
}

/// The first text block of a tool result.
pub fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or("")
}

/// Polls `check` every 50 ms until it holds or `within` passes; returns whether it held.
pub fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
