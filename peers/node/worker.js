// A peer worker: the Node.js Redlock clients behind the JSON-lines protocol of docs/peers.md,
// as peers/python_worker.py serves the Python clients.
//
//   NODE_PATH=DIR/<client>/node_modules node peers/node/worker.js --client CLIENT --masters HOST:PORT,...
//       [--request-timeout-ms MS] [--retry-delay-ms MS]
//
// (DIR: peers/install.py's cache directory, where `npm ci` installed the exact versions of
// peers/node/<client>/package-lock.json: each client in a directory of its own, with the
// ioredis it runs on.) One request a line on stdin, one answer a line on stdout, in order;
// the first line is a greeting with the client's name, version and claims.
//
// --request-timeout-ms bounds each request to a master (ioredis's commandTimeout, which every
// client here runs on; none by default) and --retry-delay-ms is the mean pause between
// attempts, as each client takes it (its own retry setting); the greeting's `settings` says
// what the client runs with.
//
// Each client is an adapter in ADAPTERS: what it claims, read from its installed source
// (file:line there), the prefix of its keys if it has one (`key_prefix`), its pause between
// attempts (`pause(delayMs)`, with the given mean or the client's default, and the words
// `pauses(delayMs)` for the greeting), and `open(clients)`, which builds the client on one ioredis connection
// per master and returns its session: `acquire(name, ttlMs)` (one attempt: the lock, or null
// when refused), `release(lock)` and `extend(lock, ttlMs)` (throwing Refused when the client
// says no). Everything else (blocking acquires, the held locks, the counter of `incr`, the
// answers) is the generic handler's, the same for every client.
"use strict";

const readline = require("readline");

const OPS = ["acquire", "release", "extend", "incr", "read", "write", "quit"];
// Where a request may ask the worker to SIGSTOP itself ("stop"): the harness pauses a holder
// at a chosen step, and the stop pauses this very process, whatever the client.
const STOPS = ["before", "after"];
// The resource write: SET the counter and INCR its sequence key in one step, so that the
// harness knows the order in which the server applied writes (KEYS[1] the counter, KEYS[2]
// its sequence, ARGV[1] the value; returns the sequence number). As peers/python_worker.py's.
const WRITE_SCRIPT = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCR', KEYS[2])";

function now() {
  // process.hrtime reads CLOCK_MONOTONIC on Linux (libuv), the clock of the Python workers'
  // time.monotonic_ns: the harness orders every worker's events on one time line.
  return Number(process.hrtime.bigint());
}

class Refused extends Error {}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A client's own pause between attempts: `base` ms, jittered uniformly by +- `jitter` ms.
const jittered = (base, jitter) => () => Math.max(0, base + Math.floor((Math.random() * 2 - 1) * jitter));

const ADAPTERS = {
  // node-redlock's maintained fork, @sesamecare-oss/redlock 1.4.0, read from its src/index.ts
  // and src/scripts.ts:
  // - acquire: a Lua script on every master at once ("if any key exists return 0, else SET
  //   key value PX duration"), counted for as soon as a majority said yes, against as soon
  //   as a majority said no (index.ts:353-420); the Lock it returns expires at start +
  //   duration - drift with drift = round(duration * 0.01) + 2 ms (index.ts:233), all on the
  //   WALL clock (Date.now, index.ts:361). It does NOT check that this validity is still
  //   positive when it returns. A refused acquire is retried (retryCount 10, 200 ms +- 100 ms
  //   jitter) and then rolled back on every master with the release script (index.ts:239);
  //   the adapter sets retryCount 0 and repeats until the timeout.
  // - extend: refused without any traffic when the Lock's expiration (wall clock) has passed
  //   (index.ts:277); otherwise a script that compares the value on every key and then SETs
  //   it with the new PX; a key that is gone compares unequal, so it is never re-created.
  // - release: compare-and-delete on every master (the script runs SELECT db first: db 0
  //   here, as for every other client); counted with a majority.
  // - keys: the resource is the key. The value is 16 random bytes in hex (crypto.randomBytes).
  "node-redlock": {
    module: "@sesamecare-oss/redlock",
    supports: ["acquire", "release", "extend", "incr"],
    claims: {
      drift: "round(duration * 0.01) + 2 ms",
      clock: "Date.now (wall clock)",
      validity: "granted with a majority; validity > 0 NOT checked at acquire",
      rollback: "release script on every master after the last refused attempt",
      extend: "refused locally once expired (wall clock); compare then SET PX; never re-creates a key",
      keys: "the resource is the key",
    },
    pause: (delayMs) => (delayMs === undefined ? jittered(200, 100) : jittered(delayMs, delayMs / 2)),
    pauses: (delayMs) =>
      delayMs === undefined
        ? "retryDelay 200 ms, retryJitter 100 ms (its defaults)"
        : `retryDelay ${delayMs} ms, retryJitter ${delayMs / 2} ms`,
    open(clients) {
      const { Redlock, ExecutionError } = require("@sesamecare-oss/redlock");
      const redlock = new Redlock(clients, { retryCount: 0 });
      redlock.on("error", () => {}); // (a refusal is reported by the answer, not as an event)
      const refusal = (error) => {
        if (error instanceof ExecutionError) throw new Refused(error.message);
        throw error;
      };
      return {
        async acquire(name, ttlMs) {
          try {
            const lock = await redlock.acquire([name], ttlMs);
            return { lock, token: lock.value, validity_ms: lock.expiration - Date.now() };
          } catch (error) {
            if (error instanceof ExecutionError) return null;
            throw error;
          }
        },
        release: (lock) => redlock.release(lock).then(() => ({}), refusal),
        extend: (lock, ttlMs) =>
          redlock
            .extend(lock, ttlMs)
            .then((extended) => ({ lock: extended, validity_ms: extended.expiration - Date.now() }), refusal),
      };
    },
  },

  // node-redlock 4.2.0 (npm `redlock`, the last 4.x release), read from its redlock.js:
  // - acquire: the same "none exists, then SET PX" script on every master at once, waiting for
  //   EVERY master's answer (redlock.js:404-411; no per-master timeout); granted with a
  //   majority and `expiration > Date.now()` (redlock.js:419), expiration = start + ttl -
  //   drift, drift = round(ttl * 0.01) + 2 ms (redlock.js:415-416), all on the WALL clock
  //   (Date.now, redlock.js:397). Otherwise the unlock script on every master
  //   (redlock.js:424) and a retry (retryCount 10, 200 ms +- 100 ms); the adapter sets
  //   retryCount 0 in the constructor (a per-call `{retryCount: 0}` is ignored:
  //   `options.retryCount || self.retryCount`, redlock.js:393).
  // - extend: refused without traffic once expiration < Date.now() (redlock.js:298); else a
  //   script that compares every key's value and SETs PX (redlock.js:40-55), counted with a
  //   majority and the same wall-clock validity check; a key that is gone compares unequal,
  //   so it is never re-created. A REFUSED extend runs the failure path of acquire: it
  //   unlocks the lock on every master (redlock.js:424), so a holder whose extend failed on
  //   a majority no longer holds its minority either.
  // - release: compare-and-delete on every master, counted with a majority (redlock.js:278).
  // - keys: the resource is the key; the value is 16 random bytes in hex (redlock.js:449).
  "node-redlock-4": {
    module: "redlock",
    supports: ["acquire", "release", "extend", "incr"],
    claims: {
      drift: "round(ttl * 0.01) + 2 ms",
      clock: "Date.now (wall clock), after every master answered",
      validity: "granted only with a majority and expiration > Date.now()",
      rollback: "unlock script on every master after each refused attempt",
      extend:
        "refused locally once expired (wall clock); compare then SET PX, majority and validity; never re-creates a key; a refused extend unlocks every master",
      keys: "the resource is the key",
    },
    pause: (delayMs) => (delayMs === undefined ? jittered(200, 100) : jittered(delayMs, delayMs / 2)),
    pauses: (delayMs) =>
      delayMs === undefined
        ? "retryDelay 200 ms, retryJitter 100 ms (its defaults)"
        : `retryDelay ${delayMs} ms, retryJitter ${delayMs / 2} ms`,
    open(clients) {
      const Redlock = require("redlock");
      const redlock = new Redlock(clients, { retryCount: 0 });
      redlock.on("clientError", () => {}); // (a master's error is a refusal, in the answer)
      const refusal = (error) => {
        if (error instanceof Redlock.LockError) throw new Refused(error.message);
        throw error;
      };
      return {
        async acquire(name, ttlMs) {
          try {
            const lock = await redlock.lock(name, ttlMs);
            return { lock, token: lock.value, validity_ms: lock.expiration - Date.now() };
          } catch (error) {
            if (error instanceof Redlock.LockError) return null;
            throw error;
          }
        },
        release: (lock) => Promise.resolve(redlock.unlock(lock)).then(() => ({}), refusal),
        extend: (lock, ttlMs) =>
          Promise.resolve(redlock.extend(lock, ttlMs)).then(
            (extended) => ({ lock: extended, validity_ms: extended.expiration - Date.now() }),
            refusal,
          ),
      };
    },
  },

  // redis-semaphore 5.8.0's RedlockMutex, read from its lib/ (compiled JavaScript):
  // - keys: RedlockMutex(clients, K) lives at the key `mutex:K` (RedlockMutex.js:22).
  // - acquire (redlockMutex/acquire.js:12-37): `SET key id PX ttl NX` on every master at once,
  //   waiting for every answer (any error counts 0); granted with a majority
  //   (utils/redlock.js:6, round((n + 1) / 2)). NO elapsed time, drift or validity at all:
  //   a grant that took longer than the ttl is still a grant, and the lock tells no
  //   validity. Otherwise compare-and-delete on every master and retryInterval (10 ms by
  //   default, misc.js:9) before the next attempt, until acquireTimeout (10 s, on Date.now).
  //   The adapter makes one attempt a call (acquireAttemptsLimit 1) and repeats until the
  //   timeout with that 10 ms pause.
  // - extend: no public call; its watchdog (every 0.8 ttl, Lock.js:48) runs `_refresh`
  //   (redlockMutex/refresh.js:12-46): compare-and-PEXPIRE on every master, counted with a
  //   majority and no time check; then it SETs the key NX on the masters where the compare
  //   failed (re-creating it where it expired or was lost, while a majority still has it);
  //   short of a majority it deletes the lock on every master and calls onLockLost, which by
  //   default THROWS from a timer (misc.js:11-12): an unhandled rejection that ends a Node
  //   process. The adapter turns the watchdog off (refreshInterval 0) and extends by calling
  //   `_refresh` with the new ttl.
  // - release: compare-and-delete on every master; nothing counted or reported.
  // - the value is crypto.randomUUID() (Lock.js:109).
  "redis-semaphore": {
    module: "redis-semaphore",
    supports: ["acquire", "release", "extend", "incr"],
    claims: {
      drift: "none",
      clock: "none for validity (Date.now for acquireTimeout only)",
      validity: "granted with a majority; no elapsed time or validity at all",
      rollback: "compare-and-delete on every master after each refused attempt",
      extend:
        "watchdog refresh: compare-and-pexpire, majority, no validity check; then SET NX where the key is gone; short of a majority deletes everywhere",
      keys: "RedlockMutex(clients, K) is the key mutex:K",
    },
    key_prefix: "mutex:",
    pause: (delayMs) => () => delayMs ?? 10,
    pauses: (delayMs) => (delayMs === undefined ? "retryInterval 10 ms, fixed (its default)" : `retryInterval ${delayMs} ms, fixed`),
    open(clients) {
      const { RedlockMutex } = require("redis-semaphore");
      const prefix = this.key_prefix;
      return {
        async acquire(name, ttlMs) {
          if (!name.startsWith(prefix)) {
            throw new Error(`redis-semaphore's keys all start with '${prefix}'; name '${name}' does not`);
          }
          const lock = new RedlockMutex(clients, name.slice(prefix.length), {
            lockTimeout: ttlMs,
            acquireAttemptsLimit: 1,
            refreshInterval: 0,
            onLockLost: () => {},
          });
          return (await lock.tryAcquire()) ? { lock, token: lock.identifier } : null;
        },
        release: (lock) => lock.release().then(() => ({})),
        async extend(lock, ttlMs) {
          lock._acquireOptions.lockTimeout = ttlMs;
          if (!(await lock._refresh())) throw new Refused("not refreshed on a majority");
          return { lock };
        },
      };
    },
  },
};

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    args[argv[i].replace(/^--/, "")] = argv[i + 1];
  }
  if (!Object.hasOwn(ADAPTERS, args.client || "") || !args.masters) {
    throw new Error(
      `usage: worker.js --client {${Object.keys(ADAPTERS).join(",")}} --masters HOST:PORT,... ` +
        "[--request-timeout-ms MS] [--retry-delay-ms MS]",
    );
  }
  for (const option of ["request-timeout-ms", "retry-delay-ms"]) {
    if (args[option] === undefined) continue;
    const value = Number(args[option]);
    if (!(value > 0)) throw new Error(`--${option} must be > 0, not ${JSON.stringify(args[option])}`);
    args[option] = value;
  }
  return args;
}


// The answer with deadline_ns, the moment on this worker's clock until which the client says
// the lock holds, where the client tells its validity.
function withDeadline(answer) {
  if (answer.validity_ms === undefined || answer.validity_ms === null) return answer;
  return { ...answer, deadline_ns: now() + Math.round(answer.validity_ms * 1e6) };
}

// SIGSTOP this process (a holder paused at a chosen step); once continued, when it stopped
// and when it went on. The signal is delivered before kill returns (to itself, unblocked).
function stopSelf() {
  const stopped = now();
  process.kill(process.pid, "SIGSTOP");
  return { stopped_ns: stopped, continued_ns: now() };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const adapter = ADAPTERS[args.client];
  // The ioredis of the client's own install (NODE_PATH): node-redlock 4 runs on ioredis 4.
  const Redis = require("ioredis");
  // No retries inside ioredis: a master that is down answers an error at once, as it does
  // for the other clients, instead of queueing the command until it comes back.
  const addresses = args.masters.split(",").map((address) => {
    const at = address.lastIndexOf(":");
    return { host: address.slice(0, at), port: Number(address.slice(at + 1)) };
  });
  const timeoutMs = args["request-timeout-ms"];
  const delayMs = args["retry-delay-ms"];
  const bound = timeoutMs === undefined ? {} : { commandTimeout: Math.round(timeoutMs) };
  const clients = addresses.map(
    ({ host, port }) =>
      new Redis({ host, port, maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true, ...bound }),
  );
  const pause = adapter.pause(delayMs);
  const settings = {
    request_timeout:
      timeoutMs === undefined
        ? "none (ioredis's default: no commandTimeout)"
        : `commandTimeout ${Math.round(timeoutMs)} ms on each master's ioredis client`,
    retry_delay: adapter.pauses(delayMs),
  };
  await Promise.all(clients.map((client) => client.connect()));
  const session = adapter.open(clients);
  const held = new Map();
  const resources = new Map();

  async function acquire(name, ttlMs, blocking, timeoutS) {
    // The deadline on the monotonic clock: a step of the wall clock must not end the wait.
    const deadline = now() + (blocking ? timeoutS * 1e9 : 0);
    for (;;) {
      const granted = await session.acquire(name, Math.round(ttlMs));
      if (granted) {
        const { lock, ...answer } = granted;
        held.set(name, lock);
        return answer;
      }
      if (now() >= deadline) throw new Refused("not acquired");
      await sleep(Math.min(pause(), Math.max(0, (deadline - now()) / 1e6)));
    }
  }

  function take(name) {
    if (!held.has(name)) throw new Error(`'${name}' is not held by this worker`);
    return held.get(name);
  }

  async function release(name) {
    const lock = take(name);
    held.delete(name);
    return session.release(lock);
  }

  async function extend(name, ttlMs) {
    const { lock, ...answer } = await session.extend(take(name), Math.round(ttlMs));
    held.set(name, lock);
    return answer;
  }

  function resource(address) {
    let counter = resources.get(address);
    if (!counter) {
      const at = address.lastIndexOf(":");
      counter = new Redis({ host: address.slice(0, at), port: Number(address.slice(at + 1)) });
      resources.set(address, counter);
    }
    return counter;
  }

  // SET the counter to `value` if until_ns (the caller's deadline) has not passed: a careful
  // holder checks its lock before it writes, and a stop "before" falls between that check
  // and the write (the stale write of a paused holder).
  async function writeResource(request) {
    if (request.until_ns !== undefined && request.until_ns !== null && now() >= request.until_ns) {
      return { written: false };
    }
    const stopped = request.stop === "before" ? stopSelf() : {};
    const seq = await resource(request.resource).eval(
      WRITE_SCRIPT,
      2,
      request.counter,
      `${request.counter}:seq`,
      String(request.value),
    );
    return { written: true, seq: Number(seq), ...stopped };
  }

  async function incr(request) {
    const counter = resource(request.resource);
    const granted = await acquire(request.name, request.ttl_ms, true, request.timeout_s ?? 30);
    const acquired = now();
    const read = await counter.get(request.counter);
    await sleep(request.hold_ms ?? 1);
    const value = Number(read ?? 0) + 1;
    await counter.set(request.counter, String(value));
    const releasing = now();
    await release(request.name);
    return { token: granted.token, value, acquired_ns: acquired, releasing_ns: releasing };
  }

  async function handle(request) {
    const stop = request.stop ?? null;
    if (stop !== null && !STOPS.includes(stop)) {
      throw new Error(`stop must be one of ${STOPS.join(", ")}, not ${JSON.stringify(stop)}`);
    }
    const before = stop === "before" && request.op !== "write" ? stopSelf() : {};
    const answer = await step(request);
    const after = stop === "after" ? stopSelf() : {};
    return { ...answer, ...before, ...after };
  }

  async function step(request) {
    switch (request.op) {
      case "acquire":
        return withDeadline(await acquire(request.name, request.ttl_ms, Boolean(request.blocking), request.timeout_s ?? 10));
      case "release":
        return release(request.name);
      case "extend":
        return withDeadline(await extend(request.name, request.ttl_ms));
      case "incr":
        return incr(request);
      case "read": {
        const read = await resource(request.resource).get(request.counter);
        return { value: Number(read ?? 0) };
      }
      case "write":
        return writeResource(request);
      default:
        throw new Error(`unknown op ${JSON.stringify(request.op)}; the ops are ${OPS.join(", ")}`);
    }
  }

  const write = (object) => process.stdout.write(JSON.stringify(object) + "\n");
  write({
    hello: args.client,
    version: require(`${adapter.module}/package.json`).version,
    language: "node",
    supports: [...adapter.supports, "read", "write"],
    claims: adapter.claims,
    clock: "CLOCK_MONOTONIC ns",
    key_prefix: adapter.key_prefix ?? "",
    wraps: adapter.wraps ?? "",
    settings,
  });

  const lines = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const t0 = now();
    let request = {};
    let answer;
    try {
      request = JSON.parse(line);
      answer = request.op === "quit" ? { ok: true } : { ok: true, ...(await handle(request)) };
    } catch (error) {
      answer =
        error instanceof Refused
          ? { ok: false, refused: true, error: error.message }
          : { ok: false, error: `${error.name}: ${error.message}` };
    }
    answer.t0 = t0;
    answer.t1 = now();
    if (request && request.id !== undefined) answer.id = request.id;
    write(answer);
    if (request && request.op === "quit") break;
  }
  await Promise.all([...clients, ...resources.values()].map((client) => client.quit().catch(() => {})));
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack || error}\n`);
    process.exit(1);
  },
);
