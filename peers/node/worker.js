// A peer worker: node-redlock (@sesamecare-oss/redlock on ioredis) behind the JSON-lines
// protocol of docs/peers.md, as peers/python_worker.py serves the Python clients.
//
//   NODE_PATH=DIR/node-redlock/node_modules node peers/node/worker.js --client node-redlock --masters HOST:PORT,...
//
// (DIR: peers/install.py's cache directory, where `npm ci` installed package-lock.json's
// exact versions.) One request a line on stdin, one answer a line on stdout, in order; the
// first line is a greeting with the client's name, version and claims.
//
// What node-redlock 1.4.0 claims, read from its src/index.ts and src/scripts.ts:
// - acquire: a Lua script on every master at once ("if any key exists return 0, else SET
//   key value PX duration"), counted for as soon as a majority said yes, against as soon
//   as a majority said no; the Lock it returns expires at start + duration - drift with
//   drift = round(duration * 0.01) + 2 ms, all on the WALL clock (Date.now). It does NOT
//   check that this validity is still positive when it returns. A refused acquire is
//   retried (retryCount 10, 200 ms +- 100 ms jitter) and then rolled back on every master
//   with the release script; the adapter sets retryCount 0 and repeats until the timeout.
// - extend: refused without any traffic when the Lock's expiration (wall clock) has passed;
//   otherwise a script that compares the value on every key and then SETs it with the new
//   PX; a key that is gone compares unequal, so it is never re-created.
// - release: compare-and-delete on every master (the script runs SELECT db first: db 0
//   here, as for every other client); counted with a majority.
// - keys: the resource is the key. The value is 16 random bytes in hex (crypto.randomBytes).
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

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    args[argv[i].replace(/^--/, "")] = argv[i + 1];
  }
  if (args.client !== "node-redlock" || !args.masters) {
    throw new Error("usage: worker.js --client node-redlock --masters HOST:PORT,...");
  }
  return args;
}

class Refused extends Error {}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

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
  const { Redlock, ExecutionError } = require("@sesamecare-oss/redlock");
  const Redis = require("ioredis");
  const addresses = args.masters.split(",").map((address) => {
    const at = address.lastIndexOf(":");
    return { host: address.slice(0, at), port: Number(address.slice(at + 1)) };
  });
  // No retries inside ioredis: a master that is down answers an error at once, as it does
  // for the other clients, instead of queueing the command until it comes back.
  const clients = addresses.map(
    ({ host, port }) => new Redis({ host, port, maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true }),
  );
  await Promise.all(clients.map((client) => client.connect()));
  const redlock = new Redlock(clients, { retryCount: 0 });
  redlock.on("error", () => {}); // (a refusal is reported by the answer, not as an event)
  const held = new Map();
  const resources = new Map();

  async function acquire(name, ttlMs, blocking, timeoutS) {
    const deadline = Date.now() + (blocking ? timeoutS * 1000 : 0);
    for (;;) {
      try {
        const lock = await redlock.acquire([name], Math.round(ttlMs));
        held.set(name, lock);
        return { token: lock.value, validity_ms: lock.expiration - Date.now() };
      } catch (error) {
        if (!(error instanceof ExecutionError)) throw error;
        if (Date.now() >= deadline) throw new Refused("not acquired");
      }
      // node-redlock's own pause between attempts: retryDelay 200 ms +- retryJitter 100 ms.
      await sleep(Math.max(0, 200 + Math.floor((Math.random() * 2 - 1) * 100)));
    }
  }

  function take(name) {
    if (!held.has(name)) throw new Error(`'${name}' is not held by this worker`);
    return held.get(name);
  }

  async function release(name) {
    const lock = take(name);
    held.delete(name);
    try {
      await redlock.release(lock);
    } catch (error) {
      if (error instanceof ExecutionError) throw new Refused(error.message);
      throw error;
    }
    return {};
  }

  async function extend(name, ttlMs) {
    try {
      const extended = await redlock.extend(take(name), Math.round(ttlMs));
      held.set(name, extended);
      return { validity_ms: extended.expiration - Date.now() };
    } catch (error) {
      if (error instanceof ExecutionError) throw new Refused(error.message);
      throw error;
    }
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
    hello: "node-redlock",
    version: require("@sesamecare-oss/redlock/package.json").version,
    language: "node",
    supports: ["acquire", "release", "extend", "incr", "read", "write"],
    claims: {
      drift: "round(duration * 0.01) + 2 ms",
      clock: "Date.now (wall clock)",
      validity: "granted with a majority; validity > 0 NOT checked at acquire",
      rollback: "release script on every master after the last refused attempt",
      extend: "refused locally once expired (wall clock); compare then SET PX; never re-creates a key",
      keys: "the resource is the key",
    },
    clock: "CLOCK_MONOTONIC ns",
    key_prefix: "",
    wraps: "",
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
