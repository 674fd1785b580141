// Drives a real JupyterLab in Debian's Chromium (playwright-core, no browser download) through the
// Multi-GPU sidebar story, saving a screenshot per state. Called by tests/browser/test_lab.py with one
// JSON argument: {url, token, notebook, artifacts, docsShot, chromium, profile}. Prints one JSON line
// per step ({"step": ..., ...observations}) and a final {"step": "done"}; the pytest asserts on them.
import path from 'node:path';
import {
  cfg,
  report,
  openBrowser,
  openNotebook,
  runCell,
  rankRowsCut,
  reportError,
  sidebar,
  shutdownKernel
} from './chromium.mjs';

const STEP_TIMEOUT = 90000;

async function shot(page, name) {
  await page.screenshot({ path: path.join(cfg.artifacts, `${name}.png`) });
}

async function cellText(page, index) {
  return page.evaluate(i => {
    const cell = window.jupyterapp.shell.currentWidget.content.widgets[i];
    return {
      source: cell.model.sharedModel.getSource(),
      output: cell.node.innerText
    };
  }, index);
}

// What the sidebar shows for each cluster: id, status, world size, and each rank's bar.
const clusters = async page => (await sidebar(page)).clusters;

// A cluster of `n` ranks whose rows carry the longest of everything (issue 47): 7-digit pids, the
// longest state, busy ranks' op and activity, figures in four-digit MiB and GiB.
function wideCluster(id, n) {
  const ranks = Array.from({ length: n }, (_, r) => {
    const busy = r % 8 < 2;
    return {
      rank: r,
      pid: 4194300 - r,
      alive: r !== 5,
      host: null,
      device: `cpu:${r}`,
      kind: 'cpu',
      state: r === 2 ? 'restarting' : r === 5 ? 'dead' : busy ? 'busy' : 'idle',
      op: busy ? (r % 2 ? 'mg.matmul' : '%%mgpu cell') : null,
      activity: busy
        ? r % 2
          ? 'running line 3 of the cell for 1234 s'
          : 'waiting in all_reduce #12345 for 1234 s'
        : null,
      used_bytes: 1023.9 * 2 ** 20,
      peak_bytes: 1023.9 * 2 ** 20,
      total_bytes: 1023.9 * 2 ** 30,
      figures: '1023.9 MiB / 1023.9 GiB',
      sample_age_s: 0.1
    };
  });
  return {
    cluster_id: id,
    status: 'running',
    notebook: 'lab_story/01_quickstart.ipynb',
    kernel_pid: 1,
    kernel_id: null,
    controller_pid: 2,
    supervisor_pid: 3,
    world_size: n,
    backend: 'gloo',
    kind: 'cpu',
    started_at: Date.now() / 1000,
    devices: [],
    ranks,
    used_bytes: n * 1023.9 * 2 ** 20,
    total_bytes: n * 1023.9 * 2 ** 30,
    profile_time: null,
    profile: null
  };
}

// Show `cluster` alone in the sidebar, through the panel's own render, as a paused stream's snapshot
// (a paused server sends nothing that would redraw it); the next live snapshot puts the real ones back.
async function showCluster(page, cluster) {
  await page.evaluate(c => {
    const panel = Array.from(window.jupyterapp.shell.widgets('left')).find(
      w => w.id === 'jupyter-mgpu-panel'
    );
    const time = Date.now() / 1000;
    panel.render({
      type: 'snapshot',
      time,
      clusters: [c],
      devices: { time, host: 'vm', source: 'clusters', devices: [] },
      interval: 1,
      paused: true
    });
  }, cluster);
  await page.waitForTimeout(300);
}

async function waitFor(page, fn, arg, timeout = STEP_TIMEOUT) {
  await page.waitForFunction(fn, arg, { timeout, polling: 200 });
}

const { page, consoleErrors, close } = await openBrowser({
  viewport: { width: 1280, height: 800 }
});

try {
  // 1. open the quickstart notebook; wait for JupyterLab, the kernel and our status-bar item
  await openNotebook(page, STEP_TIMEOUT);
  await page.waitForSelector('.jp-mgpu-status', { timeout: STEP_TIMEOUT });
  const plugins = await page.evaluate(() =>
    window.jupyterapp.hasPlugin('jupyter-mgpu:plugin')
  );
  const statusBefore = await page.textContent('.jp-mgpu-status');
  // clicking the status item opens the sidebar
  await page.click('.jp-mgpu-status');
  await page.waitForSelector('#jupyter-mgpu-panel:not(.lm-mod-hidden)', {
    timeout: 10000
  });
  const panelVisible = await page.isVisible('#jupyter-mgpu-panel');
  const heading = await page.textContent(
    '#jupyter-mgpu-panel .jp-mgpu-heading'
  );
  await shot(page, '01_notebook_open');
  report('open', { plugins, statusBefore, panelVisible, heading });

  // 2. run %load_ext (the notebook's first code cell), then the sidebar's "Insert %mgpu_init" button
  const sources = await page.evaluate(() =>
    window.jupyterapp.shell.currentWidget.content.widgets.map(c =>
      c.model.sharedModel.getSource()
    )
  );
  const loadIndex = sources.findIndex(s =>
    s.includes('%load_ext jupyter_mgpu')
  );
  await runCell(page, loadIndex);
  await page.evaluate(i => {
    window.jupyterapp.shell.currentWidget.content.activeCellIndex = i;
  }, loadIndex);
  await page.click('#jupyter-mgpu-panel .jp-mgpu-insert');
  const initIndex = loadIndex + 1;
  const inserted = (await cellText(page, initIndex)).source;
  await runCell(page, initIndex);
  await page.waitForSelector('.mgpu-mem .mgpu-mem-row', {
    timeout: STEP_TIMEOUT
  });
  await waitFor(
    page,
    () =>
      document.querySelectorAll('#jupyter-mgpu-panel .jp-mgpu-rank').length >= 2
  );
  // the sidebar refreshes every second: wait for the snapshot taken after the cluster was ready
  await page
    .waitForFunction(
      () =>
        !!document.querySelector(
          '#jupyter-mgpu-panel .jp-mgpu-cluster[data-status="running"]'
        ),
      null,
      { timeout: 15000, polling: 200 }
    )
    .catch(() => {});
  await waitFor(page, () =>
    /mgpu \d+× cpu/.test(document.querySelector('.jp-mgpu-status').textContent)
  );
  const dashboardRows = await page.evaluate(() =>
    Array.from(document.querySelectorAll('.mgpu-mem .mgpu-mem-row')).map(r => ({
      rank: Number(r.dataset.rank),
      text: r.innerText
    }))
  );
  const started = await clusters(page);
  const statusStarted = await page.textContent('.jp-mgpu-status');
  const initOutput = (await cellText(page, initIndex)).output;
  await shot(page, '02_cluster_started');
  report('started', {
    inserted,
    dashboardRows,
    sidebar: started,
    status: statusStarted,
    initOutput
  });

  // 3. allocate 256 MiB per rank in a %%mgpu cell; the sidebar bars must grow
  const before = started[0].ranks.map(r => r.used);
  const allocIndex = initIndex + 1;
  await page.evaluate(i => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    nb.activeCellIndex = i - 1;
  }, allocIndex);
  await page.evaluate(() =>
    window.jupyterapp.commands.execute('notebook:insert-cell-below')
  );
  await page.evaluate(() => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    nb.activeCell.model.sharedModel.setSource(
      '%%mgpu\nbig = torch.ones(64, 1024, 1024)  # 256 MiB of float32 on every rank\nbig.numel() * 4 >> 20'
    );
  });
  await runCell(page, allocIndex);
  const grew = await page
    .waitForFunction(
      b =>
        Array.from(
          document.querySelectorAll('#jupyter-mgpu-panel .jp-mgpu-rank')
        ).every((r, i) => Number(r.dataset.usedBytes) - b[i] > 200 * 2 ** 20),
      before,
      { timeout: 30000, polling: 200 }
    )
    .then(() => true)
    .catch(() => false);
  await page.waitForTimeout(1500); // let the sparkline and dashboard catch up for the picture
  const allocated = await clusters(page);
  const allocOutput = (await cellText(page, allocIndex)).output;
  const dashboardAfter = await page.evaluate(() =>
    Array.from(document.querySelectorAll('.mgpu-mem .mgpu-mem-row')).map(
      r => r.innerText
    )
  );
  const rowsReal = await rankRowsCut(page, allocated[0].id);
  await shot(page, '03_after_allocation');
  if (cfg.docsShot) {
    await page.screenshot({
      path: cfg.docsShot,
      clip: { x: 0, y: 0, width: 1280, height: 800 }
    });
  }
  report('allocated', {
    before,
    grew,
    sidebar: allocated,
    allocOutput,
    dashboardAfter,
    rowsReal
  });

  // 3b. Pause (stored in the settings, sent to the server) freezes the panel; Resume restarts it
  await page.click('#jupyter-mgpu-panel .jp-mgpu-pause');
  const pausedOk = await page
    .waitForFunction(
      () =>
        document.querySelector('#jupyter-mgpu-panel .jp-mgpu-live')
          .textContent === 'paused' &&
        document
          .querySelector('.jp-mgpu-status')
          .textContent.endsWith('(paused)'),
      null,
      { timeout: 15000, polling: 200 }
    )
    .then(() => true)
    .catch(() => false);
  const pausedStatus = await page.textContent('.jp-mgpu-status');
  report('pause', { pausedOk, pausedStatus });

  // 3c. while paused: at the sidebar's default width, no rank row is cut, at 4 ranks (roomy rows) and
  // at 32 (compact rows in a scrolling list), with the longest of everything in them (issue 47)
  const layout = {};
  for (const [n, name] of [
    [4, '03b_sidebar_4_ranks'],
    [32, '03c_sidebar_32_ranks']
  ]) {
    await showCluster(page, wideCluster(`layout-${n}`, n));
    layout[n] = await rankRowsCut(page, `layout-${n}`);
    await shot(page, name);
  }
  report('layout', layout);

  await page.click('#jupyter-mgpu-panel .jp-mgpu-pause');
  const resumedOk = await page
    .waitForFunction(
      () =>
        document
          .querySelector('#jupyter-mgpu-panel .jp-mgpu-live')
          .textContent.startsWith('live'),
      null,
      { timeout: 15000, polling: 200 }
    )
    .then(() => true)
    .catch(() => false);
  // the live stream's next snapshot puts the real card back
  await page.waitForSelector(
    `#jupyter-mgpu-panel .jp-mgpu-cluster[data-cluster-id="${allocated[0].id}"]`,
    { timeout: 15000 }
  );
  report('resume', { resumedOk });

  // 4. "Stop cluster" asks for confirmation, then ends the engines
  const clusterId = allocated[0].id;
  await page.click(
    `#jupyter-mgpu-panel .jp-mgpu-cluster[data-cluster-id="${clusterId}"] .jp-mgpu-stop`
  );
  await page.waitForSelector('.jp-Dialog', { timeout: 10000 });
  const dialogText = await page.textContent('.jp-Dialog');
  await shot(page, '04_stop_confirmation');
  await page.click('.jp-Dialog button.jp-mod-warn');
  const stopped = await page
    .waitForFunction(
      id => {
        const card = document.querySelector(
          `#jupyter-mgpu-panel .jp-mgpu-cluster[data-cluster-id="${id}"]`
        );
        return !card || card.dataset.status === 'stopped';
      },
      clusterId,
      { timeout: 30000, polling: 200 }
    )
    .then(() => true)
    .catch(() => false);
  const afterStop = await clusters(page);
  const errorDialog = await page.$('.jp-Dialog');
  await shot(page, '05_stopped');
  report('stopped', {
    clusterId,
    dialogText,
    stopped,
    sidebar: afterStop,
    errorDialog: errorDialog ? await errorDialog.textContent() : null
  });
  // 5. theme-aware: the panel follows JupyterLab's dark theme
  const lightBg = await page.evaluate(
    () =>
      getComputedStyle(document.getElementById('jupyter-mgpu-panel'))
        .backgroundColor
  );
  await page.evaluate(() =>
    window.jupyterapp.commands.execute('apputils:change-theme', {
      theme: 'JupyterLab Dark'
    })
  );
  const darkApplied = await page
    .waitForFunction(
      bg =>
        getComputedStyle(document.getElementById('jupyter-mgpu-panel'))
          .backgroundColor !== bg,
      lightBg,
      { timeout: 20000, polling: 200 }
    )
    .then(() => true)
    .catch(() => false);
  const darkBg = await page.evaluate(
    () =>
      getComputedStyle(document.getElementById('jupyter-mgpu-panel'))
        .backgroundColor
  );
  await shot(page, '06_dark_theme');
  report('theme', { lightBg, darkBg, darkApplied });
  report('done', { consoleErrors });
} catch (err) {
  await reportError(err, page, '99_failure.png', consoleErrors);
} finally {
  await shutdownKernel(page);
  await close();
}
