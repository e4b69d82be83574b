// Bolide console. Polls /api/v1/cluster and /api/v1/node once a second and
// draws what the nodes' info commands answer; no library, nothing fetched
// from another origin.
'use strict';

const POLL_MS = 1000;
const HISTORY = 120;
const CLUSTER_REFRESH_MS = 5000;
const CONFIG_REFRESH_MS = 10000;
// Bucket k of latency-histograms holds latencies below 2^(k-10) ms.
const BUCKET_SHIFT = 10;
const MARKS_MS = [1, 2, 4, 8, 16, 32, 64];

const state = {
  seed: new URLSearchParams(location.search).get('seed') || '',
  clusterName: '',
  nodes: [],
  clusterFetched: 0,
  configFetched: 0,
  perNode: new Map(),
  history: [],
  tab: 'overview',
  lastError: '',
  configNode: '',
};

// ---------------------------------------------------------------- parsing

function kv(text, separator = ';') {
  const out = {};
  if (!text) return out;
  for (const pair of text.split(separator)) {
    const at = pair.indexOf('=');
    if (at > 0) out[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return out;
}

function num(value) {
  if (value === 'true') return 1;
  if (value === 'false') return 0;
  const n = Number(value);
  return Number.isFinite(n) ? n : 0;
}

function parseSets(text) {
  if (!text) return [];
  return text.split(';').filter(Boolean).map((line) => kv(line, ':')).filter((s) => s.ns && s.set);
}

// `roster:`: `ns=NS:roster=..:pending_roster=..:observed_nodes=..;...`
// (strong-consistency namespaces only).
function parseRosters(text) {
  const out = {};
  if (!text || text.startsWith('ERROR')) return out;
  for (const entry of text.split(';').filter(Boolean)) {
    const fields = kv(entry, ':');
    if (fields.ns) out[fields.ns] = { roster: fields.roster || '', pending: fields.pending_roster || '', observed: fields.observed_nodes || '' };
  }
  return out;
}

// A roster's entries as a sorted list (`null` is none): nodes print them
// in their own order.
function rosterEntries(list) {
  return (list || '').split(',').map((e) => e.trim().toUpperCase()).filter((e) => e && e !== 'NULL').sort();
}

function parseHistograms(text) {
  const out = {};
  if (!text || text.startsWith('ERROR')) return null;
  for (const entry of text.split(';').filter(Boolean)) {
    const at = entry.indexOf(':');
    if (at < 0) continue;
    const fields = kv(entry.slice(at + 1), ':');
    const buckets = (fields.buckets || '').split(',').map(Number);
    out[entry.slice(0, at)] = { count: num(fields.count), sumUs: num(fields['sum-us']), buckets };
  }
  return out;
}

// `latencies:` — name:msec,ops/sec,%>1ms,%>2ms,...;
function parseLatencies(text) {
  const out = {};
  if (!text || text.startsWith('ERROR')) return out;
  for (const entry of text.split(';').filter(Boolean)) {
    const at = entry.indexOf(':');
    if (at < 0) continue;
    const values = entry.slice(at + 1).split(',');
    if (values.length < 3) { out[entry.slice(0, at)] = null; continue; }
    out[entry.slice(0, at)] = { unit: values[0], rate: num(values[1]), overs: values.slice(2).map(num) };
  }
  return out;
}

function histKind(name) {
  const match = /^\{(.+)\}-(.+)$/.exec(name);
  return match ? { ns: match[1], kind: match[2] } : { ns: '', kind: name };
}

// --------------------------------------------------------------- formatting

const escapeMap = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
function esc(value) { return String(value).replace(/[&<>"']/g, (c) => escapeMap[c]); }

function fmtInt(n) { return Math.round(n).toLocaleString('en-US'); }
function fmtRate(n) {
  if (!Number.isFinite(n)) return '–';
  if (n >= 1e6) return (n / 1e6).toFixed(2) + 'M';
  if (n >= 1e4) return (n / 1e3).toFixed(1) + 'k';
  return n >= 100 ? fmtInt(n) : n.toFixed(n >= 10 ? 0 : 1);
}
function fmtBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(n >= 100 ? 0 : 1)) + ' ' + units[i];
}
function fmtDuration(seconds) {
  seconds = Math.floor(seconds);
  const d = Math.floor(seconds / 86400), h = Math.floor(seconds % 86400 / 3600);
  const m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}
function fmtTtl(seconds) { return seconds > 0 ? fmtDuration(seconds) : 'never'; }
function fmtUs(us) {
  if (!Number.isFinite(us)) return '–';
  if (us >= 1000) return (us / 1000).toFixed(us >= 10000 ? 0 : 1) + ' ms';
  return us.toFixed(us >= 100 ? 0 : 1) + ' µs';
}
function bucketUpperUs(index, count) {
  if (index >= count - 1) return Infinity;
  return Math.pow(2, index - BUCKET_SHIFT) * 1000;
}

// ------------------------------------------------------------- histograms

function deltaBuckets(now, before) {
  if (!now) return null;
  const buckets = now.buckets.map((c, i) => Math.max(0, c - ((before && before.buckets[i]) || 0)));
  return {
    count: Math.max(0, now.count - ((before && before.count) || 0)),
    sumUs: Math.max(0, now.sumUs - ((before && before.sumUs) || 0)),
    buckets,
  };
}

function quantileUs(buckets, q) {
  const total = buckets.reduce((a, b) => a + b, 0);
  if (!total) return NaN;
  let seen = 0;
  for (let i = 0; i < buckets.length; i++) {
    seen += buckets[i];
    if (seen >= q * total) return bucketUpperUs(i, buckets.length);
  }
  return Infinity;
}

function percentOver(buckets, ms) {
  const total = buckets.reduce((a, b) => a + b, 0);
  if (!total) return 0;
  const first = BUCKET_SHIFT + 1 + Math.log2(ms);
  let over = 0;
  for (let i = first; i < buckets.length; i++) over += buckets[i];
  return over * 100 / total;
}

function mergeBuckets(list) {
  const out = { count: 0, sumUs: 0, buckets: [] };
  for (const h of list) {
    if (!h) continue;
    out.count += h.count;
    out.sumUs += h.sumUs;
    h.buckets.forEach((c, i) => { out.buckets[i] = (out.buckets[i] || 0) + c; });
  }
  return out;
}

// ------------------------------------------------------------------ polling

async function getJson(url, options) {
  const response = await fetch(url, options);
  let body;
  try { body = await response.json(); } catch (e) { body = { ok: false, error: `HTTP ${response.status}` }; }
  if (!response.ok || body.ok === false) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

async function refreshCluster() {
  const url = '/api/v1/cluster' + (state.seed ? '?seed=' + encodeURIComponent(state.seed) : '');
  const cluster = await getJson(url);
  state.clusterName = cluster.cluster_name;
  state.nodes = cluster.nodes;
  state.clusterFetched = performance.now();
  for (const address of [...state.perNode.keys()]) {
    if (!state.nodes.some((n) => n.address === address)) state.perNode.delete(address);
  }
  if (!state.seed && !document.getElementById('seed-host').value && state.nodes[0]) {
    const [host, port] = splitAddress(state.nodes[0].address);
    document.getElementById('seed-host').value = host;
    document.getElementById('seed-port').value = port;
  }
}

function splitAddress(address) {
  const at = address.lastIndexOf(':');
  return at < 0 ? [address, ''] : [address.slice(0, at).replace(/^\[|\]$/g, ''), address.slice(at + 1)];
}

async function pollNode(node, withConfig) {
  const params = new URLSearchParams();
  if (!node.local) params.set('address', node.address);
  if (withConfig) params.set('config', '1');
  const started = performance.now();
  const body = await getJson('/api/v1/node?' + params.toString());
  const info = body.info;
  const entry = state.perNode.get(node.address) || { prev: null };
  const snapshot = {
    time: (started + performance.now()) / 2,
    info,
    statistics: kv(info.statistics),
    namespaces: (info.namespaces || '').split(';').filter(Boolean),
    ns: {},
    sets: parseSets(info.sets),
    rosters: parseRosters(info['roster:']),
    hist: parseHistograms(info['latency-histograms']),
    latencies: parseLatencies(info['latencies:']),
    config: withConfig ? collectConfig(info) : (entry.current && entry.current.config),
  };
  for (const name of snapshot.namespaces) snapshot.ns[name] = kv(info['namespace/' + name]);
  entry.prev = entry.current || null;
  entry.current = snapshot;
  entry.error = '';
  state.perNode.set(node.address, entry);
}

function collectConfig(info) {
  const out = {};
  for (const [command, answer] of Object.entries(info)) {
    if (command.startsWith('get-config:')) out[command.slice('get-config:'.length)] = kv(answer);
  }
  return out;
}

function counters(snapshot) {
  let reads = 0, writes = 0, errors = 0;
  for (const ns of Object.values(snapshot.ns)) {
    reads += num(ns.client_read_success) + num(ns.client_read_not_found);
    writes += num(ns.client_write_success) + num(ns.client_delete_success) + num(ns.client_delete_not_found);
    errors += num(ns.client_read_error) + num(ns.client_write_error) + num(ns.client_delete_error);
  }
  const s = snapshot.statistics;
  return {
    reads, writes, errors,
    opened: num(s.client_connections_opened),
    refused: num(s.client_connections_refused),
  };
}

// One second of the whole cluster: rates and latency from the deltas.
function sample() {
  let reads = 0, writes = 0, errors = 0, opened = 0, refused = 0, open = 0, have = false;
  const readHists = [], writeHists = [];
  for (const entry of state.perNode.values()) {
    const now = entry.current, before = entry.prev;
    if (!now) continue;
    open += num(now.statistics.client_connections);
    if (!before) continue;
    const seconds = (now.time - before.time) / 1000;
    if (seconds <= 0) continue;
    const a = counters(now), b = counters(before);
    reads += Math.max(0, a.reads - b.reads) / seconds;
    writes += Math.max(0, a.writes - b.writes) / seconds;
    errors += Math.max(0, a.errors - b.errors) / seconds;
    opened += Math.max(0, a.opened - b.opened) / seconds;
    refused += Math.max(0, a.refused - b.refused) / seconds;
    have = true;
    if (now.hist && before.hist) {
      for (const [name, hist] of Object.entries(now.hist)) {
        const kind = histKind(name).kind;
        const delta = deltaBuckets(hist, before.hist[name]);
        if (kind === 'read') readHists.push(delta);
        if (kind === 'write') writeHists.push(delta);
      }
    }
  }
  if (!have) return null;
  const read = mergeBuckets(readHists), write = mergeBuckets(writeHists);
  return {
    reads, writes, errors, opened, refused, open,
    readMean: read.count ? read.sumUs / read.count : NaN,
    writeMean: write.count ? write.sumUs / write.count : NaN,
    readP99: read.count ? quantileUs(read.buckets, 0.99) : NaN,
  };
}

async function tick() {
  try {
    if (!state.nodes.length || performance.now() - state.clusterFetched > CLUSTER_REFRESH_MS) {
      await refreshCluster();
    }
    const withConfig = state.tab === 'configuration' && performance.now() - state.configFetched > CONFIG_REFRESH_MS
      || !state.configFetched;
    const results = await Promise.allSettled(state.nodes.map((node) => pollNode(node, withConfig)));
    if (withConfig) state.configFetched = performance.now();
    const failures = [];
    results.forEach((result, index) => {
      if (result.status === 'rejected') {
        const node = state.nodes[index];
        const entry = state.perNode.get(node.address) || { prev: null };
        entry.error = result.reason.message;
        state.perNode.set(node.address, entry);
        failures.push(`${node.address}: ${result.reason.message}`);
      }
    });
    state.lastError = failures.join('; ');
    const point = sample();
    if (point) {
      state.history.push(point);
      if (state.history.length > HISTORY) state.history.shift();
    }
  } catch (error) {
    state.lastError = error.message;
    state.nodes = [];
  }
  render();
  setTimeout(tick, POLL_MS);
}

// ------------------------------------------------------------------- charts

function niceMax(value) {
  if (!(value > 0)) return 1;
  const exponent = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * exponent >= value) return step * exponent;
  return 10 * exponent;
}

function drawChart(canvas, series, format) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  if (!width || !height) return;
  if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
  if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
  const g = canvas.getContext('2d');
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, width, height);
  const left = 58, right = 10, top = 10, bottom = 22;
  const plotW = width - left - right, plotH = height - top - bottom;
  let max = 0;
  for (const s of series) for (const v of s.values) if (Number.isFinite(v)) max = Math.max(max, v);
  max = niceMax(max * 1.1);
  g.font = '11px system-ui, sans-serif';
  g.strokeStyle = '#2a3240';
  g.fillStyle = '#8b949e';
  g.lineWidth = 1;
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (let i = 0; i <= 4; i++) {
    const y = top + plotH - plotH * i / 4;
    g.beginPath(); g.moveTo(left, y + 0.5); g.lineTo(left + plotW, y + 0.5); g.stroke();
    g.fillText(format(max * i / 4), left - 6, y);
  }
  g.textAlign = 'center';
  g.textBaseline = 'top';
  for (const seconds of [120, 90, 60, 30, 0]) {
    const x = left + plotW * (1 - seconds / HISTORY);
    g.fillText(seconds ? `-${seconds}s` : 'now', Math.min(x, left + plotW - 12), top + plotH + 6);
  }
  for (const s of series) {
    const n = s.values.length;
    g.strokeStyle = s.color;
    g.lineWidth = 2;
    g.lineJoin = 'round';
    g.beginPath();
    let started = false;
    s.values.forEach((v, i) => {
      if (!Number.isFinite(v)) { started = false; return; }
      const x = left + plotW * (1 - (n - 1 - i) / HISTORY);
      const y = top + plotH - plotH * Math.min(v, max) / max;
      if (started) g.lineTo(x, y); else { g.moveTo(x, y); started = true; }
    });
    g.stroke();
    if (s.fill && n > 1) {
      g.lineTo(left + plotW, top + plotH);
      g.lineTo(left + plotW * (1 - (n - 1) / HISTORY), top + plotH);
      g.closePath();
      g.globalAlpha = 0.10;
      g.fillStyle = s.color;
      g.fill();
      g.globalAlpha = 1;
    }
  }
}

function drawBars(canvas, buckets) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  if (!width || !height) return;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const g = canvas.getContext('2d');
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, width, height);
  const bottom = 16, n = buckets.length;
  const max = Math.max(1, ...buckets.map((c) => Math.log10(1 + c)));
  const w = width / n;
  g.font = '10px system-ui, sans-serif';
  g.fillStyle = '#8b949e';
  g.textAlign = 'center';
  g.textBaseline = 'top';
  buckets.forEach((count, i) => {
    const h = (height - bottom - 4) * Math.log10(1 + count) / max;
    const ms = Math.pow(2, i - BUCKET_SHIFT);
    g.fillStyle = ms > 1 ? (ms > 8 ? '#f87171' : '#fbbf24') : '#38bdf8';
    g.fillRect(i * w + 1, height - bottom - h, Math.max(1, w - 2), h);
    g.fillStyle = '#8b949e';
    if (i === 0) g.fillText('1µs', i * w + w, height - bottom + 3);
    if (i === BUCKET_SHIFT) g.fillText('1ms', i * w + w, height - bottom + 3);
    if (i === BUCKET_SHIFT + 10) g.fillText('1s', i * w + w, height - bottom + 3);
  });
}

// ------------------------------------------------------------------ render

function render() {
  const dot = document.getElementById('status-dot');
  const status = document.getElementById('status-text');
  const live = state.nodes.length && !state.lastError;
  dot.className = 'dot ' + (live ? 'live' : state.lastError ? 'down' : '');
  status.textContent = live ? `live · ${new Date().toLocaleTimeString()}` : (state.lastError || 'connecting…');
  status.title = state.lastError;
  document.getElementById('cluster-name').textContent = state.clusterName || '–';
  renderSummary();
  if (state.tab === 'overview') renderOverview();
  if (state.tab === 'namespaces') renderNamespaces();
  if (state.tab === 'latency') renderLatency();
  if (state.tab === 'connections') renderConnections();
  if (state.tab === 'configuration') renderConfiguration();
}

function snapshots() {
  return state.nodes
    .map((node) => ({ node, entry: state.perNode.get(node.address) }))
    .filter((x) => x.entry && x.entry.current);
}

function renderSummary() {
  const list = snapshots();
  const last = state.history[state.history.length - 1];
  setText('node-count', state.nodes.length ? String(state.nodes.length) : '–');
  const builds = [...new Set(list.map((x) => x.entry.current.info.build))];
  setText('node-build', builds.length ? 'build ' + builds.join(', ') : '');
  setText('tps-reads', last ? fmtRate(last.reads) : '–');
  setText('tps-writes', last ? fmtRate(last.writes) : '–');
  setText('tps-errors', last ? fmtRate(last.errors) : '–');
  document.getElementById('tps-errors').classList.toggle('errors', Boolean(last && last.errors > 0));
  let records = 0, copies = 0, remaining = 0;
  const namespaces = new Set();
  const keys = new Set();
  for (const { entry } of list) {
    const s = entry.current.statistics;
    remaining += num(s.migrate_partitions_remaining);
    if (s.cluster_key !== undefined) keys.add(s.cluster_key);
    for (const [name, ns] of Object.entries(entry.current.ns)) {
      namespaces.add(name);
      const objects = num(ns.objects);
      copies += objects;
      records += ns.master_objects !== undefined ? num(ns.master_objects) : objects;
    }
  }
  setText('objects-total', list.length ? fmtInt(records) : '–');
  const nsText = namespaces.size ? `${namespaces.size} namespace${namespaces.size > 1 ? 's' : ''}` : '';
  setText('namespace-count', copies > records ? `${fmtInt(copies)} copies · ${nsText}` : nsText);
  // Nodes that answer different cluster keys are in different clusters.
  const split = document.getElementById('cluster-split');
  split.classList.toggle('hidden', keys.size < 2);
  setText('cluster-split', keys.size > 1 ? `split: ${keys.size} cluster keys` : '');
  setText('migrations', list.length ? fmtInt(remaining) : '–');
}

function setText(id, text) {
  const element = document.getElementById(id);
  if (element.textContent !== text) element.textContent = text;
}

function renderOverview() {
  const h = state.history;
  const keys = new Set(snapshots().map((x) => x.entry.current.statistics.cluster_key).filter((k) => k !== undefined));
  drawChart(document.getElementById('chart-tps'), [
    { values: h.map((p) => p.reads), color: '#38bdf8', fill: true },
    { values: h.map((p) => p.writes), color: '#a78bfa', fill: true },
    { values: h.map((p) => p.errors), color: '#f87171' },
  ], fmtRate);
  drawChart(document.getElementById('chart-latency'), [
    { values: h.map((p) => p.readMean), color: '#38bdf8' },
    { values: h.map((p) => p.writeMean), color: '#a78bfa' },
    { values: h.map((p) => (Number.isFinite(p.readP99) ? p.readP99 : NaN)), color: '#fbbf24' },
  ], fmtUs);
  renderBucketsTable();
  const rows = snapshots().map(({ node, entry }) => {
    const s = entry.current.statistics;
    const remaining = num(s.migrate_partitions_remaining);
    const moved = s.migrate_records_transmitted !== undefined
      ? `<div class="muted small">${fmtInt(num(s.migrate_records_transmitted))} sent · ${fmtInt(num(s.migrate_record_receives))} received</div>` : '';
    const keyClass = keys.size > 1 ? 'pill bad' : 'mono';
    return `<tr data-node="${esc(node.name)}"><td><strong>${esc(node.name || entry.current.info.node)}</strong>${node.local ? ' <span class="pill ok">this node</span>' : ''}</td>
      <td class="mono">${esc(node.address)}</td><td>${esc(entry.current.info.build || '')}</td>
      <td>${fmtDuration(num(s.uptime))}</td><td class="num">${esc(s.cluster_size || '–')}</td>
      <td><span class="${keyClass}">${esc(s.cluster_key || '–')}</span></td>
      <td class="num">${fmtInt(num(s.client_connections))}</td><td class="num">${fmtInt(num(s.objects))}</td>
      <td class="num">${s.process_rss_bytes ? fmtBytes(num(s.process_rss_bytes)) : '–'}</td>
      <td class="num">${s.system_free_mem_pct !== undefined ? esc(s.system_free_mem_pct) + ' %' : '–'}</td>
      <td class="num">${remaining ? `<span class="pill warn">${fmtInt(remaining)}</span>` : '<span class="pill ok">none</span>'}${moved}</td></tr>`;
  });
  for (const node of state.nodes) {
    const entry = state.perNode.get(node.address);
    if (entry && entry.error) {
      rows.push(`<tr><td><strong>${esc(node.name)}</strong></td><td class="mono">${esc(node.address)}</td><td colspan="9"><span class="pill bad">unreachable</span> ${esc(entry.error)}</td></tr>`);
    }
  }
  setHtml('#nodes-table tbody', rows.join('') || '<tr><td class="empty" colspan="11">no node answers</td></tr>');
}

function heat(percent) {
  if (percent <= 0) return `<span class="heat">0.00</span>`;
  const alpha = Math.min(0.85, 0.15 + percent / 40);
  return `<span class="heat" style="background: rgba(248,113,113,${alpha.toFixed(2)})">${percent.toFixed(2)}</span>`;
}

function renderBucketsTable() {
  const multi = state.nodes.length > 1;
  const head = `<tr>${multi ? '<th>Node</th>' : ''}<th>Histogram</th><th class="num">ops/s</th><th class="num">mean</th><th class="num">p50 ≤</th><th class="num">p99 ≤</th>${MARKS_MS.map((m) => `<th class="num">&gt;${m}ms %</th>`).join('')}</tr>`;
  setHtml('#latency-buckets thead', head);
  const rows = [];
  for (const { node, entry } of snapshots()) {
    const now = entry.current, before = entry.prev;
    const nodeCell = multi ? `<td>${esc(node.name)}</td>` : '';
    if (now.hist && before && before.hist) {
      const seconds = (now.time - before.time) / 1000;
      for (const [name, hist] of Object.entries(now.hist)) {
        const d = deltaBuckets(hist, before.hist[name]);
        if (!d.count) continue;
        rows.push(`<tr>${nodeCell}<td class="mono">${esc(name)}</td><td class="num">${fmtRate(d.count / seconds)}</td>
          <td class="num">${fmtUs(d.sumUs / d.count)}</td><td class="num">${fmtUs(quantileUs(d.buckets, 0.5))}</td>
          <td class="num">${fmtUs(quantileUs(d.buckets, 0.99))}</td>${MARKS_MS.map((m) => `<td class="num">${heat(percentOver(d.buckets, m))}</td>`).join('')}</tr>`);
      }
    } else if (!now.hist) {
      // A node without Bolide's cumulative histograms: its last ticker slice.
      for (const [name, slice] of Object.entries(now.latencies)) {
        if (!slice || !slice.rate) continue;
        rows.push(`<tr>${nodeCell}<td class="mono">${esc(name)}</td><td class="num">${fmtRate(slice.rate)}</td><td class="num">–</td><td class="num">–</td><td class="num">–</td>
          ${MARKS_MS.map((m) => `<td class="num">${heat(slice.overs[Math.log2(m)] || 0)}</td>`).join('')}</tr>`);
      }
    }
  }
  const span = (multi ? 1 : 0) + 5 + MARKS_MS.length;
  setHtml('#latency-buckets tbody', rows.join('') || `<tr><td class="empty" colspan="${span}">no requests in the last second</td></tr>`);
}

function setHtml(selector, html) {
  const element = document.querySelector(selector);
  if (element.innerHTML !== html) element.innerHTML = html;
}

// One namespace over all nodes: figures added, marks from the first node.
function namespaceView(name) {
  const view = { name, nodes: 0, objects: 0, copies: 0, factor: 1, memoryUsed: 0, memoryTotal: 0, deviceUsed: 0, deviceTotal: 0,
    deviceAvailable: [], expired: 0, evicted: 0, stopWrites: false, hwm: false, config: null, sets: new Map(), bins: '' };
  for (const { entry } of snapshots()) {
    const ns = entry.current.ns[name];
    if (!ns) continue;
    view.nodes++;
    view.config = view.config || ns;
    view.copies += num(ns.objects);
    view.objects += ns.master_objects !== undefined ? num(ns.master_objects) : num(ns.objects);
    view.factor = Math.max(view.factor, num(ns.effective_replication_factor) || 1);
    view.memoryUsed += num(ns.memory_used_bytes);
    view.memoryTotal += num(ns.data_total_bytes || ns['data-size']);
    view.deviceUsed += num(ns.device_used_bytes);
    view.deviceTotal += num(ns.device_total_bytes);
    if (ns.device_available_pct !== undefined) view.deviceAvailable.push(num(ns.device_available_pct));
    view.expired += num(ns.expired_objects);
    view.evicted += num(ns.evicted_objects);
    view.stopWrites = view.stopWrites || ns.stop_writes === 'true';
    view.hwm = view.hwm || ns.hwm_breached === 'true';
    for (const set of entry.current.sets.filter((s) => s.ns === name)) {
      const total = view.sets.get(set.set) || { copies: 0, bytes: 0, truncating: false };
      total.copies += num(set.objects);
      total.bytes += num(set.data_used_bytes);
      total.truncating = total.truncating || set.truncating === 'true';
      view.sets.set(set.set, total);
    }
    const binsEntry = (entry.current.info.bins || '').split(';').find((b) => b.startsWith(name + ':'));
    const bins = kv(binsEntry ? binsEntry.slice(name.length + 1) : '', ',');
    view.bins = bins.bin_names !== undefined ? `${bins.bin_names} bin names (quota ${bins.bin_names_quota})` : '';
  }
  return view;
}

function usageBar(label, used, total, marks) {
  const percent = total > 0 ? used * 100 / total : 0;
  const stop = marks.find((m) => m.kind === 'stop');
  const evict = marks.find((m) => m.kind === 'evict');
  const level = stop && stop.at > 0 && percent >= stop.at ? 'bad' : evict && evict.at > 0 && percent >= evict.at ? 'warn' : '';
  const markHtml = marks.filter((m) => m.at > 0).map((m) =>
    `<div class="mark ${m.kind}" style="left:${Math.min(100, m.at)}%"><span>${esc(m.label)}</span></div>`).join('');
  return `<div class="usage"><div class="title"><span>${esc(label)}</span><span class="muted">${fmtBytes(used)} of ${fmtBytes(total)} · <strong>${percent.toFixed(1)} %</strong></span></div>
    <div class="bar"><div class="fill ${level}" style="width:${Math.min(100, percent).toFixed(2)}%"></div>${markHtml}</div></div>`;
}

// A strong-consistency namespace: each node's roster, pending roster,
// observed nodes, unavailable and dead partitions (as `bolide roster show`).
function scPanel(name) {
  const rows = [];
  let noRoster = false, staged = false, unavailable = 0, dead = 0, missing = new Set();
  for (const { node, entry } of snapshots()) {
    const view = entry.current.rosters[name];
    const ns = entry.current.ns[name];
    if (!view || !ns) continue;
    const roster = rosterEntries(view.roster);
    const observed = rosterEntries(view.observed).map((e) => e.split('@')[0]);
    noRoster = noRoster || roster.length === 0;
    staged = staged || rosterEntries(view.pending).join() !== roster.join();
    for (const id of roster.map((e) => e.split('@')[0])) if (!observed.includes(id)) missing.add(id);
    unavailable = Math.max(unavailable, num(ns.unavailable_partitions));
    dead = Math.max(dead, num(ns.dead_partitions));
    const count = (value) => num(value) > 0 ? `<span class="pill bad">${fmtInt(num(value))}</span>` : '0';
    rows.push(`<tr data-node="${esc(node.name || entry.current.info.node)}"><td><strong>${esc(node.name || entry.current.info.node)}</strong></td>
      <td class="mono" data-testid="sc-roster">${esc(view.roster)}</td><td class="mono" data-testid="sc-pending">${esc(view.pending)}</td>
      <td class="mono" data-testid="sc-observed">${esc(view.observed)}</td><td class="num">${esc(ns.ns_cluster_size || '–')}</td>
      <td class="num" data-testid="sc-unavailable">${count(ns.unavailable_partitions)}</td><td class="num" data-testid="sc-dead">${count(ns.dead_partitions)}</td></tr>`);
  }
  if (!rows.length) return '';
  const pills = [
    noRoster ? '<span class="pill bad">no roster: nothing served</span>' : '',
    staged ? '<span class="pill warn">staged roster not in force (recluster)</span>' : '',
    !noRoster && missing.size ? `<span class="pill warn">roster nodes missing: ${esc([...missing].join(', '))}</span>` : '',
    unavailable ? `<span class="pill bad">${fmtInt(unavailable)} partitions unavailable</span>` : '<span class="pill ok">every partition available</span>',
    dead ? `<span class="pill bad">${fmtInt(dead)} dead partitions</span>` : '',
  ].join(' ');
  return `<div class="sc-panel" data-testid="sc-panel"><h3 class="sub">Strong consistency: roster</h3><div class="flags" data-testid="sc-flags">${pills}</div>
    <table class="data"><thead><tr><th>Node</th><th>Roster</th><th>Pending roster</th><th>Observed nodes</th><th class="num">Roster nodes present</th><th class="num">Unavailable</th><th class="num">Dead</th></tr></thead>
    <tbody>${rows.join('')}</tbody></table>
    <div class="muted small">Stage a roster with <code>bolide roster set</code>, put it in force with <code>bolide roster recluster</code>; dead partitions need <code>revive</code> (docs/strong-consistency.md).</div></div>`;
}

function renderNamespaces() {
  const names = [];
  for (const { entry } of snapshots()) for (const n of entry.current.namespaces) if (!names.includes(n)) names.push(n);
  const html = names.map((name) => {
    const v = namespaceView(name);
    const c = v.config || {};
    const device = v.deviceTotal > 0;
    const sc = c['strong-consistency'] === 'true';
    const flags = [
      sc ? '<span class="pill ok">strong consistency</span>' : '',
      v.stopWrites ? '<span class="pill bad">stop-writes</span>' : '<span class="pill ok">writes accepted</span>',
      v.hwm ? '<span class="pill warn">above eviction mark</span>' : '',
    ].join('');
    const memoryMarks = [
      { kind: 'evict', at: num(c['evict-used-pct']), label: `evict ${c['evict-used-pct']}%` },
      { kind: 'stop', at: num(c['stop-writes-used-pct']), label: `stop-writes ${c['stop-writes-used-pct']}%` },
    ];
    const minAvail = num(c['storage-engine.min-avail-pct']);
    const availability = v.deviceAvailable.length ? Math.min(...v.deviceAvailable) : NaN;
    const sets = [...v.sets.entries()].sort((a, b) => a[0].localeCompare(b[0]));
    // A set's objects count every copy: divided by the replication factor
    // they are its records (exact once migrations are over).
    const setRows = sets.map(([set, s]) => `<tr data-set="${esc(set)}"><td class="mono">${esc(set)}</td><td class="num" data-testid="set-records">${fmtInt(Math.ceil(s.copies / v.factor))}</td>
      <td class="num">${fmtBytes(s.bytes)}</td><td>${s.truncating ? '<span class="pill warn">truncating</span>' : ''}</td>
      <td class="num"><button class="small secondary" data-truncate-ns="${esc(name)}" data-truncate-set="${esc(set)}">Truncate…</button></td></tr>`).join('');
    return `<div class="ns-card" data-namespace="${esc(name)}">
      <div class="ns-head"><h2>${esc(name)}</h2><span class="engine">${esc(c['storage-engine'] || '')} · replication factor ${esc(c['replication-factor'] || '–')} · ${v.nodes} node${v.nodes > 1 ? 's' : ''}</span><div class="flags">${flags}</div></div>
      <div class="ns-grid"><div>
        <div class="figures">
          <div class="figure"><div class="label">Records</div><div class="value" data-testid="ns-objects">${fmtInt(v.objects)}</div>${v.copies > v.objects ? `<div class="muted small">${fmtInt(v.copies)} copies</div>` : ''}</div>
          <div class="figure"><div class="label">Default TTL</div><div class="value">${fmtTtl(num(c['default-ttl']))}</div></div>
          <div class="figure"><div class="label">Expired</div><div class="value">${fmtInt(v.expired)}</div></div>
          <div class="figure"><div class="label">Evicted</div><div class="value">${fmtInt(v.evicted)}</div></div>
        </div>
        ${usageBar('Memory (index + data) against data-size', v.memoryUsed, v.memoryTotal, memoryMarks)}
        ${device ? usageBar('Device (live records)', v.deviceUsed, v.deviceTotal, [{ kind: 'stop', at: num(c['storage-engine.max-used-pct']), label: `max-used ${c['storage-engine.max-used-pct']}%` }]) : ''}
        ${device ? `<div class="muted small">free write blocks: <strong>${availability.toFixed(0)} %</strong> (writes stop under ${minAvail} %) · defrag queue ${esc(c['storage-engine.defrag_q'] || 0)} · write queue ${esc(c['storage-engine.write_q'] || 0)}</div>` : ''}
        ${device ? `<div class="muted small" data-testid="ns-compression">compression <strong>${esc(c['storage-engine.compression'] || 'none')}</strong> · stored/original size of recent writes <strong>${esc(c.data_compression_ratio || '1.000')}</strong> · ${fmtInt(num(c['storage-engine.compressed_records']))} records written compressed</div>` : ''}
        <div class="muted small">nsup every ${esc(c['nsup-period'] || '–')} s · last sweep ${esc(c.nsup_cycle_duration || 0)} ms · ${esc(v.bins)}</div>
      </div><div>
        <h3 class="sub">Sets</h3>
        <table class="data"><thead><tr><th>Set</th><th class="num">Records</th><th class="num">Data</th><th></th><th></th></tr></thead>
        <tbody>${setRows || '<tr><td class="empty" colspan="5">no sets yet</td></tr>'}</tbody></table>
        <div style="margin-top:10px;text-align:right"><button class="small secondary" data-truncate-ns="${esc(name)}" data-truncate-set="">Truncate namespace…</button></div>
      </div></div>${sc ? scPanel(name) : ''}</div>`;
  }).join('');
  setHtml('#namespace-cards', html || '<div class="panel muted">no namespaces</div>');
}

function renderLatency() {
  const cards = [];
  const rows = [];
  const multi = state.nodes.length > 1;
  for (const { node, entry } of snapshots()) {
    const now = entry.current;
    if (now.hist) {
      for (const [name, hist] of Object.entries(now.hist)) {
        if (!hist.count) continue;
        cards.push({ key: node.address + name, title: (multi ? node.name + ' · ' : '') + name, hist });
      }
    }
    for (const [name, slice] of Object.entries(now.latencies)) {
      rows.push(`<tr>${multi ? `<td>${esc(node.name)}</td>` : ''}<td class="mono">${esc(name)}</td>${slice
        ? `<td class="num">${slice.rate.toFixed(1)}</td>${slice.overs.slice(0, 8).map((v) => `<td class="num">${v.toFixed(2)}</td>`).join('')}`
        : `<td class="muted" colspan="9">idle: no slice with requests yet</td>`}</tr>`);
    }
  }
  const container = document.getElementById('histograms');
  const keys = cards.map((c) => c.key).join('|');
  if (container.dataset.keys !== keys) {
    container.dataset.keys = keys;
    container.innerHTML = cards.map((c, i) => `<div class="hist"><div class="hist-title"><span class="mono">${esc(c.title)}</span><span class="muted" id="hist-sub-${i}"></span></div><canvas id="hist-${i}"></canvas></div>`).join('')
      || '<div class="muted">no requests yet</div>';
  }
  cards.forEach((c, i) => {
    document.getElementById(`hist-sub-${i}`).textContent = `${fmtInt(c.hist.count)} requests · mean ${fmtUs(c.hist.sumUs / c.hist.count)} · p99 ≤ ${fmtUs(quantileUs(c.hist.buckets, 0.99))}`;
    drawBars(document.getElementById(`hist-${i}`), c.hist.buckets);
  });
  setHtml('#latencies-table thead', `<tr>${multi ? '<th>Node</th>' : ''}<th>Histogram</th><th class="num">ops/s</th>${[1, 2, 4, 8, 16, 32, 64, 128].map((m) => `<th class="num">&gt;${m}ms</th>`).join('')}</tr>`);
  setHtml('#latencies-table tbody', rows.join(''));
}

function renderConnections() {
  const h = state.history;
  drawChart(document.getElementById('chart-connections'), [
    { values: h.map((p) => p.open), color: '#38bdf8', fill: true },
    { values: h.map((p) => p.opened), color: '#a78bfa' },
    { values: h.map((p) => p.refused), color: '#f87171' },
  ], fmtRate);
  const rows = snapshots().map(({ node, entry }) => {
    const s = entry.current.statistics;
    return `<tr><td><strong>${esc(node.name)}</strong> <span class="muted mono">${esc(node.address)}</span></td>
      <td class="num">${fmtInt(num(s.client_connections))}</td><td class="num">${fmtInt(num(s.client_connections_opened))}</td>
      <td class="num">${fmtInt(num(s.client_connections_closed))}</td><td class="num">${fmtInt(num(s.client_connections_refused))}</td>
      <td class="num">${fmtInt(num(s.info_requests))}</td><td class="num">${fmtInt(num(s.bad_frames))}</td><td class="num">${esc(s.service_threads || '–')}</td></tr>`;
  });
  setHtml('#connections-table tbody', rows.join(''));
}

function renderConfiguration() {
  const select = document.getElementById('config-node');
  const options = state.nodes.map((n) => `<option value="${esc(n.address)}">${esc(n.name)} (${esc(n.address)})</option>`).join('');
  if (select.dataset.options !== options) {
    select.dataset.options = options;
    select.innerHTML = options;
    if (state.configNode) select.value = state.configNode;
  }
  const address = select.value || (state.nodes[0] && state.nodes[0].address);
  const entry = state.perNode.get(address);
  const config = entry && entry.current && entry.current.config;
  if (!config) { setHtml('#config-tables', '<div class="muted">loading…</div>'); return; }
  const order = Object.keys(config).sort((a, b) => (a.includes('namespace') - b.includes('namespace')) || a.localeCompare(b));
  const html = order.map((context) => {
    const title = context.replace('context=', '').replace(';id=', ' ');
    const rows = Object.entries(config[context]).map(([k, v]) => `<tr><td class="mono">${esc(k)}</td><td class="mono">${esc(v)}</td></tr>`).join('');
    return `<div class="panel"><h3>${esc(title)}</h3><table class="data"><tbody>${rows}</tbody></table></div>`;
  }).join('');
  setHtml('#config-tables', html);
}

// ------------------------------------------------------------ interaction

const TABS = ['overview', 'namespaces', 'latency', 'connections', 'configuration'];

function showTab(tab) {
  if (!TABS.includes(tab)) tab = 'overview';
  state.tab = tab;
  for (const link of document.querySelectorAll('#tabs a')) link.classList.toggle('active', link.dataset.tab === tab);
  for (const section of document.querySelectorAll('main > section')) section.classList.toggle('hidden', section.id !== 'tab-' + tab);
  if (tab === 'configuration') state.configFetched = 0;
  render();
}

function toast(message, error) {
  const element = document.getElementById('toast');
  element.textContent = message;
  element.className = 'toast' + (error ? ' error' : '');
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => element.classList.add('hidden'), 5000);
}

// Truncation asks first: the operator types the set (or namespace) name.
function confirmTruncate(namespace, set) {
  const modal = document.getElementById('modal');
  const input = document.getElementById('modal-input');
  const confirm = document.getElementById('modal-confirm');
  const target = set || namespace;
  document.getElementById('modal-title').textContent = set ? `Truncate set ${set}?` : `Truncate namespace ${namespace}?`;
  document.getElementById('modal-text').textContent = set
    ? `Every record of set "${set}" in namespace "${namespace}" will be deleted. This cannot be undone.`
    : `Every record of namespace "${namespace}" will be deleted. This cannot be undone.`;
  document.getElementById('modal-label').textContent = `Type ${set ? 'the set' : 'the namespace'} name (${target}) to confirm`;
  input.value = '';
  confirm.disabled = true;
  modal.classList.remove('hidden');
  input.focus();
  input.oninput = () => { confirm.disabled = input.value !== target; };
  const close = () => modal.classList.add('hidden');
  document.getElementById('modal-cancel').onclick = close;
  modal.onkeydown = (event) => { if (event.key === 'Escape') close(); };
  confirm.onclick = async () => {
    if (input.value !== target) return;
    confirm.disabled = true;
    const seed = state.nodes[0];
    const body = { namespace, set: set || null, address: seed && !seed.local ? seed.address : null };
    try {
      await getJson('/api/v1/truncate', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      toast(`Truncating ${set ? namespace + '.' + set : namespace}: records last updated before now are gone.`);
    } catch (error) {
      toast(`Truncate failed: ${error.message}`, true);
    }
    close();
  };
}

function start() {
  document.getElementById('seed-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const host = document.getElementById('seed-host').value.trim();
    const port = document.getElementById('seed-port').value.trim() || '3000';
    state.seed = host ? `${host.includes(':') ? '[' + host + ']' : host}:${port}` : '';
    state.nodes = [];
    state.perNode.clear();
    state.history = [];
    state.configFetched = 0;
    const url = new URL(location.href);
    if (state.seed) url.searchParams.set('seed', state.seed); else url.searchParams.delete('seed');
    history.replaceState(null, '', url);
  });
  if (state.seed) {
    const [host, port] = splitAddress(state.seed);
    document.getElementById('seed-host').value = host;
    document.getElementById('seed-port').value = port;
  }
  document.getElementById('namespace-cards').addEventListener('click', (event) => {
    const button = event.target.closest('button[data-truncate-ns]');
    if (button) confirmTruncate(button.dataset.truncateNs, button.dataset.truncateSet);
  });
  document.getElementById('config-node').addEventListener('change', (event) => {
    state.configNode = event.target.value;
    render();
  });
  const fromHash = () => showTab((location.hash || '#overview').slice(1).replace(/[^a-z]/g, '') || 'overview');
  window.addEventListener('hashchange', fromHash);
  window.addEventListener('resize', render);
  fromHash();
  tick();
}

start();
