// The dashboard follows a SKU by its event stream (issue 30, SPEC §15), in Debian's chromium
// driven by playwright-core: the page lists the SKUs the registry knows (GET /api/v1/skus) and a
// click watches one; its card opens GET /api/v1/skus/{sku}/events (EventSource) and draws the
// snapshot; an order placed outside the page shows on the card within the refresh plus a margin,
// by an event of the stream (a new event id), with no reload of the page and no GET of the SKU's
// status (nothing polls it). A screenshot goes to $ARTIFACT_DIR/dashboard-events.png.
// Env: URL_MAIN, TOKEN, ARTIFACT_DIR, CHROMIUM (default /usr/bin/chromium).
import http from "node:http";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const BASE = process.env.URL_MAIN, TOKEN = process.env.TOKEN, OUT = process.env.ARTIFACT_DIR;
const problems = [];
const check = (ok, what) => { console.log(`${ok ? "ok  " : "FAIL"} - ${what}`); if (!ok) problems.push(what); };

function request(method, path, body, admin) {
  return new Promise((resolve, reject) => {
    const headers = { "Content-Type": "application/json" };
    if (admin) headers.Authorization = "Bearer " + TOKEN;
    const req = http.request(BASE + path, { method, agent: false, headers }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("error", reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
});
try {
  const sku = `e2e-sse-${process.pid}`;
  const put = await request("PUT", "/api/v1/skus/" + sku, { stock: 100, segments: 4 }, true);
  check(put.status === 201, `PUT ${sku} (HTTP ${put.status})`);

  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const consoleErrors = [];
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  const statusGets = [], streams = [];
  page.on("request", (r) => {
    const path = new URL(r.url()).pathname;
    if (path === "/api/v1/skus/" + sku) statusGets.push(r.url());
    if (path === "/api/v1/skus/" + sku + "/events") streams.push(r.url());
  });
  page.setDefaultTimeout(15000);
  await page.goto(BASE + "/");
  await page.waitForSelector('#conn[data-state="ok"]');

  // the registry's list, and a click on our SKU
  const button = `#known-list button[data-sku="${sku}"]`;
  await page.waitForSelector(button);
  check(true, "the registry's SKUs are listed: " + (await page.$$eval("#known-list button", (b) => b.map((x) => x.dataset.sku))).join(" "));
  const card = `.sku[data-sku="${sku}"]`;
  if (!(await page.$(card))) await page.click(button);
  await page.waitForFunction((sel) => document.querySelector(sel + ' b[data-k="remaining"]')?.textContent === "100", card);
  await page.waitForFunction((sel) => document.querySelector(sel)?.dataset.stream === "open", card);
  check(streams.length >= 1, `the card opened the SKU's event stream (${streams.length} request(s))`);
  const id0 = await page.getAttribute(card, "data-event-id");
  check(/^[0-9a-f]{16}$/.test(id0 || ""), "the first event's id: " + id0);

  // an order from outside the page, and the card follows without a reload
  await page.evaluate(() => { window.__notReloaded = true; });
  const gets0 = statusGets.length;
  const t0 = Date.now();
  const o = await request("POST", "/api/v1/orders", { sku, quantity: 3 });
  check(o.status === 201, `an order of 3 (HTTP ${o.status})`);
  await page.waitForFunction((sel) => document.querySelector(sel + ' b[data-k="remaining"]')?.textContent === "97", card, { timeout: 5000 });
  const took = Date.now() - t0;
  check(took < 3000, `the card shows 97 left ${took} ms after the order`);
  const id1 = await page.getAttribute(card, "data-event-id");
  check(id1 && id1 !== id0, `by a new event of the stream (${id0} then ${id1})`);
  check(await page.evaluate(() => window.__notReloaded === true), "the page was not reloaded");
  await page.waitForTimeout(1500);
  check(statusGets.length === gets0, `no GET of the SKU's status meanwhile (${statusGets.length - gets0})`);
  check((await page.textContent(card + ' b[data-k="sold"]')) === "3", "sold 3");
  if (OUT) { mkdirSync(OUT, { recursive: true }); await page.screenshot({ path: OUT + "/dashboard-events.png", fullPage: true }); }
  check(consoleErrors.length === 0, "no console errors or warnings" + (consoleErrors.length ? ": " + consoleErrors.join(" | ") : ""));
  await page.close();
} catch (e) {
  problems.push(String(e && e.stack || e));
  console.error(e);
} finally {
  await browser.close();
}
console.log(`dashboard events: ${problems.length ? 0 : 1} passed, ${problems.length ? 1 : 0} failed`);
process.exit(problems.length ? 1 : 0);
