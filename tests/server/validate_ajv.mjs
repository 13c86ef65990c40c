// Validates structured-output documents with ajv, an independent JSON Schema
// validator (npm ajv, draft 2020-12, strict mode: a keyword ajv does not know
// is an error, never ignored).
// usage: node validate_ajv.mjs NODE_MODULES FILE.jsonl
// FILE.jsonl: one line per request, {i, schema, text, finish_reason} as
// written by tests/server/structured.py `ask`. A document that finished with
// "stop" must parse (JSON.parse) and validate against its schema; one cut by
// max_tokens ("length") is counted, not validated; any other finish_reason is
// a failure. Prints the failures (at most 10) and, last, one line:
//   {"total": N, "valid": N, "invalid": N, "cut": N, "other": N}
// Exits 0 (the shell test judges the counts) unless the input is unreadable.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const [modules, file] = process.argv.slice(2);
const require = createRequire(path.resolve(modules, "noop.js"));
const Ajv2020 = require("ajv/dist/2020").default;
const ajv = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true });

const counts = { total: 0, valid: 0, invalid: 0, cut: 0, other: 0 };
const failures = [];
for (const line of readFileSync(file, "utf8").split("\n")) {
  if (!line.trim()) continue;
  const r = JSON.parse(line);
  counts.total++;
  if (r.finish_reason === "length") { counts.cut++; continue; }
  if (r.finish_reason !== "stop") {
    counts.other++;
    failures.push(`request ${r.i}: finish_reason ${JSON.stringify(r.finish_reason)}`);
    continue;
  }
  let why = null;
  try {
    const doc = JSON.parse(r.text);
    const validate = ajv.compile(r.schema);
    if (!validate(doc)) why = ajv.errorsText(validate.errors);
  } catch (e) {
    why = `${e.name}: ${e.message}`;
  }
  if (why === null) { counts.valid++; continue; }
  counts.invalid++;
  failures.push(`request ${r.i}: ${why}\n     text ${JSON.stringify(r.text)}\n     schema ${JSON.stringify(r.schema)}`);
}
for (const f of failures.slice(0, 10)) console.log(f);
console.log(JSON.stringify(counts));
