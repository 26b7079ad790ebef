// inventoryd's queue page (GET /queue?sku=NAME): a buyer's way through a SKU's waiting room
// (SPEC §16, docs/api.md "The queue page"). It joins the line (POST /api/v1/skus/{sku}/queue),
// shows the place (position, how many are ahead, the estimated wait) and asks for it again no
// sooner than the answer's retry_after_s says (polling is the waiting room's load), says
// "waiting for the start", "paused" or "sold out" when the place does, and once admitted shows
// a Buy button: POST /api/v1/orders with the ticket and an Idempotency-Key kept per ticket (a
// retry after a lost answer gets the same order back, never a second one), then the order.
// When the SKU's queue_pow_bits is above 0 and this server has the challenge endpoint
// (GET /api/v1/skus/{sku}/queue/challenge), the proof of work is solved here with
// crypto.subtle (SHA-256) before the join.
// Who the buyer is: a bearer token handed over in the URL's fragment (#token=..., never sent to
// a server, taken out of the address bar at once and kept in sessionStorage for this tab) or
// put in sessionStorage ("inventoryd.token") by the shop's login; without one the requests go
// without Authorization, for a trusted proxy that names the user by its header. Only this
// origin is contacted.
"use strict";
(function () {
  const SKU_RE = /^[A-Za-z0-9_.:-]{1,64}$/;
  const TOKEN_KEY = "inventoryd.token";
  const ADMITTED_POLL_S = 5; // an admitted place is read again to learn used / expired / sold out
  const SOLD_OUT_POLL_S = 10; // units may come back (holds expiring, cancels)
  const $ = (id) => document.getElementById(id);
  const sku = new URLSearchParams(location.search).get("sku") || "";
  const base = "/api/v1/skus/" + encodeURIComponent(sku);
  let token = null;
  let place = null; // the last place answered
  let pollTimer = 0;
  let bought = false;
  let saleStart = null; // the SKU's sale_start from its status, until a place answer says it

  // ---- who the buyer is ------------------------------------------------------------------------
  function takeToken() {
    const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (m) {
      const t = decodeURIComponent(m[1]);
      try { sessionStorage.setItem(TOKEN_KEY, t); } catch (e) { /* private mode: this page only */ }
      history.replaceState(null, "", location.pathname + location.search); // out of the address bar
      return t;
    }
    try { return sessionStorage.getItem(TOKEN_KEY); } catch (e) { return null; }
  }
  function headers(extra) {
    const h = Object.assign({ "Content-Type": "application/json" }, extra || {});
    if (token) h.Authorization = "Bearer " + token;
    return h;
  }
  async function call(method, path, body, extra) {
    const r = await fetch(path, {
      method, headers: headers(extra), cache: "no-store", credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let json = null;
    try { json = await r.json(); } catch (e) { json = null; }
    return { status: r.status, json, retryAfter: Number(r.headers.get("Retry-After")) || 0 };
  }

  // ---- drawing -------------------------------------------------------------------------------
  const STATE_TEXT = {
    waiting: "You are in line",
    waiting_for_start: "Waiting for the start",
    paused: "Paused: the sale holds admission for now; your place is kept",
    admitted: "It is your turn",
    used: "Your ticket was used: your order is made",
    expired: "Your ticket expired unused",
    sold_out: "Sold out",
  };
  function fmtWait(s) {
    if (s === null || s === undefined) return "–";
    if (s < 60) return s + " s";
    const m = Math.floor(s / 60), r = s % 60;
    return m < 60 ? m + " min " + String(r).padStart(2, "0") + " s" : Math.floor(m / 60) + " h " + (m % 60) + " min";
  }
  function setState(state, text) {
    $("state").dataset.state = state;
    $("room").dataset.state = state;
    $("state").textContent = text;
  }
  function say(text) { $("message").textContent = text || ""; }
  function drawPlace(p, retry) {
    place = p;
    setState(p.state, STATE_TEXT[p.state] || p.state);
    $("position").textContent = p.position === null || p.position === undefined ? "–" : String(p.position);
    $("ahead").textContent = p.ahead === null || p.ahead === undefined ? "–" : String(p.ahead);
    $("wait").textContent = fmtWait(p.estimated_wait_s);
    $("retry").textContent = retry ? retry + " s" : "–";
    const start = Date.parse(p.sale_start || saleStart || "");
    $("start").hidden = !isFinite(start) || p.state !== "waiting_for_start";
    if (isFinite(start)) $("start").textContent = "the sale starts at " + new Date(start).toLocaleString();
    $("seed").hidden = !p.seed;
    if (p.seed) $("seed").textContent = "the start's seed (anyone can recompute the order of the early joins): " + p.seed;
    const admitted = p.state === "admitted" && !!p.ticket && !bought;
    $("admitted").hidden = !admitted;
    if (admitted) {
      $("buy").dataset.ticket = p.ticket;
      $("ticket-exp").textContent = new Date(Date.parse(p.expires_at)).toLocaleTimeString();
      $("ticket-exp").dataset.expiresAt = p.expires_at;
      drawTicketLeft();
    }
  }
  function drawTicketLeft() {
    const at = Date.parse($("ticket-exp").dataset.expiresAt || "");
    if (isFinite(at)) $("ticket-left").textContent = fmtWait(Math.max(0, Math.ceil((at - Date.now()) / 1000)));
  }

  // ---- the proof of work (queue_pow_bits > 0) --------------------------------------------------
  // SHA-256(challenge + "." + nonce) must start with `bits` zero bits (docs/api.md). Hashes are
  // asked for in batches: crypto.subtle.digest is asynchronous, a batch keeps it busy.
  function leadingZeroBits(buf) {
    const b = new Uint8Array(buf);
    let n = 0;
    for (const x of b) {
      if (x === 0) { n += 8; continue; }
      return n + Math.clz32(x) - 24;
    }
    return n;
  }
  async function solve(challenge, bits) {
    const enc = new TextEncoder();
    const BATCH = 256;
    for (let i = 0; ; i += BATCH) {
      const tries = [];
      for (let k = i; k < i + BATCH; k++)
        tries.push(crypto.subtle.digest("SHA-256", enc.encode(challenge + "." + k.toString(36))));
      const got = await Promise.all(tries);
      for (let k = 0; k < BATCH; k++)
        if (leadingZeroBits(got[k]) >= bits) return (i + k).toString(36);
      if (i % (BATCH * 64) === 0) $("pow").textContent = "proving this is a browser, not a script… (" + (i + BATCH) + " tries)";
    }
  }
  // The join's body: {} or {"pow": {challenge, nonce}} when the SKU asks for one and this server
  // issues challenges (the endpoint answers 404 not_found on a server without it: then the join
  // is sent without, and the server judges).
  async function joinBody(powBits) {
    if (!(powBits > 0)) return {};
    const c = await call("GET", base + "/queue/challenge");
    if (c.status === 404 && c.json && c.json.error === "not_found") return {};
    if (c.status !== 200 || !c.json || !c.json.challenge) throw new Error("challenge: HTTP " + c.status + (c.json && c.json.error ? " " + c.json.error : ""));
    if (!(window.crypto && crypto.subtle)) throw new Error("the proof of work needs crypto.subtle: open this page over HTTPS");
    $("pow").hidden = false;
    $("pow").textContent = "proving this is a browser, not a script…";
    const t0 = performance.now();
    const nonce = await solve(c.json.challenge, c.json.bits);
    $("pow").textContent = "proof of work done (" + c.json.bits + " bits, " + Math.round(performance.now() - t0) + " ms)";
    $("pow").dataset.done = "1";
    return { pow: { challenge: c.json.challenge, nonce } };
  }

  // ---- join and poll -------------------------------------------------------------------------
  function later(seconds, fn) {
    clearTimeout(pollTimer);
    pollTimer = setTimeout(fn, Math.max(1, seconds) * 1000);
  }
  function failed(r, what) {
    const e = r.json && r.json.error ? r.json.error + ": " + r.json.message : "HTTP " + r.status;
    say(what + ": " + e);
  }
  async function join() {
    let powBits = 0;
    const st = await call("GET", base);
    if (st.status === 200 && st.json) { powBits = st.json.queue_pow_bits || 0; saleStart = st.json.sale_start; }
    else if (st.status === 404) { setState("error", "No such SKU"); return; }
    const r = await call("POST", base + "/queue", await joinBody(powBits));
    if (r.status === 200 || r.status === 201) { say(""); placed(r); return; }
    if (r.status === 401) { setState("error", "Sign in first"); failed(r, "join"); return; }
    if (r.status === 409 && r.json && r.json.error === "no_waiting_room") { setState("error", "This SKU has no waiting room"); return; }
    failed(r, "join");
    later(r.retryAfter || 2, () => join().catch(oops)); // 429, 503: the same place comes back
  }
  function placed(r) {
    const p = r.json;
    const retry = p.retry_after_s || r.retryAfter || 0;
    drawPlace(p, retry);
    if (bought || p.state === "used" || p.state === "expired") return; // final
    const next = retry || (p.state === "admitted" ? ADMITTED_POLL_S : p.state === "sold_out" ? SOLD_OUT_POLL_S : 1);
    if (retry) $("retry").textContent = next + " s";
    later(next, () => poll().catch(oops));
  }
  async function poll() {
    const r = await call("GET", base + "/queue");
    if (r.status === 200) { say(""); placed(r); return; }
    if (r.status === 404 && r.json && r.json.error === "not_found") { join().catch(oops); return; } // no place (yet): join
    failed(r, "place");
    later(r.retryAfter || 2, () => poll().catch(oops));
  }
  function oops(e) {
    say(String(e && e.message || e));
    later(2, () => (place ? poll() : join()).catch(oops));
  }

  // ---- buy -------------------------------------------------------------------------------------
  // One Idempotency-Key per ticket, kept for the tab: a click after a lost answer replays it.
  function orderKey(ticket) {
    const k = "inventoryd.order-key." + ticket;
    let key = null;
    try { key = sessionStorage.getItem(k); } catch (e) { key = null; }
    if (!key) {
      const b = crypto.getRandomValues(new Uint8Array(16));
      key = "qp-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
      try { sessionStorage.setItem(k, key); } catch (e) { /* this click only */ }
    }
    return key;
  }
  async function buy() {
    const ticket = $("buy").dataset.ticket;
    if (!ticket) return;
    $("buy").disabled = true;
    say("");
    let r;
    try {
      r = await call("POST", "/api/v1/orders", { sku, quantity: 1, ticket }, { "Idempotency-Key": orderKey(ticket) });
    } catch (e) {
      say("the order's answer was lost: press Buy again (the same order comes back, never a second)");
      $("buy").disabled = false;
      return;
    }
    $("order").dataset.http = String(r.status);
    if (r.status === 200 || r.status === 201) {
      const o = r.json;
      bought = true;
      clearTimeout(pollTimer);
      $("admitted").hidden = true;
      $("order").hidden = false;
      $("order").dataset.status = o.status;
      $("order").dataset.orderId = o.order_id;
      $("order-status").textContent = o.status;
      $("order-quantity").textContent = String(o.quantity);
      $("order-sku").textContent = o.sku;
      $("order-id").textContent = o.order_id;
      setState("used", "Bought: order " + o.status);
      return;
    }
    const code = r.json && r.json.error;
    failed(r, "order");
    if (code === "sold_out" || code === "insufficient_stock") setState("sold_out", STATE_TEXT.sold_out);
    else if (code === "ticket_expired") setState("expired", STATE_TEXT.expired);
    else if (code === "ticket_used") setState("used", "This ticket was used already");
    else $("buy").disabled = false; // 503 and the like: try again, the same key
  }

  // ---- start -----------------------------------------------------------------------------------
  $("buy").addEventListener("click", () => { buy().catch((e) => { say(String(e)); $("buy").disabled = false; }); });
  setInterval(drawTicketLeft, 1000);
  token = takeToken();
  if (!SKU_RE.test(sku)) {
    setState("error", "No SKU: open /queue?sku=NAME");
    return;
  }
  $("sku").textContent = sku;
  document.title = "Waiting room — " + sku;
  join().catch(oops);
})();
