// cordon driven by the MCP Inspector CLI (@modelcontextprotocol/inspector-cli), the way a
// person checks a server by hand: `mcp-inspector-cli --method tools/call ... -- cordon serve`
// (build/index.js is the CLI itself; build/cli.js only launches it or the web UI).
// The Inspector validates results against outputSchema (it exits non-zero with -32602 when
// one does not fit) and prints schema warnings to stderr; both must stay clean, for good
// arguments and for each error kind. Run through tests/it/node_e2e.rs (`node --test`).
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { makeWorkspace, CORDON } from "./common.mjs";

const require = createRequire(import.meta.url);
const CLI = join(dirname(require.resolve("@modelcontextprotocol/inspector-cli/package.json")), "build", "index.js");
const { ws, policy } = makeWorkspace();

/// Runs the Inspector CLI once; returns the parsed JSON it printed.
function inspect(method, extra = []) {
  const run = spawnSync(
    process.execPath,
    // The target (command) comes first; its own options go after `--`.
    [CLI, CORDON, "serve", "--method", method, ...extra, "--", "--workspace", ws, "--policy", policy],
    // The CLI looks for its package.json relative to the working directory (then imports it
    // relative to itself), so it runs from its own build directory.
    { encoding: "utf8", timeout: 60_000, cwd: dirname(CLI) },
  );
  const where = `${method} ${extra.join(" ")}\nstdout: ${run.stdout}\nstderr: ${run.stderr}`;
  assert.equal(run.status, 0, where);
  assert.doesNotMatch(run.stderr, /unknown format|strict mode|does not match|-32602/i, where);
  return JSON.parse(run.stdout);
}

function toolCall(name, args) {
  const extra = ["--tool-name", name];
  for (const [k, v] of Object.entries(args)) {
    extra.push("--tool-arg", `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`);
  }
  return inspect("tools/call", extra);
}

function expectKind(result, kind) {
  const text = JSON.stringify(result);
  if (kind === null) {
    assert.ok(!result.isError, text);
  } else {
    assert.equal(result.isError, true, text);
    assert.equal(result.structuredContent.error.kind, kind, text);
  }
}

describe("Inspector CLI", () => {
  test("tools/list shows every tool with clean schemas", () => {
    const { tools } = inspect("tools/list");
    assert.equal(tools.length, 7);
    for (const tool of tools) assert.ok(tool.outputSchema, tool.name);
  });

  const cases = [
    ["shell_exec", { command: "echo hi" }, null],
    ["shell_exec", { command: "exit 4" }, "exit_status"],
    ["shell_exec", { command: "ls", cwd: "../" }, "path_escape"],
    ["shell_exec", { command: "ls", timeout_secs: -1 }, "invalid_argument"],
    ["shell_exec", { command: "rm -rf ~" }, "denied"],
    ["shell_exec", { command: "sleep 5", timeout_secs: 1 }, "timeout"],
    ["read_file", { path: "hello.txt" }, null],
    ["read_file", { path: "hello.txt", limit: -1 }, "invalid_argument"],
    ["read_file", { path: "missing.txt" }, "not_found"],
    ["write_file", { path: "out.txt", content: "x\n" }, null],
    ["write_file", { path: "out.txt" }, "invalid_argument"],
    ["write_file", { path: ".git/config", content: "x" }, "denied"],
    ["edit_file", { path: "app.py", edits: [{ old_string: "a - b", new_string: "a + b" }] }, null],
    ["edit_file", { path: "app.py", edits: [{ old_string: "a" }] }, "invalid_argument"],
    ["code_interpreter", { code: "6 * 7" }, null],
    ["code_interpreter", { code: "raise ValueError('no')" }, "exception"],
    ["code_interpreter", { code: "1", extra: true }, "invalid_argument"],
    ["shell_exec", { command: "echo started", background: true, wait_secs: 0 }, null],
    ["shell_exec", { command: "true", wait_secs: 2 }, "invalid_argument"],
    ["job", {}, null],
    ["job", { id: "job-1" }, "invalid_argument"],
    ["job", { id: "job-1", signal: "STOP" }, "invalid_argument"],
  ];
  for (const [name, args, kind] of cases) {
    test(`tools/call ${name} ${JSON.stringify(args)} -> ${kind ?? "ok"}`, () => {
      expectKind(toolCall(name, args), kind);
    });
  }

  test("a spilled output is linked and resources/read serves it", () => {
    const result = toolCall("shell_exec", { command: "seq 1 3000" });
    const link = result.content.find((c) => c.type === "resource_link");
    assert.ok(link, JSON.stringify(result.content));
    const read = inspect("resources/read", ["--uri", link.uri]);
    assert.equal(read.contents[0].text.split("\n").length, 3001);
  });
});
