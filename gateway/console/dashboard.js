// The dashboard: /stats and /metrics polled every second. Workers are keyed by id and
// incarnation, so a worker that died (or restarted as a new incarnation) stays listed as
// gone for a while instead of silently vanishing; throughput comes from each worker's
// total_tokens deltas, mean TTFT from the Prometheus histogram's sum and count deltas.

import { getJSON, getText } from "./api.js";
import { drawChart } from "./charts.js";

const POLL_MS = 1000;
const WINDOW_MS = 5 * 60 * 1000; // charts keep this much, and show it once it has passed
const MIN_WINDOW_MS = 60 * 1000;
const GONE_KEEP_MS = 3 * 60 * 1000;
const $ = (id) => document.getElementById(id);

/** The sum and count of a Prometheus histogram in /metrics text (null when absent). */
export function histogramTotals(text, name) {
  const value = (suffix) => {
    const match = text.match(new RegExp(`^${name}_${suffix} (\\S+)$`, "m"));
    return match ? Number(match[1]) : null;
  };
  const sum = value("sum");
  const count = value("count");
  return sum === null || count === null ? null : { sum, count };
}

function cell(row, text, className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  if (text instanceof Node) td.append(text);
  else td.textContent = text;
  row.append(td);
  return td;
}

/** A stacked bar of a worker's KV pages: in use, cached (evictable), free. */
function pagesBar(worker) {
  const total = worker.kv_pages_total || 0;
  const wrap = document.createElement("div");
  wrap.className = "pages";
  const bar = document.createElement("div");
  bar.className = "bar";
  const parts = [
    ["in-use", worker.kv_pages_in_use || 0],
    ["cached", worker.kv_pages_cached || 0],
    ["free", worker.kv_pages_free || 0],
  ];
  for (const [name, count] of parts) {
    const segment = document.createElement("span");
    segment.className = `segment ${name}`;
    segment.style.width = total ? `${(100 * count) / total}%` : "0";
    bar.append(segment);
  }
  const legend = document.createElement("span");
  legend.className = "legend";
  legend.textContent = `${parts.map(([, count]) => count).join(" · ")} of ${total}`;
  wrap.append(bar, legend);
  return wrap;
}

function hitRate(hits, computed) {
  return hits + computed > 0 ? `${((100 * hits) / (hits + computed)).toFixed(1)}%` : "–";
}

function formatRate(value) {
  return value >= 100 ? value.toFixed(0) : value.toFixed(1);
}

function formatSeconds(value) {
  return value >= 10 ? value.toFixed(0) : value >= 1 ? value.toFixed(1) : value.toFixed(2);
}

export class Dashboard {
  constructor() {
    this.workers = new Map(); // "id/incarnation" -> {worker, goneAt}
    this.last = null; // the previous poll: {t, tokens: Map(key -> total_tokens), ttft}
    this.throughput = []; // [{t, value}]
    this.ttft = [];
    this.started = false;
  }

  start() {
    if (this.started) return;
    this.started = true;
    this.poll();
  }

  async poll() {
    try {
      await this.refresh();
    } finally {
      setTimeout(() => this.poll(), POLL_MS); // after the answer: a slow gateway is not piled on
    }
  }

  async refresh() {
    let stats, metrics;
    try {
      [stats, metrics] = await Promise.all([getJSON("stats"), getText("metrics")]);
    } catch (error) {
      $("dash-error").hidden = false;
      $("dash-error").textContent = `The gateway does not answer: ${error.message}`;
      $("gateway-status").textContent = "gateway unreachable";
      return;
    }
    $("dash-error").hidden = true;
    $("gateway-status").textContent = "";
    this.update(stats, histogramTotals(metrics, "astrai_time_to_first_token_seconds"));
  }

  update(stats, ttft) {
    const now = Date.now();
    const tokens = new Map();
    const seen = new Set();
    for (const worker of stats.workers) {
      const key = `${worker.worker_id}/${worker.incarnation}`;
      seen.add(key);
      tokens.set(key, worker.total_tokens || 0);
      this.workers.set(key, { worker, goneAt: null });
    }
    for (const [key, entry] of this.workers) {
      if (seen.has(key)) continue;
      if (entry.goneAt === null) entry.goneAt = now;
      else if (now - entry.goneAt > GONE_KEEP_MS) this.workers.delete(key);
    }
    if (this.last) {
      const seconds = (now - this.last.t) / 1000;
      let generated = 0; // only workers in both polls: a dead one's total must not count
      for (const [key, total] of tokens) {
        if (this.last.tokens.has(key)) generated += Math.max(0, total - this.last.tokens.get(key));
      }
      this.throughput.push({ t: now, value: generated / seconds });
      let mean = null;
      if (ttft && this.last.ttft && ttft.count > this.last.ttft.count) {
        mean = (ttft.sum - this.last.ttft.sum) / (ttft.count - this.last.ttft.count);
      }
      this.ttft.push({ t: now, value: mean });
    }
    this.last = { t: now, tokens, ttft };
    this.throughput = this.throughput.filter((s) => now - s.t <= WINDOW_MS);
    this.ttft = this.ttft.filter((s) => now - s.t <= WINDOW_MS);
    this.render(stats, now);
  }

  render(stats, now) {
    const gateway = stats.gateway || {};
    const live = stats.workers.filter((w) => !w.draining).length;
    $("card-workers").textContent = `${live}` + (stats.workers.length > live ? ` (+${stats.workers.length - live} draining)` : "");
    $("card-in-flight").textContent = String(gateway.in_flight ?? "–");
    $("card-queued").textContent = String(gateway.queued ?? "–");
    const rate = this.throughput.at(-1);
    $("card-throughput").textContent = rate ? `${formatRate(rate.value)} tok/s` : "–";
    const ttft = this.ttft.filter((s) => s.value !== null).at(-1);
    $("card-ttft").textContent = ttft ? `${formatSeconds(ttft.value)} s` : "–";
    const hits = stats.workers.reduce((sum, w) => sum + (w.prefix_cache_hit_tokens || 0), 0);
    const computed = stats.workers.reduce((sum, w) => sum + (w.prefill_tokens || 0), 0);
    $("card-hit-rate").textContent = hitRate(hits, computed);
    $("card-hit-rate").title = `${hits} prompt tokens read from the prefix cache, ${computed} computed`;

    // Until five minutes have been watched, the charts span what has been (a minute at least).
    const first = this.throughput.length ? this.throughput[0].t : now;
    const windowMs = Math.min(WINDOW_MS, Math.max(MIN_WINDOW_MS, now - first));
    drawChart($("chart-throughput"), this.throughput, { windowMs, now, format: formatRate });
    drawChart($("chart-ttft"), this.ttft, { windowMs, now, format: formatSeconds });

    const rows = [...this.workers.values()]
      .sort((a, b) => (a.goneAt !== null) - (b.goneAt !== null) || a.worker.worker_id.localeCompare(b.worker.worker_id))
      .map((entry) => this.row(entry, now));
    $("workers").replaceChildren(...rows);
    const footer = [`routing: ${gateway.routing ?? "?"}`, `open requests: ${stats.open_requests ?? 0}`];
    if (gateway.draining) footer.push("the gateway is draining");
    if (gateway.rejected_overload) footer.push(`rejected for overload: ${gateway.rejected_overload}`);
    $("dash-footer").textContent = footer.join(" · ");
  }

  row({ worker, goneAt }, now) {
    const row = document.createElement("tr");
    const state = goneAt !== null ? "gone" : worker.draining ? "draining" : "live";
    row.className = `worker ${state}`;
    row.dataset.workerId = worker.worker_id;
    row.dataset.incarnation = worker.incarnation;
    row.dataset.pid = String(worker.pid);
    row.dataset.state = state;
    cell(row, worker.worker_id, "id");
    cell(row, worker.host);
    cell(row, String(worker.pid));
    cell(row, worker.model);
    cell(row, worker.incarnation.slice(0, 8), "mono").title = worker.incarnation;
    const label = state === "gone" ? `gone ${Math.round((now - goneAt) / 1000)} s ago` : state;
    cell(row, label, `state ${state}`);
    if (state === "gone") {
      // Its last figures would mislead: the pages and requests died with it.
      const td = cell(row, "–");
      td.colSpan = 4;
      return row;
    }
    cell(row, String(worker.in_flight));
    cell(row, `${worker.active_tasks ?? 0} / ${worker.waiting_queue ?? 0}`);
    cell(row, pagesBar(worker));
    cell(row, hitRate(worker.prefix_cache_hit_tokens || 0, worker.prefill_tokens || 0));
    return row;
  }
}
