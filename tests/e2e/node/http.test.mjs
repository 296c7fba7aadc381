// cordon over Streamable HTTP, driven by the official TypeScript SDK's
// StreamableHTTPClientTransport (@modelcontextprotocol/sdk 1.x): `cordon serve --http
// 127.0.0.1:0` with a bearer token. Every tool is called with good arguments and with an error
// it can produce; the SDK validates each structured result against the tool's outputSchema and
// strict Ajv checks it again. Also: the token is required, two sessions do not share
// interpreter state, and ending a session (DELETE) makes its id unknown. Run through
// tests/it/node_e2e.rs (`node --test`).
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { writeFileSync, chmodSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CORDON, makeWorkspace, strictAjv } from "./common.mjs";

const { root, ws, policy } = makeWorkspace();
const token = randomBytes(24).toString("hex");
const tokenFile = join(root, "token");
writeFileSync(tokenFile, `${token}\n`);
chmodSync(tokenFile, 0o600);
let server;
let url;
let stderr = "";
const clients = [];
const { ajv } = strictAjv();
const validators = {};

async function connect(bearer = token) {
  const headers = bearer ? { Authorization: `Bearer ${bearer}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client({ name: "cordon-node-http", version: "1.0.0" });
  await client.connect(transport);
  clients.push(client);
  return { client, transport };
}

before(async () => {
  server = spawn(CORDON, ["serve", "--workspace", ws, "--policy", policy, "--http", "127.0.0.1:0", "--http-token-file", tokenFile], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listen line: ${stderr}`)), 60000);
    server.stderr.on("data", (d) => {
      stderr += d;
      const m = stderr.match(/listening on (http:\/\/\S+\/mcp)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    server.on("exit", (code) => reject(new Error(`cordon exited ${code}: ${stderr}`)));
  });
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  server?.kill("SIGTERM");
  assert.ok(!stderr.includes(token), "the token reached the server's log");
});

async function call(client, name, args, kind) {
  if (!validators[name]) {
    for (const tool of (await client.listTools()).tools) validators[tool.name] = ajv.compile(tool.outputSchema);
  }
  const result = await client.callTool({ name, arguments: args });
  const validate = validators[name];
  assert.ok(validate(result.structuredContent), `${name}: ${JSON.stringify(validate.errors)}`);
  const text = result.content.find((c) => c.type === "text")?.text ?? "";
  if (kind === null) {
    assert.ok(!result.isError, `${name} ${JSON.stringify(args)} failed: ${text}`);
  } else {
    assert.equal(result.isError, true, `${name} should fail: ${text}`);
    assert.equal(result.structuredContent.error.kind, kind, text);
  }
  return result;
}

describe("every tool over HTTP", () => {
  let client;
  before(async () => {
    ({ client } = await connect());
  });
  test("every tool is listed", async () => {
    const names = (await client.listTools()).tools.map((t) => t.name).sort();
    assert.deepEqual(names, ["checkpoint", "code_interpreter", "edit_file", "job", "read_file", "shell_exec", "write_file"]);
  });
  test("shell_exec", async () => {
    const r = await call(client, "shell_exec", { command: "echo hi" }, null);
    assert.equal(r.structuredContent.stdout, "hi\n");
    await call(client, "shell_exec", { command: "exit 3" }, "exit_status");
    await call(client, "shell_exec", { command: "ls", cwd: "../" }, "path_escape");
  });
  test("write_file", async () => {
    const r = await call(client, "write_file", { path: "new/file.txt", content: "a\n" }, null);
    assert.equal(r.structuredContent.created, true);
    await call(client, "write_file", { path: "/etc/passwd", content: "x" }, "path_escape");
  });
  test("edit_file", async () => {
    const r = await call(client, "edit_file", { path: "app.py", edits: [{ old_string: "a - b", new_string: "a + b" }] }, null);
    assert.equal(r.structuredContent.replacements, 1);
    assert.equal(readFileSync(join(ws, "app.py"), "utf8"), "def add(a, b):\n    return a + b\n");
    await call(client, "edit_file", { path: "app.py", edits: [{ old_string: "nowhere", new_string: "x" }] }, "invalid_argument");
  });
  test("read_file", async () => {
    const r = await call(client, "read_file", { path: "hello.txt", offset: 2, limit: 1 }, null);
    assert.equal(r.structuredContent.content, "two\n");
    await call(client, "read_file", { path: "missing.txt" }, "not_found");
  });
  test("code_interpreter", async () => {
    await call(client, "code_interpreter", { code: "n = 6" }, null);
    const r = await call(client, "code_interpreter", { code: "n * 7" }, null);
    assert.equal(r.structuredContent.result, "42");
    const bad = await call(client, "code_interpreter", { code: "raise ValueError('no')" }, "exception");
    assert.equal(bad.structuredContent.error.type, "ValueError");
  });
});

describe("sessions", () => {
  test("two sessions do not share interpreter state", async () => {
    const { client: a } = await connect();
    const { client: b } = await connect();
    await call(a, "code_interpreter", { code: "mine = 'a'" }, null);
    const seen = await call(b, "code_interpreter", { code: "mine" }, "exception");
    assert.equal(seen.structuredContent.error.type, "NameError");
  });
  test("a terminated session's id is unknown afterwards (404)", async () => {
    const { transport } = await connect();
    const id = transport.sessionId;
    assert.ok(id);
    await transport.terminateSession();
    const r = await fetch(url, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${token}`,
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
        "Mcp-Session-Id": id,
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    });
    assert.equal(r.status, 404);
  });
});

describe("authentication", () => {
  for (const [label, bearer] of [["no token", null], ["a wrong token", "wrong-token"]]) {
    test(`${label} cannot connect`, async () => {
      await assert.rejects(connect(bearer), (e) => /401|Unauthorized/i.test(String(e)), "expected a 401");
    });
  }
});
