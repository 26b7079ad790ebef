// loadtest/peers/node: the seeds' algorithm in Node (fastify + ioredis + redlock), one of the
// SPEC §9 peers that loadtest/peers.sh measures beside inventoryd. Written the way a team
// writes it when it does not use inventoryd: the stock of a SKU is split into segments in
// Redis, each guarded by a Redis lock taken with redlock (a random token set NX PX, released by
// redlock's compare-and-delete script), one process, one ioredis connection.
//
// POST /api/v1/orders {"sku", "quantity"}: from a random segment on, lock it, GET its stock,
// check, DECRBY, RPUSH the order record, unlock; a busy or short segment sends the order to
// the next one. 201 the order; 409 sold_out when a whole round found every segment short;
// 503 lock_timeout when segments stayed busy for DEADLINE_MS; 404 unknown_sku; 400 bad body.
// GET /healthz 200. Keys (loadtest/peers/README.md): peer:{SKU}:stock:K, peer:{SKU}:lock:K,
// peer:{SKU}:orders.
//
// Env: PORT (8080), HOST (127.0.0.1), REDIS_HOST (127.0.0.1), REDIS_PORT (6379),
// SEGMENTS (16), LOCK_TTL_MS (1000), DEADLINE_MS (2000). Dependencies: npm ci (package-lock.json).
"use strict";

const crypto = require("crypto");
const Fastify = require("fastify");
const Redis = require("ioredis");
const { default: Redlock, ExecutionError } = require("redlock");

const segments = parseInt(process.env.SEGMENTS || "16", 10);
const lockTtl = parseInt(process.env.LOCK_TTL_MS || "1000", 10);
const deadlineMs = parseInt(process.env.DEADLINE_MS || "2000", 10);
if (!(segments >= 1)) throw new Error("SEGMENTS must be >= 1");

const redis = new Redis({
  host: process.env.REDIS_HOST || "127.0.0.1",
  port: parseInt(process.env.REDIS_PORT || "6379", 10),
  connectTimeout: 1000,
  commandTimeout: 1000,
  maxRetriesPerRequest: 1,
});
// No retries: a busy segment is not waited for, the order moves to the next one.
const redlock = new Redlock([redis], { retryCount: 0 });
redlock.on("error", () => {}); // a busy lock is expected, not worth a log line

const key = (sku, kind, k) => `peer:{${sku}}:${kind}:${k}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const app = Fastify({ logger: false, bodyLimit: 4096 });

app.get("/healthz", async () => ({ status: "ok" }));

app.post("/api/v1/orders", async (request, reply) => {
  const body = request.body || {};
  const sku = body.sku;
  const qty = body.quantity === undefined ? 1 : body.quantity;
  if (typeof sku !== "string" || sku.length < 1 || sku.length > 64 ||
      !Number.isInteger(qty) || qty < 1 || qty > 1000) {
    return reply.code(400).send({ error: "bad_request", message: "sku 1..64 characters, quantity 1..1000" });
  }
  const start = crypto.randomInt(segments);
  const deadline = Date.now() + deadlineMs;
  try {
    for (;;) {
      let busy = false;
      for (let i = 0; i < segments; i++) {
        const k = (start + i) % segments;
        let lock;
        try {
          lock = await redlock.acquire([key(sku, "lock", k)], lockTtl);
        } catch (e) {
          if (e instanceof ExecutionError) { busy = true; continue; }
          throw e;
        }
        let order = null;
        let missing = false;
        try {
          const stock = await redis.get(key(sku, "stock", k));
          if (stock === null) {
            missing = true;
          } else if (parseInt(stock, 10) >= qty) {
            await redis.decrby(key(sku, "stock", k), qty);
            order = {
              order_id: `${crypto.randomBytes(16).toString("hex")}-${k}`,
              sku, quantity: qty, segment: k,
              created_at: new Date().toISOString(), status: "created",
            };
            await redis.rpush(`peer:{${sku}}:orders`, JSON.stringify(order));
          }
        } finally {
          await lock.release().catch(() => {});
        }
        if (missing) return reply.code(404).send({ error: "unknown_sku", message: "no such SKU" });
        if (order) {
          return reply.code(201).header("Location", `/api/v1/orders/${order.order_id}`).send(order);
        }
      }
      if (!busy) return reply.code(409).send({ error: "sold_out", message: "the SKU is sold out" });
      if (Date.now() > deadline) {
        return reply.code(503).header("Retry-After", "1")
          .send({ error: "lock_timeout", message: "every segment stayed locked" });
      }
      await sleep(1);
    }
  } catch (e) {
    return reply.code(503).send({ error: "unavailable", message: `redis: ${e.message}` });
  }
});

app.listen({ port: parseInt(process.env.PORT || "8080", 10), host: process.env.HOST || "127.0.0.1" })
  .catch((e) => { console.error(e); process.exit(1); });
