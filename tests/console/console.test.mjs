// The web console in a real browser: Debian's Chromium (/usr/bin/chromium)
// driven by playwright-core, against real bolided processes on loopback,
// with bolide-bench putting load on them.
//
//   cd tests/console && npm ci && npm test
//
// BOLIDED_BIN and BOLIDE_BENCH_BIN name the binaries (default: the release
// builds under target/). Screenshots go to CONSOLE_SCREENSHOTS (default
// target/console-screenshots; docs/images holds the published ones).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, mkdirSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import net from 'node:net';
import { chromium } from 'playwright-core';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const BOLIDED = process.env.BOLIDED_BIN || join(ROOT, 'target/release/bolided');
const BENCH = process.env.BOLIDE_BENCH_BIN || join(ROOT, 'target/release/bolide-bench');
const SHOTS = resolve(ROOT, process.env.CONSOLE_SCREENSHOTS || 'target/console-screenshots');
const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
// Seconds of load behind the overview; longer gives the screenshot's charts
// more history (CONSOLE_LOAD_SECONDS=70 for the published screenshots).
const LOAD_SECONDS = Math.max(12, Number(process.env.CONSOLE_LOAD_SECONDS) || 12);

const children = [];
const temporary = [];
let context;
let first;
let second;

function freePort() {
  return new Promise((done, fail) => {
    const server = net.createServer();
    server.on('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => done(port));
    });
  });
}

function waitForPort(port, deadlineMs = 10000) {
  const deadline = Date.now() + deadlineMs;
  return new Promise((done, fail) => {
    const attempt = () => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => { socket.destroy(); done(); });
      socket.once('error', () => {
        socket.destroy();
        if (Date.now() > deadline) fail(new Error(`port ${port} never opened`));
        else setTimeout(attempt, 50);
      });
    };
    attempt();
  });
}

async function startNode(clusterName) {
  const dir = mkdtempSync(join(tmpdir(), 'bolide-console-'));
  temporary.push(dir);
  const port = await freePort();
  const httpPort = await freePort();
  const config = `service {
    cluster-name ${clusterName}
    service-threads 2
    ticker-interval 1
}
network {
    service {
        address 127.0.0.1
        port ${port}
    }
    http {
        address 127.0.0.1
        port ${httpPort}
    }
}
namespace test {
    default-ttl 1h
    nsup-period 1
    storage-engine memory {
        data-size 256M
        evict-used-pct 60
        stop-writes-used-pct 70
    }
}
namespace disk {
    storage-engine device {
        file ${join(dir, 'disk.dat')}
        filesize 64M
        write-block-size 1M
    }
}
`;
  writeFileSync(join(dir, 'bolide.conf'), config);
  const child = spawn(BOLIDED, ['--config', join(dir, 'bolide.conf')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (chunk) => { log += chunk; });
  children.push(child);
  await waitForPort(port);
  await waitForPort(httpPort);
  return { port, httpPort, url: `http://127.0.0.1:${httpPort}/`, child, log: () => log };
}

// A node of a cluster on loopback: heartbeat (mesh, seeded with the first
// node's heartbeat port), fabric and HTTP ports of its own; RF 2. A
// migrate-sleep slows migrations so the console can be seen showing them.
async function startClusterNode(clusterName, nodeId, seedHeartbeat) {
  const dir = mkdtempSync(join(tmpdir(), 'bolide-console-cluster-'));
  temporary.push(dir);
  const [port, fabricPort, heartbeatPort, httpPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const config = `service {
    cluster-name ${clusterName}
    node-id ${nodeId}
    service-threads 2
}
network {
    service {
        address 127.0.0.1
        port ${port}
    }
    heartbeat {
        mode mesh
        address 127.0.0.1
        port ${heartbeatPort}
        mesh-seed-address-port 127.0.0.1 ${seedHeartbeat || heartbeatPort}
        interval 150
        timeout 10
    }
    fabric {
        address 127.0.0.1
        port ${fabricPort}
    }
    http {
        address 127.0.0.1
        port ${httpPort}
    }
}
namespace test {
    replication-factor 2
    migrate-sleep 2000
    storage-engine memory {
        data-size 256M
    }
}
`;
  writeFileSync(join(dir, 'bolide.conf'), config);
  const child = spawn(BOLIDED, ['--config', join(dir, 'bolide.conf')], { stdio: ['ignore', 'ignore', 'ignore'] });
  children.push(child);
  await waitForPort(port);
  await waitForPort(httpPort);
  return { port, httpPort, heartbeatPort, nodeId, url: `http://127.0.0.1:${httpPort}/`, child };
}

// A node of a 3-node strong-consistency cluster (namespace test, RF 2).
async function startScNode(nodeId, seedHeartbeat) {
  const dir = mkdtempSync(join(tmpdir(), 'bolide-console-sc-'));
  temporary.push(dir);
  const [port, fabricPort, heartbeatPort, httpPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const config = `service {
    cluster-name console-sc
    node-id ${nodeId}
    service-threads 2
}
network {
    service {
        address 127.0.0.1
        port ${port}
    }
    heartbeat {
        mode mesh
        address 127.0.0.1
        port ${heartbeatPort}
        mesh-seed-address-port 127.0.0.1 ${seedHeartbeat || heartbeatPort}
        interval 150
        timeout 10
    }
    fabric {
        address 127.0.0.1
        port ${fabricPort}
    }
    http {
        address 127.0.0.1
        port ${httpPort}
    }
}
namespace test {
    replication-factor 2
    strong-consistency true
    storage-engine memory {
        data-size 64M
    }
}
`;
  writeFileSync(join(dir, 'bolide.conf'), config);
  const child = spawn(BOLIDED, ['--config', join(dir, 'bolide.conf')], { stdio: ['ignore', 'ignore', 'ignore'] });
  children.push(child);
  await waitForPort(port);
  await waitForPort(httpPort);
  return { port, httpPort, heartbeatPort, nodeId, url: `http://127.0.0.1:${httpPort}/`, child };
}

// One info command on a node's service port (proto version 2, type 1).
function info(node, command) {
  return new Promise((done, fail) => {
    const socket = net.connect(node.port, '127.0.0.1');
    const body = Buffer.from(command + '\n');
    const header = Buffer.alloc(8);
    header.writeBigUInt64BE((2n << 56n) | (1n << 48n) | BigInt(body.length));
    let answer = Buffer.alloc(0);
    socket.setTimeout(5000, () => { socket.destroy(); fail(new Error(`${command}: no answer`)); });
    socket.on('data', (chunk) => {
      answer = Buffer.concat([answer, chunk]);
      if (answer.length >= 8) {
        const size = Number(answer.readBigUInt64BE(0) & 0xffffffffffffn);
        if (answer.length >= 8 + size) {
          socket.end();
          const text = answer.subarray(8, 8 + size).toString();
          done(text.slice(text.indexOf('\t') + 1).replace(/\n$/, ''));
        }
      }
    });
    socket.on('error', fail);
    socket.write(Buffer.concat([header, body]));
  });
}

async function statistics(node) {
  const body = await api(node, '/api/v1/node');
  return Object.fromEntries(body.info.statistics.split(';').map((pair) => pair.split('=')));
}

// Until every node says the cluster has `size` nodes and no migration is left.
async function settled(nodes, size, deadlineMs = 60000) {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const all = await Promise.all(nodes.map(statistics));
    if (all.every((s) => s.cluster_size === String(size) && s.migrate_partitions_remaining === '0'
      && s.migrate_allowed === 'true')) return all;
    assert.ok(Date.now() < deadline, `cluster of ${size} not settled: ${JSON.stringify(all.map((s) => [s.cluster_size, s.migrate_partitions_remaining]))}`);
    await new Promise((done) => setTimeout(done, 200));
  }
}

// Runs bolide-bench against a node for `seconds`, at a bounded rate so the
// two cores stay shared fairly with the browser.
function load(node, workload, seconds, keys = 5000, extra = []) {
  const child = spawn(BENCH, ['-p', String(node.port), '-k', String(keys), '-o', 'S:100', '-w', workload,
    '-c', '4', '-g', '4000', '-d', `${seconds}s`, ...extra], { stdio: 'ignore' });
  children.push(child);
  return new Promise((done) => child.on('exit', (code) => done(code)));
}

async function api(node, path, options) {
  const response = await fetch(`http://127.0.0.1:${node.httpPort}${path}`, options);
  return response.json();
}

async function objects(node, namespace) {
  const body = await api(node, '/api/v1/node');
  const text = body.info[`namespace/${namespace}`];
  return Number(/(?:^|;)objects=(\d+)/.exec(text)[1]);
}

async function number(page, selector) {
  const text = await page.textContent(selector);
  const value = Number(text.replace(/,/g, '').replace(/k$/, 'e3').replace(/M$/, 'e6'));
  return Number.isFinite(value) ? value : NaN;
}

async function shot(page, name, fullPage = false) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, name), fullPage });
}

before(async () => {
  for (const binary of [BOLIDED, BENCH, CHROMIUM]) {
    assert.ok(existsSync(binary), `${binary} is missing (build with cargo build --release; apt-get install chromium)`);
  }
  first = await startNode('console-first');
  second = await startNode('console-second');
  const profile = mkdtempSync(join(tmpdir(), 'bolide-chromium-'));
  temporary.push(profile);
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1440, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  if (context) await context.close();
  for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
  for (const dir of temporary) rmSync(dir, { recursive: true, force: true });
});

test('the overview shows the node and live numbers move under load', { timeout: 90000 + LOAD_SECONDS * 1000 }, async () => {
  const page = await context.newPage();
  const requests = [];
  page.on('request', (request) => requests.push(request.url()));
  const errors = [];
  page.on('pageerror', (error) => errors.push(error.message));
  await page.goto(first.url);
  await page.waitForFunction(() => document.getElementById('node-count').textContent === '1');
  assert.equal(await page.textContent('#cluster-name'), 'console-first');
  assert.match(await page.getAttribute('#status-dot', 'class'), /live/);
  const nodeName = (await api(first, '/api/v1/cluster')).nodes[0].name;
  assert.match(await page.textContent('#nodes-table tbody'), new RegExp(nodeName));
  // The seed form is filled with this node's address.
  assert.equal(await page.inputValue('#seed-host'), '127.0.0.1');
  assert.equal(await page.inputValue('#seed-port'), String(first.port));

  const started = Date.now();
  const loaded = load(first, 'RU,80', LOAD_SECONDS);
  await page.waitForFunction(() => Number(document.getElementById('tps-reads').textContent.replace(/[,k]/g, '')) > 0,
    null, { timeout: 15000 });
  const objectsBefore = await number(page, '#objects-total');
  await page.waitForFunction(() => document.querySelector('#latency-buckets tbody').textContent.includes('{test}-read'),
    null, { timeout: 10000 });
  await page.waitForTimeout(2500);
  const objectsAfter = await number(page, '#objects-total');
  assert.ok(objectsAfter > objectsBefore, `objects should grow under load: ${objectsBefore} -> ${objectsAfter}`);
  assert.ok(await number(page, '#tps-writes') > 0, 'writes per second under load');
  assert.equal(await number(page, '#tps-errors'), 0);
  const rows = await page.textContent('#latency-buckets tbody');
  assert.match(rows, /\{test\}-write/);
  // The throughput chart has drawn lines (non-background pixels).
  const painted = await page.$eval('#chart-tps', (canvas) => {
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let colored = 0;
    for (let i = 0; i < data.length; i += 4) if (data[i + 2] > 200 && data[i] < 120) colored++;
    return colored;
  });
  assert.ok(painted > 50, `the reads line should be drawn (${painted} pixels)`);
  await page.waitForTimeout(Math.max(0, (LOAD_SECONDS - 2) * 1000 - (Date.now() - started)));
  await shot(page, 'console-overview.png');
  assert.equal(await loaded, 0);
  // Nothing was loaded from another origin, and the page raised no error.
  const foreign = requests.filter((url) => !url.startsWith(first.url) && !url.startsWith('data:'));
  assert.deepEqual(foreign, []);
  assert.deepEqual(errors, []);
  await page.close();
});

test('namespaces show usage against their marks; truncate asks for confirmation', { timeout: 90000 }, async () => {
  assert.equal(await load(first, 'I', 30, 2000), 0);
  const before = await objects(first, 'test');
  assert.ok(before >= 2000, `loaded records: ${before}`);
  const page = await context.newPage();
  await page.goto(first.url + '#namespaces');
  const card = page.locator('.ns-card[data-namespace="test"]');
  await card.waitFor();
  await page.waitForFunction((n) => {
    const element = document.querySelector('.ns-card[data-namespace="test"] [data-testid="ns-objects"]');
    return element && Number(element.textContent.replace(/,/g, '')) === n;
  }, before, { timeout: 10000 });
  const text = await card.textContent();
  assert.match(text, /evict 60%/);
  assert.match(text, /stop-writes 70%/);
  assert.match(text, /Default TTL\s*1h 0m/);
  assert.match(text, /testset/);
  assert.match(await page.textContent('.ns-card[data-namespace="disk"]'), /Device \(live records\)/);
  await shot(page, 'console-namespaces.png');

  // Cancel: nothing happens.
  await card.locator('button[data-truncate-set="testset"]').click();
  assert.equal(await page.isVisible('#modal'), true);
  assert.equal(await page.isDisabled('#modal-confirm'), true);
  await page.fill('#modal-input', 'testse');
  assert.equal(await page.isDisabled('#modal-confirm'), true);
  await page.click('#modal-cancel');
  assert.equal(await page.isVisible('#modal'), false);
  assert.equal(await objects(first, 'test'), before);

  // Confirm by typing the set's name: the set is truncated.
  await card.locator('button[data-truncate-set="testset"]').click();
  await page.fill('#modal-input', 'testset');
  assert.equal(await page.isDisabled('#modal-confirm'), false);
  await page.click('#modal-confirm');
  await page.waitForSelector('#toast:not(.hidden)');
  assert.match(await page.textContent('#toast'), /Truncating test\.testset/);
  await page.waitForFunction(() => {
    const element = document.querySelector('.ns-card[data-namespace="test"] [data-testid="ns-objects"]');
    return element && element.textContent === '0';
  }, null, { timeout: 15000 });
  assert.equal(await objects(first, 'test'), 0);
  await page.close();
});

test('latency and configuration tabs', { timeout: 60000 }, async () => {
  const loaded = load(first, 'RU,50', 6);
  const page = await context.newPage();
  await page.goto(first.url + '#latency');
  await page.waitForFunction(() => document.querySelectorAll('#histograms canvas').length >= 2, null, { timeout: 15000 });
  await page.waitForFunction(() => /msec|\d+\.\d/.test(document.querySelector('#latencies-table tbody').textContent), null, { timeout: 15000 });
  assert.match(await page.textContent('#histograms'), /\{test\}-read/);
  assert.match(await page.textContent('#histograms'), /p99 ≤/);
  await shot(page, 'console-latency.png');
  assert.equal(await loaded, 0);
  await page.click('a[data-tab="configuration"]');
  await page.waitForFunction(() => document.getElementById('config-tables').textContent.includes('service-threads'),
    null, { timeout: 10000 });
  const config = await page.textContent('#config-tables');
  assert.match(config, /cluster-name\s*console-first/);
  assert.match(config, /namespace test/);
  assert.match(config, /stop-writes-used-pct\s*70/);
  await page.click('a[data-tab="connections"]');
  await page.waitForFunction(() => document.querySelector('#connections-table tbody').textContent.trim().length > 0);
  await page.close();
});

test('the console connects to another node by host and port, and says when it cannot', { timeout: 60000 }, async () => {
  const page = await context.newPage();
  await page.goto(first.url);
  await page.waitForFunction(() => document.getElementById('cluster-name').textContent === 'console-first');
  await page.fill('#seed-host', '127.0.0.1');
  await page.fill('#seed-port', String(second.port));
  await page.click('#seed-form button');
  await page.waitForFunction(() => document.getElementById('cluster-name').textContent === 'console-second',
    null, { timeout: 10000 });
  const secondName = (await api(second, '/api/v1/cluster')).nodes[0].name;
  await page.waitForFunction((name) => document.querySelector('#nodes-table tbody').textContent.includes(name),
    secondName, { timeout: 10000 });
  assert.match(new URL(page.url()).search, new RegExp(`seed=127.0.0.1%3A${second.port}`));
  // A port where nothing listens: an error in the status bar, no crash.
  const closed = await freePort();
  await page.fill('#seed-port', String(closed));
  await page.click('#seed-form button');
  await page.waitForFunction(() => document.getElementById('status-dot').classList.contains('down'),
    null, { timeout: 10000 });
  assert.match(await page.textContent('#status-text'), new RegExp(`127.0.0.1:${closed}`));
  await page.close();
});

test('a three-node cluster: every node, its size, build, uptime and migrations', { timeout: 180000 + LOAD_SECONDS * 1000 }, async () => {
  const a = await startClusterNode('console-cluster', 'C1', null);
  const b = await startClusterNode('console-cluster', 'C2', a.heartbeatPort);
  await settled([a, b], 2);
  assert.equal(await load(a, 'I', 30, 10000, ['--cluster']), 0);
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (error) => errors.push(error.message));
  await page.goto(a.url);
  await page.waitForFunction(() => document.getElementById('node-count').textContent === '2', null, { timeout: 15000 });
  assert.equal(await page.textContent('#cluster-name'), 'console-cluster');
  // Records are counted once (the masters), copies apart.
  await page.waitForFunction(() => document.getElementById('objects-total').textContent === '10,000', null, { timeout: 10000 });
  assert.match(await page.textContent('#namespace-count'), /20,000 copies/);

  // A third node joins: the console finds it and shows the migrations.
  const c = await startClusterNode('console-cluster', 'C3', a.heartbeatPort);
  await page.waitForFunction(() => document.getElementById('node-count').textContent === '3', null, { timeout: 20000 });
  await page.waitForFunction(() => Number(document.getElementById('migrations').textContent.replace(/,/g, '')) > 0,
    null, { timeout: 20000 });
  const migrating = await page.textContent('#nodes-table tbody');
  assert.match(migrating, /\d+ sent · \d+ received/);
  await shot(page, 'console-cluster-migrating.png', true);
  const stats = await settled([a, b, c], 3, 90000);
  await page.waitForFunction(() => document.getElementById('migrations').textContent === '0', null, { timeout: 15000 });
  // Every node, with the size it reports, its build, uptime and key.
  const nodes = await page.$$eval('#nodes-table tbody tr', (rows) => rows.map((row) =>
    [...row.querySelectorAll('td')].map((cell) => cell.textContent.trim())));
  assert.equal(nodes.length, 3, JSON.stringify(nodes));
  assert.deepEqual(nodes.map((row) => row[0].split(' ')[0]).sort(), ['C1', 'C2', 'C3']);
  const ports = nodes.map((row) => Number(row[1].split(':')[1])).sort();
  assert.deepEqual(ports, [a.port, b.port, c.port].sort());
  for (const row of nodes) {
    assert.match(row[2], /^\d+\.\d+/, `build in ${row}`);
    assert.match(row[3], /^\d+(s|m \d+s)$/, `uptime in ${row}`);
    assert.equal(row[4], '3', `cluster size in ${row}`);
    assert.equal(row[5], stats[0].cluster_key, `cluster key in ${row}`);
    assert.match(row[10], /none/, `migrations in ${row}`);
  }
  // The joiner received records, the others sent them.
  const received = nodes.find((row) => row[0].startsWith('C3'))[10];
  assert.match(received, /[1-9][\d,]* received/, received);
  assert.equal(await page.isVisible('#cluster-split'), false);
  assert.equal(await page.textContent('#objects-total'), '10,000');

  // Live numbers from every node under load sent to each partition's master.
  const started = Date.now();
  const loaded = load(c, 'RU,80', LOAD_SECONDS, 10000, ['--cluster']);
  await page.waitForFunction(() => Number(document.getElementById('tps-reads').textContent.replace(/[,k]/g, '')) > 0,
    null, { timeout: 15000 });
  await page.waitForFunction(() => {
    const rows = document.querySelector('#latency-buckets tbody').textContent;
    return ['C1', 'C2', 'C3'].every((name) => rows.includes(name));
  }, null, { timeout: 15000 });
  await page.waitForTimeout(Math.max(0, (LOAD_SECONDS - 2) * 1000 - (Date.now() - started)));
  await shot(page, 'console-cluster.png', true);
  assert.equal(await loaded, 0);

  // The namespace over the three nodes: records once, copies, sets.
  await page.click('a[data-tab="namespaces"]');
  const card = page.locator('.ns-card[data-namespace="test"]');
  await card.waitFor();
  const text = await card.textContent();
  assert.match(text, /3 nodes/);
  assert.match(text, /replication factor 2/);
  await page.waitForFunction(() => {
    const row = document.querySelector('.ns-card[data-namespace="test"] tr[data-set="testset"] [data-testid="set-records"]');
    return row && row.textContent === '10,000';
  }, null, { timeout: 10000 });
  assert.equal(await card.locator('[data-testid="ns-objects"]').textContent(), '10,000');

  // The same cluster through another node's console.
  const other = await context.newPage();
  await other.goto(c.url);
  await other.waitForFunction(() => document.querySelectorAll('#nodes-table tbody tr').length === 3, null, { timeout: 15000 });
  assert.match(await other.textContent('#nodes-table tbody'), /C3\s*this node/);
  await other.close();
  assert.deepEqual(errors, []);
  await page.close();
});

test('a strong-consistency namespace: roster, pending roster, observed nodes, unavailable partitions', { timeout: 180000 }, async () => {
  const a = await startScNode('D1', null);
  const b = await startScNode('D2', a.heartbeatPort);
  const c = await startScNode('D3', a.heartbeatPort);
  // One cluster formed and settled (same key, map in force): a roster
  // staged before a later exchange would be in force after it.
  const deadline = Date.now() + 60000;
  for (;;) {
    const all = await Promise.all([a, b, c].map(statistics));
    if (all.every((s) => s.cluster_size === '3' && s.migrate_allowed === 'true' && s.cluster_key === all[0].cluster_key)) break;
    assert.ok(Date.now() < deadline, 'three SC nodes in one cluster');
    await new Promise((done) => setTimeout(done, 200));
  }
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (error) => errors.push(error.message));
  await page.goto(a.url + '#namespaces');
  const panel = page.locator('.ns-card[data-namespace="test"] [data-testid="sc-panel"]');
  const rowOf = (nodeId) => panel.locator(`tr[data-node="${nodeId}"]`);
  const cell = (nodeId, id) => rowOf(nodeId).locator(`[data-testid="${id}"]`).textContent();
  const waitCell = (nodeId, id, value) => page.waitForFunction(([n, t, v]) => {
    const element = document.querySelector(`.ns-card[data-namespace="test"] tr[data-node="${n}"] [data-testid="${t}"]`);
    return element && element.textContent.trim() === v;
  }, [nodeId, id, value], { timeout: 20000 });

  // No roster: every node observes the three, nothing is served.
  for (const id of ['D1', 'D2', 'D3']) await waitCell(id, 'sc-observed', 'D3,D2,D1');
  for (const id of ['D1', 'D2', 'D3']) {
    assert.equal(await cell(id, 'sc-roster'), 'null');
    assert.equal(await cell(id, 'sc-pending'), 'null');
    assert.equal((await cell(id, 'sc-unavailable')).trim(), '4,096');
    assert.equal((await cell(id, 'sc-dead')).trim(), '0');
  }
  assert.match(await panel.locator('[data-testid="sc-flags"]').textContent(), /no roster: nothing served/);
  assert.match(await page.textContent('.ns-card[data-namespace="test"] .ns-head'), /strong consistency/);

  // Staged: pending everywhere, not in force.
  assert.equal(await info(b, 'roster-set:namespace=test;nodes=D1,D2,D3'), 'ok');
  for (const id of ['D1', 'D2', 'D3']) await waitCell(id, 'sc-pending', 'D3,D2,D1');
  assert.equal(await cell('D2', 'sc-roster'), 'null');
  assert.match(await panel.locator('[data-testid="sc-flags"]').textContent(), /staged roster not in force/);

  // Reclustered: in force, every partition available.
  const answers = await Promise.all([a, b, c].map((n) => info(n, 'recluster:')));
  assert.ok(answers.includes('ok'), JSON.stringify(answers));
  for (const id of ['D1', 'D2', 'D3']) await waitCell(id, 'sc-roster', 'D3,D2,D1');
  for (const id of ['D1', 'D2', 'D3']) await waitCell(id, 'sc-unavailable', '0');
  await page.waitForFunction(() => /every partition available/.test(
    document.querySelector('.ns-card[data-namespace="test"] [data-testid="sc-flags"]').textContent), null, { timeout: 20000 });
  assert.doesNotMatch(await panel.locator('[data-testid="sc-flags"]').textContent(), /no roster|staged/);
  await shot(page, 'console-sc-roster.png', true);

  // Two roster nodes lost: the survivor is a minority, every partition
  // unavailable there, the missing roster nodes named.
  c.child.kill('SIGKILL');
  b.child.kill('SIGKILL');
  await waitCell('D1', 'sc-observed', 'D1');
  await waitCell('D1', 'sc-unavailable', '4,096');
  await page.waitForFunction(() => /roster nodes missing: D3, D2|roster nodes missing: D2, D3/.test(
    document.querySelector('.ns-card[data-namespace="test"] [data-testid="sc-flags"]').textContent), null, { timeout: 20000 });
  assert.match(await panel.locator('[data-testid="sc-flags"]').textContent(), /4,096 partitions unavailable/);
  assert.equal((await cell('D1', 'sc-dead')).trim(), '0');
  assert.deepEqual(errors, []);
  await page.close();
});
