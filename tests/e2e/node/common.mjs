// Shared by the Node end-to-end suites: a throwaway workspace, a test policy, the cordon
// binary under test (CORDON_BIN, set by tests/it/node_e2e.rs), and an Ajv in strict mode to
// check every result against its tool's outputSchema the way strict hosts do.
import { mkdtempSync, writeFileSync, mkdirSync, realpathSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Ajv from "ajv";

export const CORDON = process.env.CORDON_BIN;
if (!CORDON) {
  throw new Error("CORDON_BIN is not set: run this suite through `cargo test --test it -- node_e2e`");
}

/// A fresh workspace with a few files, and a policy that makes every error kind cheap to reach:
/// a 1 MiB file size limit (resource_limit), a 1 s approval timeout (expired approvals), short
/// lint and command timeouts.
export function makeWorkspace() {
  const root = realpathSync(mkdtempSync(join(tmpdir(), "cordon-node-")));
  const ws = join(root, "ws");
  mkdirSync(ws);
  writeFileSync(join(ws, "hello.txt"), "one\ntwo\nthree\n");
  writeFileSync(join(ws, "app.py"), "def add(a, b):\n    return a - b\n");
  writeFileSync(join(ws, "blob.bin"), Buffer.from([0, 1, 2, 0, 255, 254, 0]));
  const policy = join(root, "policy.toml");
  writeFileSync(
    policy,
    [
      'extends = "default"',
      'name = "node-e2e"',
      "[limits]",
      "file_size_mb = 1",
      "[server]",
      "approval_timeout_secs = 1",
      "",
    ].join("\n"),
  );
  return { root, ws, policy, audit: join(root, "audit.jsonl") };
}

export function serverParams(ws, policy, audit) {
  const args = ["serve", "--workspace", ws, "--policy", policy];
  if (audit) args.push("--audit-log", audit);
  return { command: CORDON, args, stderr: "pipe" };
}

/// Ajv as strict as it goes: unknown keywords, formats and types are errors, not warnings.
export function strictAjv() {
  const warnings = [];
  const logger = { log: () => {}, warn: (m) => warnings.push(String(m)), error: (m) => warnings.push(String(m)) };
  const ajv = new Ajv({ strict: true, allErrors: true, logger });
  return { ajv, warnings };
}
