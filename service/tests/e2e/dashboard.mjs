// The dashboard end to end: Debian's chromium (driven by playwright-core, no browser download)
// loads GET / of a live inventoryd, PUTs a SKU through the admin form, sees one bar per segment,
// watches the bars and counters move while orders arrive, restocks through the form, sees the
// sold-out state, and checks that the token went only into an Authorization header and that
// the page logged no console error. The screenshot is written to $ARTIFACT_DIR/dashboard.png.
// Env: URL_MAIN, TOKEN, ARTIFACT_DIR, CHROMIUM (default /usr/bin/chromium).
import http from "node:http";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const BASE = process.env.URL_MAIN, TOKEN = process.env.TOKEN, OUT = process.env.ARTIFACT_DIR;
const problems = [];
const check = (ok, what) => { console.log(`${ok ? "ok  " : "FAIL"} - ${what}`); if (!ok) problems.push(what); };

function order(sku, quantity) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ sku, quantity });
    const req = http.request(BASE + "/api/v1/orders", { method: "POST", agent: false, headers: { "Content-Type": "application/json" } }, (res) => {
      res.resume(); res.on("end", () => resolve(res.statusCode));
    });
    req.on("error", reject); req.end(body);
  });
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const consoleErrors = [];
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  const adminRequests = [];
  page.on("request", (r) => { if (r.method() !== "GET") adminRequests.push({ url: r.url(), headers: r.headers(), body: r.postData() || "" }); });
  page.setDefaultTimeout(15000);

  await page.goto(BASE + "/");
  await page.waitForSelector('#conn[data-state="ok"]');
  check(true, "the page loads and polls the API");

  const sku = `e2e-${process.pid}`;
  await page.click("#admin summary");
  await page.fill("#admin-token", TOKEN);
  await page.fill("#put-sku", sku);
  await page.fill("#put-stock", "200");
  await page.fill("#put-segments", "8");
  await page.click("#put-submit");
  await page.waitForSelector('#admin-result[data-state="ok"]');
  check((await page.textContent("#admin-result")).startsWith("created " + sku), "PUT through the form: " + await page.textContent("#admin-result"));
  const card = `.sku[data-sku="${sku}"]`;
  await page.waitForFunction((sel) => document.querySelectorAll(sel + " .bar").length === 8, card);
  const remaining = () => page.$$eval(card + " .bar", (bars) => bars.map((b) => Number(b.dataset.remaining)));
  await page.waitForFunction((sel) => [...document.querySelectorAll(sel + " .bar")].every((b) => b.dataset.remaining === "25"), card);
  check(true, "one bar per segment, each 25 of 200");

  for (let i = 0; i < 40; i++) if (await order(sku, 1) !== 201) problems.push("an order was not placed");
  await page.waitForFunction((sel) => document.querySelector(sel + ' b[data-k="sold"]')?.textContent === "40", card);
  const after = await remaining();
  check(after.reduce((a, b) => a + b, 0) === 160 && after.some((r) => r < 25), `bars went down after 40 orders: ${after.join(" ")}`);
  await page.waitForFunction(() => { const t = document.getElementById("m-orders").textContent; return t !== "–" && Number(t) > 0; });
  check(true, "instance orders/s from /metrics: " + await page.textContent("#m-orders"));
  await page.waitForFunction((sel) => { const t = document.querySelector(sel + ' b[data-k="orders_per_s"]').textContent; return t !== "–" && Number(t) > 0; }, card);
  check(true, "SKU orders/s: " + await page.textContent(card + ' b[data-k="orders_per_s"]'));
  await page.waitForFunction(() => document.getElementById("m-lock-p99").textContent !== "–");
  check(true, "lock-acquire p99: " + await page.textContent("#m-lock-p99"));
  if (OUT) { mkdirSync(OUT, { recursive: true }); await page.screenshot({ path: OUT + "/dashboard.png", fullPage: true }); }

  await page.fill("#restock-sku", sku);
  await page.fill("#restock-qty", "10");
  await page.click("#restock-submit");
  await page.waitForFunction(() => document.getElementById("admin-result").textContent.startsWith("restocked"));
  await page.waitForFunction((sel) => document.querySelector(sel + ' b[data-k="stock_total"]')?.textContent === "210", card);
  check(true, "restock through the form: stock_total 210");

  let status = 201, n = 0;
  while (status === 201 && n++ < 400) status = await order(sku, 1);
  check(status === 409, `sold out after ${n - 1} more orders (HTTP ${status})`);
  await page.waitForFunction((sel) => document.querySelector(sel)?.classList.contains("sold-out"), card);
  check((await page.textContent(card + " .badge")) === "SOLD OUT", "the sold-out state is shown");
  await page.waitForFunction(() => { const t = document.getElementById("m-409").textContent; return t !== "–" && Number(t) > 0; });
  check(true, "409s/s: " + await page.textContent("#m-409"));
  check((await remaining()).every((r) => r === 0), "every bar is empty");

  check(adminRequests.length === 2 && adminRequests.every((r) => r.headers.authorization === "Bearer " + TOKEN),
        `both admin requests carried the token in Authorization (${adminRequests.length} sent)`);
  check(adminRequests.every((r) => !r.url.includes(TOKEN) && !r.body.includes(TOKEN)), "the token is in no URL or body");
  const stored = await page.evaluate(() => JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + location.href + document.cookie);
  check(!stored.includes(TOKEN), "the token is in no storage, cookie or the page URL");
  if (OUT) await page.screenshot({ path: OUT + "/dashboard-sold-out.png", fullPage: true });
  check(consoleErrors.length === 0, "no console errors or warnings" + (consoleErrors.length ? ": " + consoleErrors.join(" | ") : ""));
} catch (e) {
  problems.push(String(e && e.stack || e));
  console.error(e);
} finally {
  await browser.close();
}
console.log(`dashboard: ${problems.length ? 0 : 1} passed, ${problems.length ? 1 : 0} failed`);
process.exit(problems.length ? 1 : 0);
