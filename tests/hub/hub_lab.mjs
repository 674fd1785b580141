// Two users of one JupyterHub in Debian's Chromium: each logs in on the hub's login page, opens
// hub.ipynb in JupyterLab under /user/<name>/, runs %mgpu_init 2 and a 128 MiB allocation, and the
// Multi-GPU sidebar and status bar must show that user's cluster, live over the websocket through the
// hub's proxy, and nothing of the other's. Then a stops the cluster from the sidebar and b logs out.
// Argument: {hub, users: {a: {name, password, profile}, b: ...}, chromium, artifacts}. Prints one JSON
// line per step ({"step": ..., ...}), the pytest (test_hub_browser.py) asserts on them; at the
// "checkpoint" step (both clusters running) it waits for a line on stdin before stopping anything.
import path from 'node:path';

import { cfg, report, runCell, sidebar } from '../browser/chromium.mjs';
import { layout, login, STEP } from './hub_browser.mjs';


async function startCluster(key, s) {
  const { page } = s;
  await runCell(page, 0); // %load_ext jupyter_mgpu
  await runCell(page, 1); // %mgpu_init 2
  const initOutput = await page.evaluate(() => window.jupyterapp.shell.currentWidget.content.widgets[1].node.innerText);
  report(`${key}:init`, { initOutput });
  // the card arrives by the stream: no reload, no request of ours
  await page.waitForFunction(
    () => !!document.querySelector('#jupyter-mgpu-panel .jp-mgpu-cluster[data-status="running"] .jp-mgpu-rank'),
    null, { timeout: 60000, polling: 200 });
  await page.waitForFunction(() => /^mgpu 2× cpu/.test(document.querySelector('.jp-mgpu-status').textContent),
    null, { timeout: 30000, polling: 200 });
  const started = await sidebar(page);
  const before = started.clusters.find(c => c.status === 'running').ranks.map(r => r.used);
  await runCell(page, 2); // 128 MiB on every rank
  const grew = await page.waitForFunction(
    b => {
      const rows = document.querySelectorAll('#jupyter-mgpu-panel .jp-mgpu-cluster[data-status="running"] .jp-mgpu-rank');
      return rows.length === b.length && Array.from(rows).every((r, i) => Number(r.dataset.usedBytes) - b[i] > 100 * 2 ** 20);
    }, before, { timeout: 30000, polling: 200 }).then(() => true).catch(() => false);
  const allocated = await sidebar(page);
  await page.screenshot({ path: path.join(cfg.artifacts, `${key}_02_cluster.png`) });
  report(`${key}:started`, { initOutput, started, before, grew, allocated, layout: await layout(page) });
}

// The next line on stdin (the pytest's go-ahead), or an error after `timeout` ms.
function nextLine(timeout) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer on stdin within ${timeout} ms`)), timeout);
    process.stdin.once('data', data => {
      clearTimeout(timer);
      process.stdin.destroy(); // nothing more comes; an open stdin would keep node running
      resolve(String(data).trim());
    });
    process.stdin.resume();
  });
}

const sessions = {};
try {
  for (const key of ['a', 'b']) {
    sessions[key] = await login(key);
    await startCluster(key, sessions[key]);
  }
  // both clusters run now: after a fresh snapshot, each sidebar still shows only its own user's
  await new Promise(r => setTimeout(r, 2500));
  for (const key of ['a', 'b']) {
    report(`${key}:both`, { sidebar: await sidebar(sessions[key].page) });
  }
  report('checkpoint'); // the pytest looks at both running clusters, then answers
  await nextLine(120000);

  // a stops the cluster from the sidebar (DELETE through the proxy with a's cookie)
  const a = sessions.a.page;
  const id = (await sidebar(a)).clusters.find(c => c.status === 'running').id;
  await a.click(`#jupyter-mgpu-panel .jp-mgpu-cluster[data-cluster-id="${id}"] .jp-mgpu-stop`);
  await a.waitForSelector('.jp-Dialog', { timeout: 20000 });
  await a.click('.jp-Dialog button.jp-mod-warn');
  const stopped = await a.waitForFunction(
    cid => {
      const card = document.querySelector(`#jupyter-mgpu-panel .jp-mgpu-cluster[data-cluster-id="${cid}"]`);
      return !card || card.dataset.status === 'stopped';
    }, id, { timeout: 40000, polling: 200 }).then(() => true).catch(() => false);
  const errorDialog = await a.$('.jp-Dialog');
  report('a:stopped', { id, stopped, errorDialog: errorDialog ? await errorDialog.textContent() : null,
    sidebar: await sidebar(a) });

  const errors = Object.fromEntries(Object.entries(sessions).map(([k, s]) => [k, [...s.consoleErrors]]));
  // b logs out on the hub's logout page: the hub stops b's server (shutdown_on_logout)
  const b = sessions.b.page;
  await b.goto(`${cfg.hub}/hub/logout`, { timeout: STEP });
  await b.waitForSelector('#username_input', { timeout: STEP });
  report('b:logout', { url: b.url() });
  report('done', { consoleErrors: errors });
} catch (err) {
  for (const [key, s] of Object.entries(sessions)) {
    await s.page.screenshot({ path: path.join(cfg.artifacts, `${key}_99_failure.png`) }).catch(() => {});
  }
  report('error', { message: String(err && err.stack ? err.stack : err),
    consoleErrors: Object.fromEntries(Object.entries(sessions).map(([k, s]) => [k, s.consoleErrors])) });
  process.exitCode = 1;
} finally {
  for (const s of Object.values(sessions)) {
    await s.close().catch(() => {});
  }
}
