// loadtest/peers/go: the seeds' algorithm in Go (net/http + redigo), one of the SPEC §9 peers
// that loadtest/peers.sh measures beside inventoryd. Written the way a team writes it when it
// does not use inventoryd: the stock of a SKU is split into segments in Redis, each guarded by
// a Redis lock (SET NX PX with a random token, released by a compare-and-delete script).
//
// POST /api/v1/orders {"sku", "quantity"}: from a random segment on, lock it, GET its stock,
// check, DECRBY, RPUSH the order record, unlock; a busy or short segment sends the order to
// the next one. 201 the order; 409 sold_out when a whole round found every segment short;
// 503 lock_timeout when segments stayed busy for -deadline-ms; 404 unknown_sku; 400 bad body.
// GET /healthz 200. Keys (loadtest/peers/README.md): peer:{SKU}:stock:K, peer:{SKU}:lock:K,
// peer:{SKU}:orders.
//
// Build (offline, Debian's golang-go + golang-github-gomodule-redigo-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o peer-go main.go
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	mrand "math/rand"
	"net/http"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"
)

// The usual unlock: delete the key only while it still holds our token.
var releaseScript = redis.NewScript(1, `
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`)

var (
	pool       *redis.Pool
	segments   int
	lockTTL    int
	deadlineMs int
)

type orderReq struct {
	Sku      string `json:"sku"`
	Quantity *int   `json:"quantity"`
}

type order struct {
	OrderID   string `json:"order_id"`
	Sku       string `json:"sku"`
	Quantity  int    `json:"quantity"`
	Segment   int    `json:"segment"`
	CreatedAt string `json:"created_at"`
	Status    string `json:"status"`
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func reply(w http.ResponseWriter, status int, body interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	reply(w, status, map[string]string{"error": code, "message": msg})
}

func key(sku, kind string, k int) string {
	return fmt.Sprintf("peer:{%s}:%s:%d", sku, kind, k)
}

func createOrder(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		fail(w, http.StatusMethodNotAllowed, "method_not_allowed", "POST only")
		return
	}
	var req orderReq
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "bad_request", "body is not {\"sku\": string, \"quantity\": integer}")
		return
	}
	qty := 1
	if req.Quantity != nil {
		qty = *req.Quantity
	}
	if req.Sku == "" || len(req.Sku) > 64 || qty < 1 || qty > 1000 {
		fail(w, http.StatusBadRequest, "bad_request", "sku 1..64 characters, quantity 1..1000")
		return
	}

	conn := pool.Get()
	defer conn.Close()
	start := mrand.Intn(segments)
	deadline := time.Now().Add(time.Duration(deadlineMs) * time.Millisecond)
	for {
		busy := false
		for i := 0; i < segments; i++ {
			k := (start + i) % segments
			lockKey := key(req.Sku, "lock", k)
			token := randomHex(16)
			ok, err := redis.String(conn.Do("SET", lockKey, token, "NX", "PX", lockTTL))
			if err == redis.ErrNil {
				busy = true
				continue
			}
			if err != nil || ok != "OK" {
				fail(w, http.StatusServiceUnavailable, "unavailable", "redis: "+fmt.Sprint(err))
				return
			}
			o, status, err := sellFromSegment(conn, req.Sku, k, qty)
			if _, rerr := releaseScript.Do(conn, lockKey, token); rerr != nil && err == nil {
				log.Printf("unlock %s: %v", lockKey, rerr)
			}
			if err != nil {
				fail(w, http.StatusServiceUnavailable, "unavailable", "redis: "+err.Error())
				return
			}
			switch status {
			case http.StatusCreated:
				w.Header().Set("Location", "/api/v1/orders/"+o.OrderID)
				reply(w, http.StatusCreated, o)
				return
			case http.StatusNotFound:
				fail(w, http.StatusNotFound, "unknown_sku", "no such SKU")
				return
			}
		}
		if !busy {
			fail(w, http.StatusConflict, "sold_out", "the SKU is sold out")
			return
		}
		if time.Now().After(deadline) {
			w.Header().Set("Retry-After", "1")
			fail(w, http.StatusServiceUnavailable, "lock_timeout", "every segment stayed locked")
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// sellFromSegment runs under segment k's lock: GET, check, DECRBY, RPUSH. It returns 201 and
// the order, 409 when the segment is short, 404 when the SKU has no such segment.
func sellFromSegment(conn redis.Conn, sku string, k, qty int) (*order, int, error) {
	stock, err := redis.Int(conn.Do("GET", key(sku, "stock", k)))
	if err == redis.ErrNil {
		return nil, http.StatusNotFound, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if stock < qty {
		return nil, http.StatusConflict, nil
	}
	if _, err := conn.Do("DECRBY", key(sku, "stock", k), qty); err != nil {
		return nil, 0, err
	}
	o := &order{OrderID: randomHex(16) + "-" + strconv.Itoa(k), Sku: sku, Quantity: qty,
		Segment: k, CreatedAt: time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		Status: "created"}
	rec, _ := json.Marshal(o)
	if _, err := conn.Do("RPUSH", fmt.Sprintf("peer:{%s}:orders", sku), rec); err != nil {
		return nil, 0, err
	}
	return o, http.StatusCreated, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis host:port")
	flag.IntVar(&segments, "segments", 16, "segments per SKU")
	flag.IntVar(&lockTTL, "lock-ttl-ms", 1000, "lock lease (PX)")
	flag.IntVar(&deadlineMs, "deadline-ms", 2000, "how long an order waits for busy segments")
	flag.Parse()
	mrand.Seed(time.Now().UnixNano())
	if segments < 1 {
		log.Fatal("-segments must be >= 1")
	}
	pool = &redis.Pool{
		MaxIdle:     256,
		IdleTimeout: time.Minute,
		Dial: func() (redis.Conn, error) {
			return redis.Dial("tcp", *redisAddr, redis.DialConnectTimeout(time.Second),
				redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second))
		},
	}
	http.HandleFunc("/api/v1/orders", createOrder)
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	srv := &http.Server{Addr: *listen, ReadHeaderTimeout: 60 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
