// The contract test: sends every request and error that docs/openapi.yaml documents to live
// inventoryd instances and validates each response — status, headers and body — against the
// document with ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1) and ajv-formats. A status
// the operation does not document, a header of ours it does not document, a missing required
// header, a body field the schema does not allow: each fails the test. At the end every
// documented (operation, status) pair must have been seen, but for the few listed in
// NOT_EXERCISED with the reason.
//
// Env (contract_test.sh starts the servers): SPEC, TOKEN, URL_MAIN (a normal instance),
// URL_DOWN (its Redis is not there), URL_RATE (--rate-limit-rps 1), URL_HOLD (--hold-ms 3000
// --lock-wait-ms 0: one segment stays locked long enough for a 503 lock_timeout), URL_USER
// (--trust-body-user-id: the body's user_id is the user, for limit_exceeded), URL_JWT
// (--jwt-key-file with the HS256 secret JWT_SECRET, and --queue-key-file: the waiting room's
// user is the JWT's), CONFIRM_TOKEN (URL_MAIN's --confirm-token-file), URL_QUEUE
// (--queue-key-file, --jwt-key-file with JWT_SECRET, --user-rps 3: the waiting room's
// proof-of-work challenge).
import { readFileSync } from "node:fs";
import http from "node:http";
import { createHmac } from "node:crypto";
import YAML from "yaml";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const env = (k) => { if (!process.env[k]) throw new Error(`${k} is not set`); return process.env[k]; };
const spec = YAML.parse(readFileSync(env("SPEC"), "utf8"));
const TOKEN = env("TOKEN");
const MAIN = env("URL_MAIN"), DOWN = env("URL_DOWN"), RATE = env("URL_RATE"), HOLD = env("URL_HOLD");
const QUEUE = env("URL_QUEUE");
const USER = env("URL_USER"), JWT = env("URL_JWT"), CONFIRM_TOKEN = env("CONFIRM_TOKEN"), JWT_SECRET = env("JWT_SECRET");

// Statuses documented but not produced here, each with where it is tested instead.
const NOT_EXERCISED = {
  "post /api/v1/orders 500": "out of memory only",
  "get /api/v1/orders/{id} 500": "out of memory only",
  "delete /api/v1/orders/{id} 500": "out of memory only",
  "post /api/v1/orders/{id}/confirm 500": "out of memory only",
  "post /api/v1/orders/{id}/extend 500": "out of memory only",
  "put /api/v1/skus/{sku} 500": "out of memory only",
  "get /api/v1/skus/{sku} 500": "out of memory only",
  "delete /api/v1/skus/{sku} 500": "out of memory only",
  "patch /api/v1/skus/{sku} 500": "out of memory only",
  "post /api/v1/skus/{sku}/restock 500": "out of memory only",
  "put /api/v1/groups/{group} 500": "out of memory only",
  "get /api/v1/groups/{group} 500": "out of memory only",
  "delete /api/v1/groups/{group} 500": "out of memory only",
  "post /api/v1/skus/{sku}/restock 409": "needs a PUT racing the restock: service/tests/it_layout.c",
  "head /readyz 503": "the same handler as GET /readyz 503 (exercised)",
  "get /api/v1/skus 503": "needs Redis down for the list: the same store call as GET /readyz's",
  "get /api/v1/skus/{sku}/events 200": "an endless stream: service/tests/it_events.c and e2e/dashboard_events.mjs",
  "get /api/v1/skus/{sku}/events 503": "--max-subscribers: service/tests/it_events.c test_subscriber_bound",
};

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema(spec, "openapi.json");
const compiled = new Map();
function validator(pointer) {
  if (!compiled.has(pointer)) compiled.set(pointer, ajv.compile({ $ref: "openapi.json#" + pointer }));
  return compiled.get(pointer);
}
const esc = (s) => s.replace(/~/g, "~0").replace(/\//g, "~1");
function resolve(obj, pointer) {
  // Follows a local $ref (response or header objects); returns [object, its JSON pointer].
  while (obj && obj.$ref) {
    pointer = obj.$ref.slice(1);
    obj = pointer.split("/").slice(1).reduce((o, k) => o[k.replace(/~1/g, "/").replace(/~0/g, "~")], spec);
  }
  return [obj, pointer];
}

// Response headers this service sets itself; each must be documented where it appears.
const OUR_HEADERS = ["x-request-id", "location", "retry-after", "www-authenticate", "allow", "content-security-policy"];
const failures = [];
const seen = new Set();
let checks = 0;

function fail(what, msg) { failures.push(`${what}: ${msg}`); }

function checkResponse(what, responsePointer, resp, text) {
  const [r, ptr] = resolve(spec, responsePointer) && resolve(
    responsePointer.split("/").slice(1).reduce((o, k) => (o === undefined ? undefined : o[k.replace(/~1/g, "/").replace(/~0/g, "~")]), spec),
    responsePointer);
  if (!r) { fail(what, `HTTP ${resp.status} is not documented (${responsePointer}); body ${text.slice(0, 200)}`); return; }
  checks++;
  const documented = Object.fromEntries(Object.entries(r.headers || {}).map(([k, v]) => [k.toLowerCase(), [k, v]]));
  for (const [lk, [name, h0]] of Object.entries(documented)) {
    const [h, hptr] = resolve(h0, `${ptr}/headers/${esc(name)}`);
    const value = resp.headers.get(lk);
    if (value === null) { if (h.required) fail(what, `required header ${name} missing`); continue; }
    const v = validator(`${hptr}/schema`);
    if (!v(value)) fail(what, `header ${name}: ${JSON.stringify(value)}: ${ajv.errorsText(v.errors)}`);
  }
  for (const lk of OUR_HEADERS)
    if (resp.headers.get(lk) !== null && !documented[lk]) fail(what, `undocumented header ${lk}: ${resp.headers.get(lk)}`);
  const ctype = resp.headers.get("content-type");
  if (!r.content) {
    if (text.length) fail(what, `a body where none is documented: ${text.slice(0, 200)}`);
    return;
  }
  const media = Object.keys(r.content).find((m) => ctype && ctype.toLowerCase().startsWith(m.toLowerCase()));
  if (!media) { fail(what, `Content-Type ${ctype} is not one of ${Object.keys(r.content).join(", ")}`); return; }
  let body = text;
  if (media === "application/json") {
    try { body = JSON.parse(text); } catch (e) { fail(what, `body is not JSON: ${text.slice(0, 200)}`); return; }
  }
  const v = validator(`${ptr}/content/${esc(media)}/schema`);
  if (!v(body)) fail(what, `body ${JSON.stringify(body).slice(0, 300)}: ${ajv.errorsText(v.errors)}`);
}

// Sends one request and validates the answer against path template tpl and method.
async function call(base, method, tpl, { params = {}, query, body, headers = {}, token, raw, expect } = {}) {
  const path = tpl.replace(/\{(\w+)\}/g, (_, k) => encodeURIComponent(params[k])) + (query ? "?" + query : "");
  const h = { ...headers };
  if (token) h.Authorization = "Bearer " + token;
  let payload = raw;
  if (body !== undefined) { payload = JSON.stringify(body); h["Content-Type"] ??= "application/json"; }
  const op = spec.paths[tpl] && spec.paths[tpl][method.toLowerCase()];
  if (op && op.requestBody && body !== undefined && expect < 300) {
    const v = validator(`/paths/${esc(tpl)}/${method.toLowerCase()}/requestBody/content/application~1json/schema`);
    if (!v(body)) fail(`${method} ${path}`, `the test's own request is not what the document describes: ${ajv.errorsText(v.errors)}`);
  }
  const resp = await send(base, method, path, h, payload);
  const text = resp.text;
  const what = `${method} ${path} (${base})`;
  if (expect !== undefined && resp.status !== expect) fail(what, `expected HTTP ${expect}, got ${resp.status}: ${text.slice(0, 200)}`);
  let pointer;
  if (!spec.paths[tpl]) pointer = "/components/responses/NotFound";
  else if (!op) pointer = "/components/responses/MethodNotAllowed";
  else pointer = `/paths/${esc(tpl)}/${method.toLowerCase()}/responses/${resp.status}`;
  if (spec.paths[tpl] && !op) {
    const allow = spec.paths[tpl]["x-allow"];
    if (resp.headers.get("allow") !== allow) fail(what, `Allow ${resp.headers.get("allow")}, x-allow ${allow}`);
  }
  checkResponse(what, pointer, resp, text);
  seen.add(`${method.toLowerCase()} ${tpl} ${resp.status}`);
  let json = null;
  try { json = JSON.parse(text); } catch (e) { json = null; }
  return { status: resp.status, json, headers: resp.headers };
}

// One request on a connection of its own (no pooling: a worker thread of inventoryd parked in a
// critical section must not hold the next request's connection).
function send(base, method, path, headers, payload) {
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, { method, headers, agent: false }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve({
        status: res.statusCode,
        headers: { get: (k) => (res.headers[k.toLowerCase()] === undefined ? null : String(res.headers[k.toLowerCase()])) },
        text: Buffer.concat(chunks).toString("utf8"),
      }));
    });
    req.on("error", reject);
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

const uniq = (p) => `${p}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
const SKU = "/api/v1/skus/{sku}", RESTOCK = "/api/v1/skus/{sku}/restock", ORDERS = "/api/v1/orders", ORDER = "/api/v1/orders/{id}";
const CONFIRM = "/api/v1/orders/{id}/confirm";
const EXTEND = "/api/v1/orders/{id}/extend";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// An HS256 JWT for sub, valid for 5 minutes, signed with JWT_SECRET.
function jwt(sub) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  const now = Math.floor(Date.now() / 1000);
  const head = b64({ alg: "HS256", typ: "JWT" }) + "." + b64({ sub, iat: now, exp: now + 300 });
  return head + "." + createHmac("sha256", JWT_SECRET).update(head).digest("base64url");
}
// The error code of an answer, checked against want.
function expectError(what, r, want) {
  if (r.json?.error !== want) fail(what, `expected error ${want}, got ${JSON.stringify(r.json)}`);
}
const big = "{\"stock\":1,\"pad\":\"" + "x".repeat(17000) + "\"}";

// ---- probes, dashboard, metrics ----------------------------------------------------------
for (const p of ["/", "/queue", "/healthz", "/readyz", "/metrics"]) {
  await call(MAIN, "GET", p, { expect: 200 });
  await call(MAIN, "HEAD", p, { expect: 200 });
}
await call(DOWN, "GET", "/readyz", { expect: 503 });

// ---- SKUs ------------------------------------------------------------------------------------
const sku = uniq("contract");
await call(MAIN, "PUT", SKU, { params: { sku }, token: TOKEN, body: { stock: 10, segments: 2 }, expect: 201 });
await call(MAIN, "PUT", SKU, { params: { sku }, token: TOKEN, body: { stock: 10, segments: 2, ignored: true }, headers: { "Idempotency-Key": "put-1" }, expect: 200 });
await call(MAIN, "PUT", SKU, { params: { sku }, token: TOKEN, body: { stock: -1, segments: 2 }, expect: 400 });
await call(MAIN, "PUT", SKU, { params: { sku }, token: TOKEN, raw: "{\"stock\":1,\"stock\":2,\"segments\":1}", headers: { "Content-Type": "application/json" }, expect: 400 });
await call(MAIN, "PUT", SKU, { params: { sku }, body: { stock: 1, segments: 1 }, expect: 401 });
await call(MAIN, "PUT", SKU, { params: { sku }, token: "wrong", body: { stock: 1, segments: 1 }, expect: 401 });
await call(MAIN, "PUT", SKU, { params: { sku }, token: TOKEN, raw: big, headers: { "Content-Type": "application/json" }, expect: 413 });
await call(MAIN, "PUT", SKU, { params: { sku }, token: TOKEN, raw: "stock=1", headers: { "Content-Type": "text/plain" }, expect: 415 });
const got = await call(MAIN, "GET", SKU, { params: { sku }, expect: 200 });
// SPEC §15: the snapshot's ETag → 304 with no body; the exact read is the admin's.
await call(MAIN, "GET", SKU, { params: { sku }, headers: { "If-None-Match": got.headers.get("etag") }, expect: 304 });
await call(MAIN, "GET", SKU, { params: { sku }, query: "consistent=1", expect: 401 });
await call(MAIN, "GET", SKU, { params: { sku }, query: "consistent=1", token: TOKEN, expect: 200 });
await call(MAIN, "HEAD", SKU, { params: { sku }, expect: 200 });
await call(MAIN, "GET", SKU, { params: { sku: "no-such-" + sku }, expect: 404 });
await call(MAIN, "HEAD", SKU, { params: { sku: "no-such-" + sku }, expect: 404 });
await call(MAIN, "GET", SKU, { params: { sku: "bad*sku" }, expect: 400 });
await call(MAIN, "HEAD", SKU, { params: { sku: "bad*sku" }, expect: 400 });
// The sale rules (SPEC §11): PUT with them, PATCH each way.
const ruled = uniq("ruled");
await call(MAIN, "PUT", SKU, { params: { sku: ruled }, token: TOKEN, body: { stock: 5, segments: 1, limit_per_user: 2, sale_start: "2026-11-25T20:00:00+02:00", sale_end: null, reservation_ttl_s: 600 }, expect: 201 });
await call(MAIN, "GET", SKU, { params: { sku: ruled }, expect: 200 });
await call(MAIN, "PATCH", SKU, { params: { sku: ruled }, token: TOKEN, body: { sale_end: "2026-11-26T18:00:00.5Z" }, expect: 200 });
await call(MAIN, "PATCH", SKU, { params: { sku: ruled }, token: TOKEN, body: { sale_start: null, limit_per_user: 0 }, expect: 200 });
await call(MAIN, "PATCH", SKU, { params: { sku: ruled }, token: TOKEN, body: { sale_start: "2026-11-27T00:00:00Z" }, expect: 400 });
await call(MAIN, "PATCH", SKU, { params: { sku: ruled }, token: TOKEN, body: {}, expect: 400 });
await call(MAIN, "PATCH", SKU, { params: { sku: ruled }, body: { limit_per_user: 1 }, expect: 401 });
await call(MAIN, "PATCH", SKU, { params: { sku: "no-such-" + ruled }, token: TOKEN, body: { limit_per_user: 1 }, expect: 404 });
await call(MAIN, "PATCH", SKU, { params: { sku: ruled }, token: TOKEN, raw: big, headers: { "Content-Type": "application/json" }, expect: 413 });
await call(MAIN, "PATCH", SKU, { params: { sku: ruled }, token: TOKEN, raw: "{}", headers: { "Content-Type": "text/plain" }, expect: 415 });
// Limit groups (SPEC §17): made, changed, read, named by a SKU's rule; a rule naming none 422.
const GROUP = "/api/v1/groups/{group}", group = uniq("style");
await call(MAIN, "PUT", GROUP, { params: { group }, token: TOKEN, body: { limit_per_user: 1 }, expect: 201 });
await call(MAIN, "PUT", GROUP, { params: { group }, token: TOKEN, body: { limit_per_user: 2 }, expect: 200 });
await call(MAIN, "PUT", GROUP, { params: { group }, token: TOKEN, body: { limit_per_user: 0 }, expect: 400 });
await call(MAIN, "PUT", GROUP, { params: { group }, body: { limit_per_user: 1 }, expect: 401 });
await call(MAIN, "PUT", GROUP, { params: { group }, token: TOKEN, raw: big, headers: { "Content-Type": "application/json" }, expect: 413 });
await call(MAIN, "PUT", GROUP, { params: { group }, token: TOKEN, raw: "{}", headers: { "Content-Type": "text/plain" }, expect: 415 });
await call(MAIN, "GET", GROUP, { params: { group }, token: TOKEN, expect: 200 });
await call(MAIN, "GET", GROUP, { params: { group }, expect: 401 });
await call(MAIN, "GET", GROUP, { params: { group: "no-such-" + group }, token: TOKEN, expect: 404 });
await call(MAIN, "GET", GROUP, { params: { group: "bad*group" }, token: TOKEN, expect: 400 });
await call(MAIN, "PATCH", SKU, { params: { sku: ruled }, token: TOKEN, body: { limit_group: group }, expect: 200 });
expectError("unknown_group (PATCH)", await call(MAIN, "PATCH", SKU, { params: { sku: ruled }, token: TOKEN, body: { limit_group: "no-such-" + group }, expect: 422 }), "unknown_group");
expectError("unknown_group (PUT)", await call(MAIN, "PUT", SKU, { params: { sku: uniq("grouped") }, token: TOKEN, body: { stock: 1, segments: 1, limit_group: "no-such-" + group }, expect: 422 }), "unknown_group");
const gsku = uniq("grouped");
await call(MAIN, "PUT", SKU, { params: { sku: gsku }, token: TOKEN, body: { stock: 5, segments: 1, limit_group: group }, expect: 201 });
const go1 = await call(USER, "POST", ORDERS, { body: { sku: gsku, user_id: "gina", quantity: 2 }, expect: 201 });
if (go1.json?.grp?.[group] !== 2) fail("group order", `grp names the group: ${JSON.stringify(go1.json)}`);
const gle = await call(USER, "POST", ORDERS, { body: { sku: gsku, user_id: "gina" }, expect: 409 });
if (gle.json?.error !== "limit_exceeded" || gle.json?.limit_group !== group || gle.json?.limit_per_user !== 2) fail("group limit_exceeded", JSON.stringify(gle.json));
await call(MAIN, "DELETE", GROUP, { params: { group }, expect: 401 });
await call(MAIN, "DELETE", GROUP, { params: { group }, token: TOKEN, expect: 200 });
await call(MAIN, "DELETE", GROUP, { params: { group }, token: TOKEN, expect: 404 });
await call(MAIN, "DELETE", GROUP, { params: { group: "bad*group" }, token: TOKEN, expect: 400 });
await call(DOWN, "PUT", GROUP, { params: { group }, token: TOKEN, body: { limit_per_user: 1 }, expect: 503 });
await call(DOWN, "GET", GROUP, { params: { group }, token: TOKEN, expect: 503 });
await call(DOWN, "DELETE", GROUP, { params: { group }, token: TOKEN, expect: 503 });
for (const [method, opts] of [["PUT", { body: { limit_per_user: 1 } }], ["GET", {}], ["DELETE", {}]]) {
  let got = false;
  for (let i = 0; i < 6 && !got; i++) got = (await call(RATE, method, GROUP, { params: { group }, token: TOKEN, ...opts })).status === 429;
  if (!got) fail(`${method} ${GROUP}`, "never answered 429 at 1 request/s");
}
await call(MAIN, "POST", RESTOCK, { params: { sku }, token: TOKEN, body: { quantity: 4 }, headers: { "Idempotency-Key": "restock-1" }, expect: 200 });
await call(MAIN, "POST", RESTOCK, { params: { sku }, token: TOKEN, body: { quantity: 4 }, headers: { "Idempotency-Key": "restock-1" }, expect: 200 });
await call(MAIN, "POST", RESTOCK, { params: { sku }, token: TOKEN, body: { quantity: 0 }, expect: 400 });
await call(MAIN, "POST", RESTOCK, { params: { sku }, body: { quantity: 1 }, expect: 401 });
await call(MAIN, "POST", RESTOCK, { params: { sku: "no-such-" + sku }, token: TOKEN, body: { quantity: 1 }, expect: 404 });
await call(MAIN, "POST", RESTOCK, { params: { sku }, token: TOKEN, raw: big, headers: { "Content-Type": "application/json" }, expect: 413 });
await call(MAIN, "POST", RESTOCK, { params: { sku }, token: TOKEN, raw: "{}", headers: { "Content-Type": "application/xml" }, expect: 415 });

// ---- orders -----------------------------------------------------------------------------------
const o1 = await call(MAIN, "POST", ORDERS, { body: { sku, quantity: 2, user_id: "u-1" }, headers: { "Idempotency-Key": "order-1" }, expect: 201 });
if (o1.headers.get("location") !== `/api/v1/orders/${o1.json.order_id}`) fail("POST /api/v1/orders", `Location ${o1.headers.get("location")} is not the order's`);
await call(MAIN, "POST", ORDERS, { body: { sku, quantity: 2, user_id: "u-1" }, headers: { "Idempotency-Key": "order-1" }, expect: 200 });
await call(MAIN, "POST", ORDERS, { body: { sku, quantity: 0 }, expect: 400 });
await call(MAIN, "POST", ORDERS, { raw: "{\"sku\":", headers: { "Content-Type": "application/json" }, expect: 400 });
await call(MAIN, "POST", ORDERS, { body: { sku: "no-such-" + sku }, expect: 404 });
// Carts (SPEC §17): two SKUs in one order (201 with items), a SKU twice, items beside sku (422).
const ca = uniq("cart-a"), cb = uniq("cart-b");
await call(MAIN, "PUT", SKU, { params: { sku: ca }, token: TOKEN, body: { stock: 10, segments: 2 }, expect: 201 });
await call(MAIN, "PUT", SKU, { params: { sku: cb }, token: TOKEN, body: { stock: 10, segments: 1 }, expect: 201 });
const cart = await call(MAIN, "POST", ORDERS, { body: { items: [{ sku: ca, quantity: 1 }, { sku: cb, quantity: 2 }] }, expect: 201 });
if (!Array.isArray(cart.json?.items) || cart.json.items.length !== 2) fail("cart", `items: ${JSON.stringify(cart.json)}`);
expectError("duplicate_sku", await call(MAIN, "POST", ORDERS, { body: { items: [{ sku: ca }, { sku: ca }] }, expect: 422 }), "duplicate_sku");
expectError("items_and_sku", await call(MAIN, "POST", ORDERS, { body: { sku: ca, items: [{ sku: cb }] }, expect: 422 }), "items_and_sku");
await call(MAIN, "POST", ORDERS, { raw: big, headers: { "Content-Type": "application/json" }, expect: 413 });
await call(MAIN, "POST", ORDERS, { raw: "sku=x", headers: { "Content-Type": "application/x-www-form-urlencoded" }, expect: 415 });
const id = o1.json.order_id;
await call(MAIN, "GET", ORDER, { params: { id }, expect: 200 });
await call(MAIN, "HEAD", ORDER, { params: { id }, expect: 200 });
await call(MAIN, "GET", ORDER, { params: { id: "0".repeat(32) + "-0-" + sku }, expect: 404 });
await call(MAIN, "HEAD", ORDER, { params: { id: "nope" }, expect: 404 });
await call(MAIN, "DELETE", ORDER, { params: { id }, expect: 401 });
await call(MAIN, "DELETE", ORDER, { params: { id }, token: TOKEN, expect: 200 });
await call(MAIN, "DELETE", ORDER, { params: { id }, token: TOKEN, expect: 409 });
await call(MAIN, "DELETE", ORDER, { params: { id: "nope" }, token: TOKEN, expect: 404 });

// 409 insufficient_stock, then sold_out: one segment with one unit.
const one = uniq("one");
await call(MAIN, "PUT", SKU, { params: { sku: one }, token: TOKEN, body: { stock: 1, segments: 1 }, expect: 201 });
const ins = await call(MAIN, "POST", ORDERS, { body: { sku: one, quantity: 2 }, expect: 409 });
if (ins.json?.error !== "insufficient_stock") fail("insufficient_stock", JSON.stringify(ins.json));
await call(MAIN, "POST", ORDERS, { body: { sku: one }, expect: 201 });
const so = await call(MAIN, "POST", ORDERS, { body: { sku: one }, expect: 409 });
if (so.json?.error !== "sold_out") fail("sold_out", JSON.stringify(so.json));

await call(MAIN, "DELETE", SKU, { params: { sku: "bad*sku" }, token: TOKEN, expect: 400 });
await call(MAIN, "DELETE", SKU, { params: { sku: one }, expect: 401 });
await call(MAIN, "DELETE", SKU, { params: { sku: one }, token: TOKEN, expect: 204 });
await call(MAIN, "DELETE", SKU, { params: { sku: one }, token: TOKEN, expect: 404 });

// ---- the sale rules, holds and confirm (SPEC §11) ---------------------------------------------------
// The window: before the start (409 sale_not_started with sale_start and Retry-After), after the end.
const iso = (ms) => new Date(ms).toISOString();
const early = uniq("early");
await call(MAIN, "PUT", SKU, { params: { sku: early }, token: TOKEN, body: { stock: 5, segments: 1, sale_start: iso(Date.now() + 3600e3) }, expect: 201 });
const ns = await call(MAIN, "POST", ORDERS, { body: { sku: early }, expect: 409 });
expectError("sale_not_started", ns, "sale_not_started");
const ra = Number(ns.headers.get("retry-after"));
if (!(ra >= 3500 && ra <= 3601)) fail("sale_not_started", `Retry-After ${ns.headers.get("retry-after")}, want about 3600`);
const late = uniq("late");
await call(MAIN, "PUT", SKU, { params: { sku: late }, token: TOKEN, body: { stock: 5, segments: 1, sale_start: iso(Date.now() - 7200e3), sale_end: iso(Date.now() - 3600e3) }, expect: 201 });
expectError("sale_ended", await call(MAIN, "POST", ORDERS, { body: { sku: late }, expect: 409 }), "sale_ended");

// Who the user is: a limit and no verified user (401 user_required); a bad JWT (401
// unauthorized); a good one (201); the body's user_id trusted (development): past the limit.
const limited1 = uniq("limit");
await call(MAIN, "PUT", SKU, { params: { sku: limited1 }, token: TOKEN, body: { stock: 10, segments: 2, limit_per_user: 2 }, expect: 201 });
expectError("user_required", await call(MAIN, "POST", ORDERS, { body: { sku: limited1, user_id: "u-1" }, expect: 401 }), "user_required");
expectError("jwt missing", await call(JWT, "POST", ORDERS, { body: { sku: limited1 }, expect: 401 }), "unauthorized");
expectError("jwt bad", await call(JWT, "POST", ORDERS, { body: { sku: limited1 }, token: jwt("alice").slice(0, -4) + "AAAA", expect: 401 }), "unauthorized");
const byJwt = await call(JWT, "POST", ORDERS, { body: { sku: limited1, quantity: 2 }, token: jwt("alice"), expect: 201 });
if (byJwt.json?.user_id !== "alice") fail("jwt order", `the user is the token's sub: ${JSON.stringify(byJwt.json)}`);
const le = await call(JWT, "POST", ORDERS, { body: { sku: limited1 }, token: jwt("alice"), expect: 409 });
expectError("limit_exceeded (jwt)", le, "limit_exceeded");
if (le.json?.limit_per_user !== 2) fail("limit_exceeded", `limit_per_user ${le.json?.limit_per_user}, want 2`);
await call(USER, "POST", ORDERS, { body: { sku: limited1, user_id: "bob" }, expect: 201 });
expectError("limit_exceeded (body user)", await call(USER, "POST", ORDERS, { body: { sku: limited1, user_id: "bob", quantity: 2 }, expect: 409 }), "limit_exceeded");

// Holds of 1 s: placed reserved, confirmed (confirm token, admin token, a repeat), cancelled,
// expired; each wrong confirm.
const held1 = uniq("holds");
await call(MAIN, "PUT", SKU, { params: { sku: held1 }, token: TOKEN, body: { stock: 20, segments: 2, reservation_ttl_s: 1 }, expect: 201 });
const hold = async () => {
  const r = await call(MAIN, "POST", ORDERS, { body: { sku: held1 }, expect: 201 });
  if (r.json?.status !== "reserved" || !r.json?.expires_at) fail("hold", `a hold is reserved with expires_at: ${JSON.stringify(r.json)}`);
  return r.json.order_id;
};
const hA = await hold(), hB = await hold(), hC = await hold();
await call(MAIN, "GET", ORDER, { params: { id: hA }, expect: 200 });
await call(MAIN, "POST", CONFIRM, { params: { id: hA }, expect: 401 });
await call(MAIN, "POST", CONFIRM, { params: { id: hA }, token: "wrong", expect: 401 });
const cA = await call(MAIN, "POST", CONFIRM, { params: { id: hA }, token: CONFIRM_TOKEN, expect: 200 });
if (cA.json?.status !== "confirmed") fail("confirm", JSON.stringify(cA.json));
await call(MAIN, "POST", CONFIRM, { params: { id: hA }, token: TOKEN, expect: 200 }); // a repeat, by the admin
await call(MAIN, "POST", CONFIRM, { params: { id: "0".repeat(32) + "-0-" + held1 }, token: CONFIRM_TOKEN, expect: 404 });
await call(MAIN, "POST", CONFIRM, { params: { id: "nope" }, token: CONFIRM_TOKEN, expect: 404 });
await call(MAIN, "DELETE", ORDER, { params: { id: hB }, token: TOKEN, expect: 200 });
expectError("confirm cancelled", await call(MAIN, "POST", CONFIRM, { params: { id: hB }, token: CONFIRM_TOKEN, expect: 409 }), "already_cancelled");
const plain = await call(MAIN, "POST", ORDERS, { body: { sku }, expect: 201 }); // a SKU without holds
expectError("not_reserved", await call(MAIN, "POST", CONFIRM, { params: { id: plain.json.order_id }, token: CONFIRM_TOKEN, expect: 409 }), "not_reserved");
// hC expires within 1 s of its expires_at with no traffic (the sweeper); wait up to 4 s for it.
let expired = null;
for (let i = 0; i < 40 && expired?.status !== "expired"; i++) {
  await sleep(100);
  expired = (await call(MAIN, "GET", ORDER, { params: { id: hC }, expect: 200 })).json;
}
if (expired?.status !== "expired" || !expired.expires_at) fail("expiry", `the 1 s hold did not expire: ${JSON.stringify(expired)}`);
expectError("confirm expired", await call(MAIN, "POST", CONFIRM, { params: { id: hC }, token: CONFIRM_TOKEN, expect: 409 }), "reservation_expired");
expectError("cancel expired", await call(MAIN, "DELETE", ORDER, { params: { id: hC }, token: TOKEN, expect: 409 }), "reservation_expired");
// the confirmed and the expired holds: the status counts them once each
const hs = (await call(MAIN, "GET", SKU, { params: { sku: held1 }, expect: 200 })).json;
if (hs?.sold !== 1 || hs?.reserved !== 0 || hs?.orders !== 1) fail("holds status", `one confirmed unit, nothing reserved: ${JSON.stringify(hs)}`);

// Extensions (SPEC §17): off by default (409 extend_not_allowed), then on by a PATCH: 200 with
// the new expires_at and extensions, its limit, each refusal.
const hE = await hold();
expectError("extend off", await call(MAIN, "POST", EXTEND, { params: { id: hE }, token: CONFIRM_TOKEN, expect: 409 }), "extend_not_allowed");
await call(MAIN, "PATCH", SKU, { params: { sku: held1 }, token: TOKEN, body: { hold_extend_s: 30, hold_extend_max: 1 }, expect: 200 });
await call(MAIN, "POST", EXTEND, { params: { id: hE }, expect: 401 });
await call(MAIN, "POST", EXTEND, { params: { id: hE }, token: CONFIRM_TOKEN, body: { seconds: 0 }, expect: 400 });
await call(MAIN, "POST", EXTEND, { params: { id: hE }, token: CONFIRM_TOKEN, raw: "seconds=5", headers: { "Content-Type": "text/plain" }, expect: 415 });
const xE = await call(MAIN, "POST", EXTEND, { params: { id: hE }, token: CONFIRM_TOKEN, body: { seconds: 20 }, expect: 200 });
if (xE.json?.status !== "reserved" || xE.json?.extensions !== 1) fail("extend", JSON.stringify(xE.json));
expectError("extend limit", await call(MAIN, "POST", EXTEND, { params: { id: hE }, token: TOKEN, expect: 409 }), "extend_limit");
expectError("extend confirmed", await call(MAIN, "POST", EXTEND, { params: { id: hA }, token: CONFIRM_TOKEN, expect: 409 }), "not_reserved");
expectError("extend cancelled", await call(MAIN, "POST", EXTEND, { params: { id: hB }, token: CONFIRM_TOKEN, expect: 409 }), "already_cancelled");
expectError("extend expired", await call(MAIN, "POST", EXTEND, { params: { id: hC }, token: CONFIRM_TOKEN, expect: 409 }), "reservation_expired");
await call(MAIN, "POST", EXTEND, { params: { id: "nope" }, token: CONFIRM_TOKEN, expect: 404 });
await call(MAIN, "DELETE", ORDER, { params: { id: hE }, token: TOKEN, expect: 200 });

// ---- 503 lock_timeout: a 3 s hold on the only segment, and no wait ------------------------------
const held = uniq("held");
await call(HOLD, "PUT", SKU, { params: { sku: held }, token: TOKEN, body: { stock: 5, segments: 1 }, expect: 201 });
const first = call(HOLD, "POST", ORDERS, { body: { sku: held }, expect: 201 });
let inside = false;
for (let i = 0; i < 200 && !inside; i++) {
  const m = (await send(HOLD, "GET", "/metrics", {})).text;
  inside = /^inventory_critical_sections_in_flight 1$/m.test(m);
  if (!inside) await new Promise((r) => setTimeout(r, 20));
}
if (!inside) fail("lock_timeout", "the first order never entered its critical section");
const t0 = Date.now();
const lt = await call(HOLD, "POST", ORDERS, { body: { sku: held }, expect: 503 });
if (lt.json?.error !== "lock_timeout") fail("lock_timeout", `after ${Date.now() - t0} ms: ` + JSON.stringify(lt.json));
await first;

// ---- 503 unavailable: Redis is not there ---------------------------------------------------------
await call(DOWN, "PUT", SKU, { params: { sku }, token: TOKEN, body: { stock: 1, segments: 1 }, expect: 503 });
await call(DOWN, "GET", SKU, { params: { sku }, expect: 503 });
await call(DOWN, "HEAD", SKU, { params: { sku }, expect: 503 });
await call(DOWN, "DELETE", SKU, { params: { sku }, token: TOKEN, expect: 503 });
await call(DOWN, "PATCH", SKU, { params: { sku }, token: TOKEN, body: { limit_per_user: 1 }, expect: 503 });
await call(DOWN, "POST", RESTOCK, { params: { sku }, token: TOKEN, body: { quantity: 1 }, expect: 503 });
await call(DOWN, "POST", ORDERS, { body: { sku }, expect: 503 });
await call(DOWN, "GET", ORDER, { params: { id }, expect: 503 });
await call(DOWN, "HEAD", ORDER, { params: { id }, expect: 503 });
await call(DOWN, "DELETE", ORDER, { params: { id }, token: TOKEN, expect: 503 });
await call(DOWN, "POST", CONFIRM, { params: { id }, token: TOKEN, expect: 503 });
await call(DOWN, "POST", EXTEND, { params: { id }, token: TOKEN, expect: 503 });

// ---- 429 on every limited operation ---------------------------------------------------------------
const limited = [
  ["GET", "/", {}], ["HEAD", "/", {}], ["GET", "/queue", {}], ["HEAD", "/queue", {}], ["PUT", SKU, { params: { sku }, token: TOKEN, body: { stock: 1, segments: 1 } }],
  ["GET", SKU, { params: { sku } }], ["HEAD", SKU, { params: { sku } }], ["DELETE", SKU, { params: { sku }, token: TOKEN }],
  ["PATCH", SKU, { params: { sku }, token: TOKEN, body: { reservation_ttl_s: 0 } }],
  ["POST", RESTOCK, { params: { sku }, token: TOKEN, body: { quantity: 1 } }], ["POST", ORDERS, { body: { sku } }],
  ["GET", ORDER, { params: { id } }], ["HEAD", ORDER, { params: { id } }], ["DELETE", ORDER, { params: { id }, token: TOKEN }],
  ["POST", CONFIRM, { params: { id }, token: TOKEN }], ["POST", EXTEND, { params: { id }, token: TOKEN }],
];
for (const [method, tpl, opts] of limited) {
  let got = false;
  for (let i = 0; i < 6 && !got; i++) got = (await call(RATE, method, tpl, opts)).status === 429;
  if (!got) fail(`${method} ${tpl}`, "never answered 429 at 1 request/s");
}

// ---- the SKU list and the event stream's refusals (its 200 is an endless stream: it_events.c)
{
  const l = await call(MAIN, "GET", "/api/v1/skus", { expect: 200 });
  if (!Array.isArray(l.json?.skus) || !l.json.skus.includes(sku)) fail("GET /api/v1/skus", `${sku} not listed`);
  await call(MAIN, "GET", "/api/v1/skus", { query: "limit=0", expect: 400 });
  await call(MAIN, "GET", "/api/v1/skus/{sku}/events", { params: { sku: uniq("nosuch") }, expect: 404 });
  await call(MAIN, "GET", "/api/v1/skus/{sku}/events", { params: { sku: "bad sku!" }, expect: 400 });
}

// ---- the waiting room (SPEC §16): its users are the JWT instance's ----------------------------
{
  const QUEUE = "/api/v1/skus/{sku}/queue", QINFO = "/api/v1/skus/{sku}/queue/info";
  const room = uniq("room"), plain = uniq("plain"), nosuch = uniq("nosuch");
  await call(MAIN, "PUT", SKU, { params: { sku: room }, token: TOKEN, body: { stock: 10, segments: 1, queue_rate: 1000, queue_fifo: 1 }, expect: 201 });
  await call(MAIN, "PUT", SKU, { params: { sku: plain }, token: TOKEN, body: { stock: 10, segments: 1 }, expect: 201 });
  const j = await call(JWT, "POST", QUEUE, { params: { sku: room }, token: jwt("carol"), expect: 201 });
  if (j.json?.position !== 1) fail("queue join", JSON.stringify(j.json));
  await call(JWT, "POST", QUEUE, { params: { sku: room }, token: jwt("carol"), body: {}, expect: 200 });
  let place = null;
  for (let i = 0; i < 50 && place?.state !== "admitted"; i++) {
    place = (await call(JWT, "GET", QUEUE, { params: { sku: room }, token: jwt("carol"), expect: 200 })).json;
    if (place?.state !== "admitted") await sleep(50);
  }
  if (place?.state !== "admitted" || !place.ticket) fail("queue place", `never admitted: ${JSON.stringify(place)}`);
  await call(JWT, "GET", QINFO, { params: { sku: room }, expect: 200 });
  expectError("queue no user", await call(JWT, "POST", QUEUE, { params: { sku: room }, expect: 401 }), "unauthorized");
  expectError("queue no user (GET)", await call(JWT, "GET", QUEUE, { params: { sku: room }, expect: 401 }), "unauthorized");
  expectError("queue no place", await call(JWT, "GET", QUEUE, { params: { sku: room }, token: jwt("dave"), expect: 404 }), "not_found");
  expectError("queue unknown", await call(JWT, "POST", QUEUE, { params: { sku: nosuch }, token: jwt("carol"), expect: 404 }), "unknown_sku");
  expectError("queue info unknown", await call(JWT, "GET", QINFO, { params: { sku: nosuch }, expect: 404 }), "unknown_sku");
  for (const [m, tpl] of [["POST", QUEUE], ["GET", QUEUE], ["GET", QINFO]]) {
    expectError(`${m} ${tpl} no room`, await call(JWT, m, tpl, { params: { sku: plain }, token: jwt("carol"), expect: 409 }), "no_waiting_room");
    await call(JWT, m, tpl, { params: { sku: "bad sku!" }, token: jwt("carol"), expect: 400 });
    await call(DOWN, m, tpl, { params: { sku: room }, token: jwt("carol"), expect: 503 });
  }
  await call(JWT, "POST", QUEUE, { params: { sku: room }, token: jwt("carol"), raw: "x", headers: { "Content-Type": "text/plain" }, expect: 415 });
  // an order of a SKU with a room: without a ticket 403, with the place's ticket 201, again 409
  expectError("order without a ticket", await call(JWT, "POST", "/api/v1/orders", { token: jwt("carol"), body: { sku: room, quantity: 1 }, expect: 403 }), "ticket_required");
  await call(JWT, "POST", "/api/v1/orders", { token: jwt("carol"), body: { sku: room, quantity: 1, ticket: place.ticket }, expect: 201 });
  expectError("order with a used ticket", await call(JWT, "POST", "/api/v1/orders", { token: jwt("carol"), body: { sku: room, quantity: 1, ticket: place.ticket }, expect: 409 }), "ticket_used");
}

// ---- the waiting room's proof of work (SPEC §16) --------------------------------------------------
{
  const CH = "/api/v1/skus/{sku}/queue/challenge";
  const qsku = uniq("queued"), plain = uniq("plain"), nopow = uniq("nopow");
  await call(MAIN, "PUT", SKU, { params: { sku: qsku }, token: TOKEN, body: { stock: 5, segments: 1, queue_rate: 10, queue_pow_bits: 8 }, expect: 201 });
  await call(MAIN, "PUT", SKU, { params: { sku: plain }, token: TOKEN, body: { stock: 5, segments: 1 }, expect: 201 });
  await call(MAIN, "PUT", SKU, { params: { sku: nopow }, token: TOKEN, body: { stock: 5, segments: 1, queue_rate: 10 }, expect: 201 });
  const c = await call(QUEUE, "GET", CH, { params: { sku: qsku }, token: jwt("q1"), expect: 200 });
  if (c.json?.bits !== 8 || !String(c.json?.challenge).startsWith("p1.")) fail(`GET ${CH}`, `not a challenge at 8 bits: ${JSON.stringify(c.json)}`);
  const z = await call(QUEUE, "GET", CH, { params: { sku: nopow }, token: jwt("q2"), expect: 200 });
  if (z.json?.bits !== 0 || z.json?.challenge !== null) fail(`GET ${CH}`, `a SKU without proof of work: ${JSON.stringify(z.json)}`);
  await call(QUEUE, "GET", CH, { params: { sku: plain }, token: jwt("q3"), expect: 409 });
  await call(QUEUE, "GET", CH, { params: { sku: uniq("nosuch") }, token: jwt("q4"), expect: 404 });
  await call(QUEUE, "GET", CH, { params: { sku: "bad sku!" }, token: jwt("q5"), expect: 400 });
  await call(QUEUE, "GET", CH, { params: { sku: qsku }, expect: 401 });
  await call(USER, "GET", CH, { params: { sku: qsku }, expect: 503 }); // no queue key here
  // --user-rps 3: eight at once from one user, at most three a second get through
  const burst = await Promise.all(Array.from({ length: 8 }, () => call(QUEUE, "GET", CH, { params: { sku: qsku }, token: jwt("q7") })));
  const limited = burst.filter((r) => r.status === 429);
  if (limited.length < 2 || burst.some((r) => r.status !== 200 && r.status !== 429))
    fail(`GET ${CH}`, `--user-rps 3, 8 at once: ${burst.map((r) => r.status).join(" ")}`);
  if (limited.some((r) => !(Number(r.headers.get("retry-after")) >= 1))) fail(`GET ${CH}`, "429 without Retry-After");
  // the join asks the proof (403 pow_required) and, like the place, is held to --user-rps
  const JOIN = "/api/v1/skus/{sku}/queue";
  expectError("join without a proof", await call(QUEUE, "POST", JOIN, { params: { sku: qsku }, token: jwt("q8"), expect: 403 }), "pow_required");
  const joins = await Promise.all(Array.from({ length: 8 }, () => call(QUEUE, "POST", JOIN, { params: { sku: nopow }, token: jwt("q9") })));
  if (!joins.some((r) => r.status === 429) || joins.some((r) => ![200, 201, 429].includes(r.status)))
    fail(`POST ${JOIN}`, `--user-rps 3, 8 joins at once: ${joins.map((r) => r.status).join(" ")}`);
  const polls = await Promise.all(Array.from({ length: 8 }, () => call(QUEUE, "GET", JOIN, { params: { sku: nopow }, token: jwt("q10") })));
  if (!polls.some((r) => r.status === 429)) fail(`GET ${JOIN}`, `--user-rps 3, 8 polls at once: ${polls.map((r) => r.status).join(" ")}`);
}

// ---- unknown paths and wrong methods ----------------------------------------------------------------
await call(MAIN, "GET", "/nope", { expect: 404 });
await call(MAIN, "POST", "/api/v2/orders", { body: {}, expect: 404 });
for (const [tpl, item] of Object.entries(spec.paths)) {
  const allowed = item["x-allow"].split(", ");
  const wrong = ["GET", "POST", "PUT", "DELETE", "PATCH"].find((m) => !allowed.includes(m));
  await call(MAIN, wrong, tpl, { params: { sku, id, group: "g" }, expect: 405 });
  for (const m of Object.keys(item)) {
    if (["parameters", "x-allow", "summary", "description"].includes(m)) continue;
    if (!allowed.includes(m.toUpperCase())) fail(tpl, `${m} is documented but not in x-allow ${item["x-allow"]}`);
  }
}
for (const tpl of ["/", "/queue", "/healthz", "/readyz", "/metrics", ORDERS, ORDER, CONFIRM, SKU, RESTOCK, "/api/v1/groups/{group}"])
  if (!spec.paths[tpl]) fail(tpl, "the service has this path, the document does not");

// ---- every documented (operation, status) was exercised ------------------------------------------------
for (const [tpl, item] of Object.entries(spec.paths))
  for (const [m, op] of Object.entries(item)) {
    if (!op || !op.responses) continue;
    for (const status of Object.keys(op.responses)) {
      const key = `${m} ${tpl} ${status}`;
      if (!seen.has(key) && !NOT_EXERCISED[key]) fail(key, "documented but never produced by this test");
      if (seen.has(key) && NOT_EXERCISED[key]) fail(key, "listed as not exercised, but it was: take it off the list");
    }
  }

for (const f of failures) console.error("FAIL - " + f);
console.log(`contract: ${checks} responses validated, ${seen.size} (operation, status) pairs seen, ${Object.keys(NOT_EXERCISED).length} documented but not exercised`);
console.log(`${checks - failures.length > 0 ? 1 : 0} passed, ${failures.length ? 1 : 0} failed`);
process.exit(failures.length ? 1 : 0);
