// Runs one notebook in a real JupyterLab in Debian's Chromium the way a student does (Run All), then
// reads what the page shows: console errors, outputs wider than their cell, text lines that wrap,
// screenshots of the cells named in cfg.shots. Saves the executed notebook (the pytest reads its
// outputs) and shuts its kernel down. Called by tests/notebooks/labrun.py with one JSON argument
// {url, token, notebook, artifacts, chromium, profile, shots: [{name, cell}], hooks, timeoutMs};
// `cell` is a prefix of a code cell's source. An optional hooks module may export
// `during(ctx)` (runs while the cells execute, until window.__mgpuDone is true) and `after(ctx)`
// (after they finished, before the screenshots); both report their observations with ctx.report(step, data).
// cfg.load {from, until, perCore}: every core kept busy by `perCore` spinning processes each (as on a shared
// node) from when the cell starting with `from` starts until the one starting with `until` has run.
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  cfg,
  report,
  openBrowser,
  openNotebook,
  keepPage,
  reportError,
  settled,
  notebookLayout,
  shotCell as shotOf,
  shutdownKernel
} from './chromium.mjs';

const T = cfg.timeoutMs ?? 600000;
const { page, context, consoleErrors, newPage, close, reused } =
  await openBrowser({ viewport: { width: 1280, height: 900 }, reuse: true });

// index of the code cell whose source starts with `prefix` (exactly one must)
async function cellIndex(prefix) {
  const hits = await page.evaluate(
    p =>
      window.jupyterapp.shell.currentWidget.content.widgets
        .map((c, i) => [
          c.model.type === 'code' &&
            c.model.sharedModel.getSource().startsWith(p),
          i
        ])
        .filter(([ok]) => ok)
        .map(([, i]) => i),
    prefix
  );
  if (hits.length !== 1) {
    throw new Error(
      `${hits.length} code cells start with ${JSON.stringify(prefix)}`
    );
  }
  return hits[0];
}

// Screenshot of cell `index` (input and outputs) to artifacts/<name>.png; returns its path.
async function shotCell(index, name) {
  const file = path.join(cfg.artifacts, `${name}.png`);
  await shotOf(page, index, file);
  return file;
}
const layout = () => notebookLayout(page);

const ctx = {
  page,
  context,
  newPage,
  cfg,
  report,
  cellIndex,
  shotCell,
  consoleErrors
};

// each spinner also ends by itself once this script is gone (a timeout's SIGKILL kills no children)
const SPIN =
  'const p = process.ppid; for (let i = 0; ; i++) if (!(i & 0xfffff) && process.ppid !== p) process.exit(0);';
const spinners = [];
const stopSpinners = () => spinners.splice(0).forEach(s => s.kill('SIGKILL'));
process.on('exit', stopSpinners);

// cfg.load's window: a code cell has started once every code cell before it has its count
async function loadWindow({ from, until, perCore }) {
  const [first, last] = [await cellIndex(from), await cellIndex(until)];
  const counted = (i, upTo) =>
    page.waitForFunction(
      ([i, upTo]) =>
        window.__mgpuDone ||
        window.jupyterapp.shell.currentWidget.content.widgets
          .slice(i, upTo + 1)
          .every(
            c => c.model.type !== 'code' || c.model.executionCount !== null
          ),
      [i, upTo],
      { timeout: T, polling: 100 }
    );
  await counted(0, first - 1);
  const t0 = Date.now();
  const n = perCore * os.availableParallelism();
  for (let k = 0; k < n; k++) {
    spinners.push(spawn(process.execPath, ['-e', SPIN], { stdio: 'ignore' }));
  }
  await counted(first, last);
  stopSpinners();
  report('load', { spinners: n, seconds: (Date.now() - t0) / 1000 });
}
let keep = false;
const hooks = cfg.hooks ? await import(pathToFileURL(cfg.hooks).href) : {};

try {
  await openNotebook(page, 120000, reused);
  report('opened', {
    reused,
    cells: await page.evaluate(
      () => window.jupyterapp.shell.currentWidget.content.widgets.length
    )
  });
  const t0 = Date.now();
  await page.evaluate(() => {
    window.__mgpuRunAll = null;
    window.__mgpuDone = false;
    window.jupyterapp.commands
      .execute('notebook:run-all-cells')
      .then(ok => {
        window.__mgpuRunAll = { ok: ok !== false };
      })
      .catch(e => {
        window.__mgpuRunAll = { ok: false, error: String(e) };
      });
  });
  const during = hooks.during ? hooks.during(ctx) : null; // watches the page until window.__mgpuDone
  const loaded = cfg.load
    ? loadWindow(cfg.load).then(
        () => null,
        e => e
      )
    : null;
  await page.waitForFunction(() => window.__mgpuRunAll !== null, null, {
    timeout: T,
    polling: 250
  });
  // Run All settles at the first error (even in a cell tagged raises-exception) while the kernel goes on
  // with the queued cells: a silent request queued after them is answered once they all ran (or were
  // aborted after an untagged error)
  await page.evaluate(async t => {
    const kernel =
      window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    const done = kernel.requestExecute({
      code: '',
      silent: true,
      store_history: false,
      stop_on_error: false
    }).done;
    await Promise.race([
      done,
      new Promise((_, no) =>
        setTimeout(() => no(new Error('cells still running')), t)
      )
    ]);
  }, T);
  const run = await page.evaluate(() => window.__mgpuRunAll);
  const seconds = (Date.now() - t0) / 1000;
  await page.evaluate(() => {
    window.__mgpuDone = true;
  });
  if (during) {
    await during;
  }
  const loadFailed = loaded ? await loaded : null;
  if (loadFailed) {
    throw loadFailed;
  }
  // executed means a count; an error output outside cells tagged raises-exception is a failure
  const cells = await page.evaluate(() =>
    window.jupyterapp.shell.currentWidget.content.widgets.map((c, i) => ({
      index: i,
      type: c.model.type,
      count: c.model.type === 'code' ? c.model.executionCount : null,
      ran: c.model.getMetadata('execution') || null,
      raises: (c.model.getMetadata('tags') || []).includes('raises-exception'),
      error:
        c.model.type === 'code' &&
        Array.from({ length: c.model.outputs.length }, (_, k) =>
          c.model.outputs.get(k)
        ).some(o => o.type === 'error')
    }))
  );
  report('ran', { ...run, seconds, cells });
  await settled(page); // widgets that update from kernel threads have drawn
  if (hooks.after) {
    await hooks.after(ctx);
  }
  report('layout', await layout());
  const shots = [];
  for (const s of cfg.shots || []) {
    shots.push(await shotCell(await cellIndex(s.cell), s.name));
  }
  await page.evaluate(() =>
    window.jupyterapp.shell.currentWidget.content.widgets[0].node.scrollIntoView()
  );
  report('shots', { shots });
  await page.evaluate(async () => {
    const panel = window.jupyterapp.shell.currentWidget;
    await panel.context.save();
    await panel.sessionContext.shutdown();
  });
  report('done', { consoleErrors });
  const kept = await keepPage(page); // the next notebook's run opens it in this JupyterLab
  report('kept', { kept });
  keep = kept === true;
} catch (err) {
  await reportError(err, page, 'error.png', consoleErrors);
  await shutdownKernel(page);
} finally {
  stopSpinners();
  await close({ keep: keep ? page : null });
}
