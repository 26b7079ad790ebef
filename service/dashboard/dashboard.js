// inventoryd live dashboard: follows every watched SKU's status as it changes through its event
// stream (GET /api/v1/skus/{sku}/events, Server-Sent Events: no polling), polls GET /metrics once
// a second, lists the SKUs the registry knows (GET /api/v1/skus) to watch with a click, and draws one bar per segment (remaining, reserved in holds, and the rest of
// sold: created + confirmed orders), the SKU's sale rules and a countdown to its sale_start (or
// to its sale_end while the sale runs). The countdown runs on the server's clock, estimated
// from the Date header of every answer (serverClock below), not on the browser's. Only this
// origin is contacted. The admin token typed into the admin form is read when a form is sent,
// goes out only as an "Authorization: Bearer" header, and is never stored. A SKU with a waiting
// room (queue_rate > 0) also shows its queue, from GET /api/v1/skus/{sku}/queue/info read every
// QUEUE_MS while it has one, with a pause / resume button (PATCH queue_paused, admin token).
"use strict";
(function () {
  const SKU_RE = /^[A-Za-z0-9_.:-]{1,64}$/;
  const REFRESH_MS = 1000;
  const RATE_WINDOW = 5; // samples (seconds) the rates and p99s are computed over
  const $ = (id) => document.getElementById(id);
  const COUNTDOWN_MS = 250; // how often the countdowns are redrawn between polls
  const watched = new Map(); // sku -> {card, history: [{t, orders, sold}], status, events}
  const STREAM_RETRY_MS = 2000; // a stream that failed (unknown SKU, server gone) is reopened
  const KNOWN_MS = 10000; // how often the registry's list is read again
  const QUEUE_MS = 1000; // how often a waiting room's counters are read (only SKUs with one)
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

  function fmtDuration(ms) {
    const t = Math.max(0, Math.ceil(ms / 1000));
    const d = Math.floor(t / 86400), h = Math.floor(t / 3600) % 24, m = Math.floor(t / 60) % 60, sec = t % 60;
    const p2 = (n) => String(n).padStart(2, "0");
    return (d ? d + "d " : "") + (d || h ? p2(h) + ":" : "") + p2(m) + ":" + p2(sec);
  }

  // ---- the server's clock ------------------------------------------------------------------------
  // Each answer's Date header (whole seconds) says the server's clock read D..D+1 s at some
  // moment between the request leaving (t0) and the answer arriving (t1), both on the browser's
  // clock: so offset = server − browser lies in [D − t1, D + 1000 − t0]. The intersection of
  // these intervals over the answers seen narrows to well under a second; the estimate is its
  // middle. An empty intersection (a clock was set meanwhile) starts over from that answer. The
  // sale window itself is judged on Redis's clock (SPEC §11), which the server's follows by NTP.
  const serverClock = {
    lo: -Infinity, hi: Infinity, known: false,
    note(resp, t0, t1) {
      const d = Date.parse(resp.headers.get("Date") || "");
      if (!isFinite(d)) return;
      const lo = d - t1, hi = d + 1000 - t0;
      if (Math.max(lo, this.lo) > Math.min(hi, this.hi)) { this.lo = lo; this.hi = hi; }
      else { this.lo = Math.max(lo, this.lo); this.hi = Math.min(hi, this.hi); }
      this.known = true;
    },
    offset() { return this.known ? (this.lo + this.hi) / 2 : 0; },
    now() { return Date.now() + this.offset(); },
  };
  // fetch, noting the answer's Date in serverClock.
  async function get(path) {
    const t0 = Date.now();
    const r = await fetch(path, { cache: "no-store" });
    serverClock.note(r, t0, Date.now());
    return r;
  }
  function drawClock() {
    const c = $("clock");
    if (!serverClock.known) return;
    const off = serverClock.offset(), err = (serverClock.hi - serverClock.lo) / 2;
    c.dataset.offsetMs = String(Math.round(off));
    c.textContent = "server clock " + (off >= 0 ? "+" : "−") + fmt(Math.abs(off) / 1000, 1) + " s vs this browser (±" + fmt(err / 1000, 1) + " s)";
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
    close.addEventListener("click", () => {
      const w = watched.get(sku);
      if (w) { w.closed = true; if (w.events) w.events.close(); clearTimeout(w.retry); clearTimeout(w.queueTimer); }
      card.remove(); watched.delete(sku); saveWatched(); drawKnown();
    });
    h.append(close);
    const numbers = el("div", "numbers");
    const rules = el("div", "rules");
    const countdown = el("div", "countdown");
    countdown.dataset.state = "unknown";
    const bars = el("div", "bars");
    bars.setAttribute("role", "img");
    const axis = el("div", "axis");
    const legend = el("div", "legend");
    for (const [cls, text] of [["remaining", "remaining"], ["reserved", "reserved (holds)"], ["final", "sold: created + confirmed"]]) {
      const item = el("span");
      item.append(el("i", "swatch " + cls), text);
      legend.append(item);
    }
    const queue = el("div", "queue");
    queue.hidden = true;
    card.append(h, numbers, rules, countdown, queue, bars, axis, legend);
    $("skus").append(card);
    const w = { card, history: [], status: null, events: null, retry: 0, closed: false, queueTimer: 0, queueInfo: null };
    watched.set(sku, w);
    saveWatched();
    drawKnown();
    follow(sku, w);
  }

  // ---- a SKU's event stream ------------------------------------------------------------------
  // Each "status" event carries the whole status (the body of GET /api/v1/skus/{sku}); the
  // browser's EventSource reconnects by itself with Last-Event-ID after a network error. A
  // stream refused (404: no such SKU; 503: the instance's subscriber bound) closes: the GET
  // says which, and the stream is opened again STREAM_RETRY_MS later (a PUT makes it appear).
  function follow(sku, w) {
    if (w.closed) return;
    const es = new EventSource("/api/v1/skus/" + encodeURIComponent(sku) + "/events");
    w.events = es;
    w.card.dataset.stream = "connecting";
    es.addEventListener("open", () => { w.card.dataset.stream = "open"; });
    es.addEventListener("status", (ev) => {
      let status;
      try { status = JSON.parse(ev.data); } catch (e) { return; }
      w.card.dataset.stream = "open";
      w.card.dataset.eventId = ev.lastEventId;
      w.status = status;
      w.history.push({ t: Date.now(), orders: status.orders, version: status.version });
      if (w.history.length > RATE_WINDOW + 1) w.history.shift();
      drawSku(sku, w, status, false);
    });
    es.addEventListener("error", async () => {
      if (es.readyState !== EventSource.CLOSED) { w.card.dataset.stream = "reconnecting"; return; }
      w.card.dataset.stream = "closed";
      if (w.closed) return;
      try {
        const r = await get("/api/v1/skus/" + encodeURIComponent(sku));
        if (r.status === 404) { w.history = []; w.status = null; drawSku(sku, w, null, true); }
      } catch (e) { /* the server is away: try again below */ }
      w.retry = setTimeout(() => follow(sku, w), STREAM_RETRY_MS);
    });
  }

  // ---- the SKUs the registry knows (GET /api/v1/skus: its first page) -----------------------
  let known = [];
  function drawKnown() {
    const list = $("known-list");
    if (!list) return;
    list.replaceChildren(...known.map((sku) => {
      const b = el("button", watched.has(sku) ? "known watched" : "known", sku);
      b.type = "button";
      b.dataset.sku = sku;
      b.addEventListener("click", () => watch(sku));
      return b;
    }));
    $("known-none").hidden = known.length > 0;
  }
  async function refreshKnown(first) {
    try {
      const r = await get("/api/v1/skus?limit=200");
      if (r.ok) {
        known = (await r.json()).skus.filter((s) => SKU_RE.test(s));
        drawKnown();
        // a first visit (nothing watched, nothing remembered) shows a few at once
        if (first && watched.size === 0) known.slice(0, 4).forEach(watch);
      }
    } catch (e) { /* the pill shows the server's state */ }
    setTimeout(() => refreshKnown(false), KNOWN_MS);
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
  // The sale's countdown of a card, on the server's clock: to sale_start before it, to sale_end
  // while the sale runs. data-state: before | running | ended | open (no window) | unknown;
  // data-seconds: whole seconds left (empty when there is nothing to count down to).
  function drawCountdown(w) {
    const c = w.card.querySelector(".countdown"), st = w.status;
    let state = "unknown", text = "", left = null;
    if (st) {
      const now = serverClock.now();
      const start = st.sale_start ? Date.parse(st.sale_start) : null;
      const end = st.sale_end ? Date.parse(st.sale_end) : null;
      if (start !== null && now < start) { state = "before"; left = start - now; text = "sale starts in " + fmtDuration(left); }
      else if (end !== null && now >= end) { state = "ended"; text = "sale ended"; }
      else if (end !== null) { state = "running"; left = end - now; text = "sale ends in " + fmtDuration(left); }
      else if (start !== null) { state = "running"; text = "on sale (no end)"; }
      else { state = "open"; text = "no sale window"; }
    }
    c.dataset.state = state;
    c.dataset.seconds = left === null ? "" : String(Math.max(0, Math.ceil(left / 1000)));
    c.textContent = text;
    w.card.classList.toggle("not-started", state === "before");
    w.card.classList.toggle("ended", state === "ended");
  }
  function drawRules(rules, status) {
    const ttl = status.reservation_ttl_s, limit = status.limit_per_user;
    rules.replaceChildren(
      number("limit", limit ? fmt(limit, 0) + " per user" : "none", "limit_per_user"),
      number("holds", ttl ? fmtDuration(ttl * 1000) + " to confirm" : "none (orders final at once)", "reservation_ttl_s"),
      number("window", (status.sale_start || "open") + " → " + (status.sale_end || "open"), "window"));
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
      card.querySelector(".rules").replaceChildren();
      bars.replaceChildren();
      axis.replaceChildren();
      drawCountdown(w);
      queueFollow(sku, w);
      return;
    }
    drawRules(card.querySelector(".rules"), status);
    queueFollow(sku, w);
    drawCountdown(w);
    const phase = card.querySelector(".countdown").dataset.state;
    badge.textContent = status.sold_out ? "SOLD OUT" : phase === "before" ? "not started" : phase === "ended" ? "sale ended" : "on sale";
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
      number("reserved", fmt(status.reserved, 0), "reserved"),
      number("created + confirmed", fmt(status.sold - status.reserved, 0), "final"),
      number("orders", fmt(status.orders, 0), "orders"),
      number("orders/s", fmt(rate, 1), "orders_per_s"),
      number("segments", String(status.segments.length), "segments"),
      number("version", String(status.version), "version"));
    // Each bar: the segment's remaining, then its reserved units, then the rest of its sold,
    // stacked, over the largest remaining + sold of a segment (its share of the stock).
    let cap = 1;
    for (const s of status.segments) cap = Math.max(cap, s.remaining + s.sold);
    const have = bars.children;
    while (have.length > status.segments.length) bars.lastChild.remove();
    while (have.length < status.segments.length) {
      const bar = el("div", "bar");
      bar.append(el("div", "fill"), el("div", "fill-reserved"), el("div", "fill-final"));
      bars.append(bar);
    }
    status.segments.forEach((s, i) => {
      const bar = have[i];
      bar.dataset.segment = String(s.index);
      bar.dataset.remaining = String(s.remaining);
      bar.dataset.reserved = String(s.reserved);
      bar.dataset.sold = String(s.sold);
      bar.title = "segment " + s.index + ": " + s.remaining + " left, " + s.reserved + " reserved, " +
                  (s.sold - s.reserved) + " created or confirmed";
      bar.classList.toggle("empty", s.remaining === 0);
      const pct = (n) => (100 * n / cap).toFixed(2) + "%";
      const [fill, held, final] = bar.children;
      fill.style.height = pct(s.remaining);
      held.style.bottom = pct(s.remaining);
      held.style.height = pct(s.reserved);
      final.style.bottom = pct(s.remaining + s.reserved);
      final.style.height = pct(s.sold - s.reserved);
    });
    bars.setAttribute("aria-label", status.segments.map((s) => s.remaining).join(" "));
    axis.replaceChildren(el("span", null, "segment 0"), el("span", null, "segment " + (status.segments.length - 1)));
  }

  // ---- a SKU's waiting room (SPEC §16) -----------------------------------------------------------
  // Read while the SKU's status says it has a room (queue_rate > 0), every QUEUE_MS; a SKU
  // without one costs nothing. The counters are the answering instance's last admission step.
  function hasRoom(w) { return !w.closed && !!w.status && w.status.queue_rate > 0; }
  function queueFollow(sku, w) {
    const box = w.card.querySelector(".queue");
    if (!hasRoom(w)) {
      clearTimeout(w.queueTimer); w.queueTimer = 0; w.queueInfo = null;
      box.hidden = true; box.replaceChildren(); delete w.card.dataset.queue;
      return;
    }
    if (!w.queueTimer) w.queueTimer = setTimeout(() => queueRead(sku, w), 0);
  }
  async function queueRead(sku, w) {
    try {
      const r = await get("/api/v1/skus/" + encodeURIComponent(sku) + "/queue/info");
      if (r.ok) { w.queueInfo = await r.json(); drawQueue(sku, w); }
    } catch (e) { /* the pill shows the server's state */ }
    w.queueTimer = hasRoom(w) ? setTimeout(() => queueRead(sku, w), QUEUE_MS) : 0;
  }
  function drawQueue(sku, w) {
    const q = w.queueInfo, box = w.card.querySelector(".queue");
    if (!q || !hasRoom(w)) return;
    if (!box.firstChild) { // built once: the button stays the same element between reads
      const button = el("button", "secondary queue-toggle");
      button.type = "button";
      button.addEventListener("click", async () => {
        const want = w.queueInfo && w.queueInfo.paused ? 0 : 1;
        button.disabled = true;
        const d = await admin("PATCH", "/api/v1/skus/" + encodeURIComponent(sku), { queue_paused: want },
          () => (want ? "paused" : "resumed") + " the waiting room of " + sku);
        button.disabled = false;
        if (d) { clearTimeout(w.queueTimer); w.queueTimer = 0; queueFollow(sku, w); }
      });
      const head = el("div", "queue-head");
      head.append(el("span", "label", "waiting room"), button);
      box.append(head, el("div", "numbers"));
    }
    box.hidden = false;
    w.card.dataset.queue = q.paused ? "paused" : q.sold_out ? "sold_out" : "open";
    const n = (label, value, key) => {
      const span = number(label, value, key), b = span.querySelector("b");
      delete b.dataset.k; // the card's own numbers keep data-k
      b.dataset.q = key;
      return span;
    };
    const nums = [
      n("in line", fmt(q.length, 0), "length"),
      n("waiting", fmt(q.waiting, 0), "waiting"),
      n("admitted", fmt(q.served, 0), "served"),
      n("live tickets", fmt(q.live, 0), "live"),
      n("tickets ended", fmt(q.fin, 0), "fin"),
      n("admitted/s", (q.rate_measured === null ? "–" : fmt(q.rate_measured, 2)) + " of " + fmt(q.rate, 0), "rate"),
      n("paused", q.paused ? "yes" : "no", "paused"),
      n("sold out", q.sold_out ? "yes" : "no", "sold_out")];
    if (q.seed) nums.push(n("seed after the start", q.seed, "seed"));
    box.querySelector(".numbers").replaceChildren(...nums);
    const button = box.querySelector(".queue-toggle");
    button.textContent = q.paused ? "resume admission" : "pause admission";
    button.dataset.action = q.paused ? "resume" : "pause";
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
    const r = await get("/metrics");
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
    $("m-holds").textContent = ["confirmed", "expired", "cancelled"]
      .map((e) => fmt(m.get('inventory_holds_total{event="' + e + '"}'), 0)).join(" / ");
    if (metricHistory.length < 2) return;
    const a = metricHistory[0].m, secs = (now - metricHistory[0].t) / 1000;
    const per = (x) => (x === null ? null : x / secs);
    // an order is placed as "created" (final at once) or "reserved" (a hold)
    const sum = (results) => results.reduce((n, r) => n + (delta(a, m, 'inventory_orders_total{result="' + r + '"}') || 0), 0);
    $("m-orders").textContent = fmt(per(sum(["created", "reserved"])));
    $("m-rules").textContent = fmt(per(sum(["limit_exceeded", "sale_not_started", "sale_ended", "user_required"])));
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
      await refreshMetrics(now);
      // the orders/s of a SKU whose status did not change for a while falls to 0
      for (const [sku, w] of watched) {
        if (!w.status) continue;
        w.history.push({ t: now, orders: w.status.orders, version: w.status.version });
        if (w.history.length > RATE_WINDOW + 1) w.history.shift();
        drawSku(sku, w, w.status, false);
      }
      conn.textContent = "live";
      conn.dataset.state = "ok";
      $("updated").textContent = "updated " + new Date(now).toLocaleTimeString();
      drawClock();
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

  const remembered = initialWatched();
  remembered.forEach(watch);
  saveWatched();
  tick();
  refreshKnown(remembered.length === 0);
  setInterval(() => { for (const w of watched.values()) drawCountdown(w); }, COUNTDOWN_MS);
})();
