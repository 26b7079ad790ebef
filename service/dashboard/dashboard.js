// inventoryd live dashboard: polls GET /api/v1/skus/{sku} for every watched SKU and GET /metrics
// once a second, and draws one bar per segment. Only this origin is contacted. The admin token
// typed into the admin form is read when a form is sent, goes out only as an
// "Authorization: Bearer" header, and is never stored.
"use strict";
(function () {
  const SKU_RE = /^[A-Za-z0-9_.:-]{1,64}$/;
  const REFRESH_MS = 1000;
  const RATE_WINDOW = 5; // samples (seconds) the rates and p99s are computed over
  const $ = (id) => document.getElementById(id);
  const watched = new Map(); // sku -> {card, history: [{t, orders, sold}], status}
  const metricHistory = []; // [{t, m: Map(series -> value)}]

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(n, digits) {
    if (n === null || n === undefined || !isFinite(n)) return "–";
    return n.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits });
  }
  function fmtSeconds(s) {
    if (s === null || !isFinite(s)) return "–";
    return s < 1 ? fmt(s * 1000, 2) + " ms" : fmt(s, 2) + " s";
  }

  // ---- the watched list: #skus=a,b in the URL and localStorage -------------------------------
  function saveWatched() {
    const list = Array.from(watched.keys());
    try { localStorage.setItem("inventoryd.skus", list.join(",")); } catch (e) { /* private mode */ }
    history.replaceState(null, "", list.length ? "#skus=" + list.map(encodeURIComponent).join(",") : "#");
    $("empty").hidden = list.length > 0;
  }
  function initialWatched() {
    const m = /(?:^#|&)skus=([^&]*)/.exec(location.hash);
    let raw = m ? m[1].split(",").map(decodeURIComponent) : [];
    if (!m) {
      try { raw = (localStorage.getItem("inventoryd.skus") || "").split(","); } catch (e) { raw = []; }
    }
    return raw.filter((s) => SKU_RE.test(s));
  }

  function watch(sku) {
    if (!SKU_RE.test(sku) || watched.has(sku)) return;
    const card = el("section", "sku");
    card.dataset.sku = sku;
    const h = el("h2");
    h.append(el("span", "name", sku), el("span", "badge", "…"));
    const close = el("button", "close secondary", "unwatch");
    close.type = "button";
    close.addEventListener("click", () => { card.remove(); watched.delete(sku); saveWatched(); });
    h.append(close);
    const numbers = el("div", "numbers");
    const bars = el("div", "bars");
    bars.setAttribute("role", "img");
    const axis = el("div", "axis");
    card.append(h, numbers, bars, axis);
    $("skus").append(card);
    watched.set(sku, { card, history: [], status: null });
    saveWatched();
  }

  // ---- drawing a SKU ---------------------------------------------------------------------------
  function number(label, value, key) {
    const span = el("span");
    span.append(label + " ");
    const b = el("b", null, value);
    b.dataset.k = key;
    span.append(b);
    return span;
  }
  function drawSku(sku, w, status, missing) {
    const card = w.card;
    card.classList.toggle("missing", !!missing);
    card.classList.toggle("sold-out", !missing && status.sold_out);
    const badge = card.querySelector(".badge");
    const numbers = card.querySelector(".numbers");
    const bars = card.querySelector(".bars");
    const axis = card.querySelector(".axis");
    if (missing) {
      badge.textContent = "unknown SKU";
      numbers.replaceChildren(el("span", "muted", "no such SKU (PUT it below)"));
      bars.replaceChildren();
      axis.replaceChildren();
      return;
    }
    badge.textContent = status.sold_out ? "SOLD OUT" : "on sale";
    const h = w.history;
    let rate = null;
    if (h.length >= 2) {
      const a = h[0], b = h[h.length - 1];
      if (b.t > a.t && b.version === a.version) rate = Math.max(0, (b.orders - a.orders) / ((b.t - a.t) / 1000));
    }
    numbers.replaceChildren(
      number("remaining", fmt(status.remaining, 0), "remaining"),
      number("of", fmt(status.stock_total, 0), "stock_total"),
      number("sold", fmt(status.sold, 0), "sold"),
      number("orders", fmt(status.orders, 0), "orders"),
      number("orders/s", fmt(rate, 1), "orders_per_s"),
      number("segments", String(status.segments.length), "segments"),
      number("version", String(status.version), "version"));
    // Each bar: the segment's remaining over its own remaining + sold (its share of the stock).
    let cap = 1;
    for (const s of status.segments) cap = Math.max(cap, s.remaining + s.sold);
    const have = bars.children;
    while (have.length > status.segments.length) bars.lastChild.remove();
    while (have.length < status.segments.length) {
      const bar = el("div", "bar");
      bar.append(el("div", "fill"));
      bars.append(bar);
    }
    status.segments.forEach((s, i) => {
      const bar = have[i];
      bar.dataset.segment = String(s.index);
      bar.dataset.remaining = String(s.remaining);
      bar.title = "segment " + s.index + ": " + s.remaining + " left, " + s.sold + " sold";
      bar.classList.toggle("empty", s.remaining === 0);
      bar.firstChild.style.height = (100 * s.remaining / cap).toFixed(2) + "%";
    });
    bars.setAttribute("aria-label", status.segments.map((s) => s.remaining).join(" "));
    axis.replaceChildren(el("span", null, "segment 0"), el("span", null, "segment " + (status.segments.length - 1)));
  }

  async function refreshSku(sku, w, now) {
    const r = await fetch("/api/v1/skus/" + encodeURIComponent(sku), { cache: "no-store" });
    if (r.status === 404) { w.history = []; drawSku(sku, w, null, true); return; }
    if (!r.ok) throw new Error("GET " + sku + ": HTTP " + r.status);
    const status = await r.json();
    w.history.push({ t: now, orders: status.orders, version: status.version });
    if (w.history.length > RATE_WINDOW + 1) w.history.shift();
    drawSku(sku, w, status, false);
  }

  // ---- /metrics ---------------------------------------------------------------------------------
  function parseMetrics(text) {
    const m = new Map();
    for (const line of text.split("\n")) {
      if (!line || line[0] === "#") continue;
      const sp = line.lastIndexOf(" ");
      m.set(line.slice(0, sp), Number(line.slice(sp + 1)));
    }
    return m;
  }
  function delta(a, b, series) {
    const x = a.get(series), y = b.get(series);
    return x === undefined || y === undefined ? null : Math.max(0, y - x);
  }
  // histogram_quantile over the increase of a histogram's buckets between two samples.
  function quantile(q, a, b, name, labels) {
    const re = new RegExp("^" + name + "_bucket\\{" + (labels ? labels + "," : "") + 'le="([^"]+)"\\}$');
    const buckets = [];
    for (const [k, v] of b) {
      const m = re.exec(k);
      if (m) buckets.push({ le: m[1] === "+Inf" ? Infinity : Number(m[1]), n: Math.max(0, v - (a.get(k) || 0)) });
    }
    buckets.sort((x, y) => x.le - y.le);
    if (!buckets.length) return null;
    const total = buckets[buckets.length - 1].n;
    if (total === 0) return null;
    const rank = q * total;
    let prevLe = 0, prevN = 0;
    for (const bk of buckets) {
      if (bk.n >= rank) {
        if (bk.le === Infinity) return prevLe;
        return prevLe + (bk.le - prevLe) * ((rank - prevN) / Math.max(1, bk.n - prevN));
      }
      prevLe = bk.le; prevN = bk.n;
    }
    return null;
  }
  async function refreshMetrics(now) {
    const r = await fetch("/metrics", { cache: "no-store" });
    if (!r.ok) throw new Error("GET /metrics: HTTP " + r.status);
    const m = parseMetrics(await r.text());
    metricHistory.push({ t: now, m });
    if (metricHistory.length > RATE_WINDOW + 1) metricHistory.shift();
    for (const k of m.keys()) {
      const v = /^inventory_build_info\{version="([^"]*)"\}$/.exec(k);
      if (v) $("build").textContent = "v" + v[1];
    }
    $("m-lost").textContent = fmt(m.get("inventory_locks_lost_total"), 0);
    $("m-redis").textContent = fmt(m.get("inventory_redis_errors_total"), 0);
    if (metricHistory.length < 2) return;
    const a = metricHistory[0].m, secs = (now - metricHistory[0].t) / 1000;
    const per = (x) => (x === null ? null : x / secs);
    $("m-orders").textContent = fmt(per(delta(a, m, 'inventory_orders_total{result="created"}')));
    const c409 = (delta(a, m, 'inventory_orders_total{result="sold_out"}') || 0) +
                 (delta(a, m, 'inventory_orders_total{result="insufficient_stock"}') || 0);
    $("m-409").textContent = fmt(per(c409));
    $("m-waits").textContent = fmt(per(delta(a, m, "inventory_lock_waits_total")));
    $("m-lock-p99").textContent = fmtSeconds(quantile(0.99, a, m, "inventory_lock_acquire_seconds", ""));
    $("m-http-p99").textContent = fmtSeconds(quantile(0.99, a, m, "inventory_http_request_duration_seconds", 'route="/api/v1/orders"'));
  }

  async function tick() {
    const now = Date.now();
    const conn = $("conn");
    try {
      await Promise.all([refreshMetrics(now), ...Array.from(watched, ([sku, w]) => refreshSku(sku, w, now))]);
      conn.textContent = "live";
      conn.dataset.state = "ok";
      $("updated").textContent = "updated " + new Date(now).toLocaleTimeString();
    } catch (e) {
      conn.textContent = "error: " + e.message;
      conn.dataset.state = "error";
    }
    setTimeout(tick, Math.max(0, REFRESH_MS - (Date.now() - now)));
  }

  // ---- admin forms --------------------------------------------------------------------------
  async function admin(method, path, body, okText) {
    const out = $("admin-result");
    const token = $("admin-token").value.trim();
    if (!token) { out.dataset.state = "error"; out.textContent = "enter the admin token first"; return null; }
    out.dataset.state = ""; out.textContent = method + " " + path + " …";
    let r;
    try {
      r = await fetch(path, {
        method,
        headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token },
        body: JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
      });
    } catch (e) {
      out.dataset.state = "error"; out.textContent = method + " " + path + ": " + e.message; return null;
    }
    let data = null;
    try { data = await r.json(); } catch (e) { data = null; }
    if (!r.ok) {
      out.dataset.state = "error";
      out.textContent = method + " " + path + ": HTTP " + r.status + (data && data.error ? " " + data.error + ": " + data.message : "");
      return null;
    }
    out.dataset.state = "ok";
    out.textContent = okText(r.status, data);
    return data;
  }
  $("put-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const sku = $("put-sku").value.trim();
    const body = { stock: Number($("put-stock").value), segments: Number($("put-segments").value) };
    const d = await admin("PUT", "/api/v1/skus/" + encodeURIComponent(sku), body,
      (st, data) => (st === 201 ? "created " : "replaced ") + sku + ": " + data.stock + " units in " + data.segments + " segments (version " + data.version + ")");
    if (d) watch(sku);
  });
  $("restock-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const sku = $("restock-sku").value.trim();
    const d = await admin("POST", "/api/v1/skus/" + encodeURIComponent(sku) + "/restock",
      { quantity: Number($("restock-qty").value) },
      (st, data) => "restocked " + sku + ": +" + data.added + ", " + data.remaining + " remaining");
    if (d) watch(sku);
  });
  $("watch-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    watch($("watch-sku").value.trim());
    $("watch-sku").value = "";
  });

  initialWatched().forEach(watch);
  saveWatched();
  tick();
})();
