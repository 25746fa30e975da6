// node-redlock (the maintained @sesamecare-oss/redlock fork, on ioredis) on the same masters
// as the Python client, C concurrent loops for a fixed time after a warm-up. Prints one JSON
// line. Without RETRY_DELAY_MS: lock+unlock on distinct names, non-blocking (retryCount 0).
// With it: contention, every loop taking ONE name in turn (blocking: retrying every
// RETRY_DELAY_MS, node-redlock's own jitter, until it gets it), with each loop's count.
//
//   node redlock_bench.js '["127.0.0.1:7001", ...]' CONCURRENCY SECONDS WARMUP_SECONDS [RETRY_DELAY_MS]
"use strict";
const { Redlock } = require("@sesamecare-oss/redlock");
const Redis = require("ioredis");

async function main() {
  const [mastersJson, concurrencyText, secondsText, warmupText, retryDelayText] = process.argv.slice(2);
  const contended = retryDelayText !== undefined;
  const masters = JSON.parse(mastersJson);
  const concurrency = Number(concurrencyText);
  const seconds = Number(secondsText);
  const warmup = Number(warmupText);
  const clients = masters.map((hostPort) => {
    const [host, port] = hostPort.split(":");
    return new Redis({ host, port: Number(port), enableOfflineQueue: true, maxRetriesPerRequest: 0 });
  });
  await Promise.all(clients.map((client) => client.ping()));
  const redlock = new Redlock(
    clients,
    contended
      ? { retryCount: -1, retryDelay: Number(retryDelayText), driftFactor: 0.01, automaticExtensionThreshold: 0 }
      : { retryCount: 0, driftFactor: 0.01, automaticExtensionThreshold: 0 }
  );
  redlock.on("error", () => {}); // a refused attempt is counted below, not printed

  let counter = 0;
  let measuring = false;
  let ops = 0;
  let errors = 0;
  const latencies = [];
  const perLoop = Array.from({ length: concurrency }, () => 0);
  async function loop(until, index) {
    while (process.hrtime.bigint() < until) {
      const name = contended ? `node-bench:${process.pid}:contended` : `node-bench:${process.pid}:${counter++}`;
      const started = process.hrtime.bigint();
      try {
        const lock = await redlock.acquire([name], 10000);
        await lock.release();
        if (measuring) {
          ops += 1;
          perLoop[index] += 1;
          latencies.push(Number(process.hrtime.bigint() - started) / 1000);
        }
      } catch (error) {
        if (measuring) errors += 1;
      }
    }
  }
  const ns = (s) => BigInt(Math.round(s * 1e9));
  await Promise.all(Array.from({ length: concurrency }, (_, i) => loop(process.hrtime.bigint() + ns(warmup), i)));
  measuring = true;
  const cpuBefore = process.cpuUsage();
  const began = process.hrtime.bigint();
  const until = began + ns(seconds);
  await Promise.all(Array.from({ length: concurrency }, (_, i) => loop(until, i)));
  const elapsed = Number(process.hrtime.bigint() - began) / 1e9;
  const cpu = process.cpuUsage(cpuBefore);
  latencies.sort((a, b) => a - b);
  const at = (q) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] : null);
  console.log(
    JSON.stringify({
      ops,
      errors,
      seconds: elapsed,
      ops_per_s: ops / elapsed,
      p50_us: at(0.5),
      p99_us: at(0.99),
      cpu_us_per_op: ops ? (cpu.user + cpu.system) / ops : null,
      per_loop: perLoop,
    })
  );
  await Promise.all(clients.map((client) => client.quit()));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
