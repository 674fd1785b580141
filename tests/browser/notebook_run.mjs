// Runs one notebook in a real JupyterLab in Debian's Chromium the way a student does (Run All), then
// reads what the page shows: console errors, outputs wider than their cell, text lines that wrap,
// screenshots of the cells named in cfg.shots. Saves the executed notebook (the pytest reads its
// outputs) and shuts its kernel down. Called by tests/notebooks/labrun.py with one JSON argument
// {url, token, notebook, artifacts, chromium, profile, shots: [{name, cell}], hooks, timeoutMs};
// `cell` is a prefix of a code cell's source. An optional hooks module may export
// `during(ctx)` (runs while the cells execute, until window.__mgpuDone is true) and `after(ctx)`
// (after they finished, before the screenshots); both report their observations with ctx.report(step, data).
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { cfg, report, openBrowser, openNotebook, reportError } from './chromium.mjs';

const T = cfg.timeoutMs ?? 600000;
const { page, context, consoleErrors } = await openBrowser({ viewport: { width: 1280, height: 900 } });

// index of the code cell whose source starts with `prefix` (exactly one must)
async function cellIndex(prefix) {
  const hits = await page.evaluate(p => window.jupyterapp.shell.currentWidget.content.widgets
    .map((c, i) => [c.model.type === 'code' && c.model.sharedModel.getSource().startsWith(p), i])
    .filter(([ok]) => ok).map(([, i]) => i), prefix);
  if (hits.length !== 1) throw new Error(`${hits.length} code cells start with ${JSON.stringify(prefix)}`);
  return hits[0];
}

// Screenshot of cell `index` (input and outputs), growing the viewport's height when the cell is taller.
async function shotCell(index, name) {
  const vp = page.viewportSize();
  const height = await page.evaluate(k => {
    document.querySelectorAll('[data-mgpu-shot]').forEach(n => n.removeAttribute('data-mgpu-shot'));
    const node = window.jupyterapp.shell.currentWidget.content.widgets[k].node;
    node.setAttribute('data-mgpu-shot', '1');
    return node.getBoundingClientRect().height;
  }, index);
  if (height + 160 > vp.height) await page.setViewportSize({ width: vp.width, height: Math.min(6000, Math.ceil(height + 200)) });
  await page.evaluate(() => document.querySelector('[data-mgpu-shot]').scrollIntoView({ block: 'center' }));
  await page.waitForTimeout(400);
  const file = path.join(cfg.artifacts, `${name}.png`);
  await page.locator('[data-mgpu-shot]').screenshot({ path: file });
  await page.setViewportSize(vp);
  return file;
}

// Every output element that reaches past its cell's output area (so part of it is cut off or needs
// sideways scrolling), every line of text output that the cell's width makes wrap, and every code cell
// whose source is wider than its editor.
const layout = () => page.evaluate(() => {
  const out = { overflow: [], wrapped: [], wide_code: [] };
  const probe = document.createElement('span');
  window.jupyterapp.shell.currentWidget.content.widgets.forEach((cell, i) => {
    if (cell.model.type !== 'code') return;
    const source = cell.model.sharedModel.getSource().split('\n')[0];
    const editor = cell.node.querySelector('.cm-scroller');  // code the reader must scroll sideways to see
    if (editor && editor.scrollWidth > editor.clientWidth + 2) {
      out.wide_code.push({ cell: i, source, past: editor.scrollWidth - editor.clientWidth });
    }
    for (const area of cell.node.querySelectorAll('.jp-OutputArea-output')) {
      const box = area.getBoundingClientRect();
      if (box.width === 0) continue;
      const past = new Set();  // report the outermost element that reaches past the edge, not its children
      for (const el of area.querySelectorAll('*')) {
        const r = el.getBoundingClientRect();
        if (r.width === 0 || r.height === 0 || getComputedStyle(el).visibility === 'hidden') continue;
        if (r.right > box.right + 2 || r.left < box.left - 2) {
          past.add(el);
          if (past.has(el.parentElement)) continue;
          const what = el.tagName.toLowerCase() + (el.getAttribute('class') ? '.' + String(el.getAttribute('class')).split(' ')[0] : '');
          out.overflow.push({ cell: i, source, element: what, past: Math.round(Math.max(r.right - box.right, box.left - r.left)),
            width: Math.round(box.width) });
        }
      }
      // tables and printed results; error messages (stderr) are sentences and may wrap
      for (const pre of area.querySelectorAll('.jp-RenderedText:not([data-mime-type="application/vnd.jupyter.stderr"]) pre')) {
        probe.textContent = 'M'.repeat(100);
        probe.style.cssText = 'position:absolute; visibility:hidden; white-space:pre';
        pre.appendChild(probe);
        const charW = probe.getBoundingClientRect().width / 100;
        pre.removeChild(probe);
        const fit = Math.floor(pre.clientWidth / charW);
        const long = pre.textContent.split('\n').filter(l => l.length > fit);
        if (long.length) out.wrapped.push({ cell: i, source, fit, lines: long.slice(0, 5) });
      }
    }
  });
  return out;
});

const ctx = { page, context, cfg, report, cellIndex, shotCell, consoleErrors };
const hooks = cfg.hooks ? await import(pathToFileURL(cfg.hooks).href) : {};

try {
  await openNotebook(page, 120000);
  report('opened', { cells: await page.evaluate(() => window.jupyterapp.shell.currentWidget.content.widgets.length) });
  const t0 = Date.now();
  await page.evaluate(() => {
    window.__mgpuRunAll = null;
    window.__mgpuDone = false;
    window.jupyterapp.commands.execute('notebook:run-all-cells')
      .then(ok => { window.__mgpuRunAll = { ok: ok !== false }; })
      .catch(e => { window.__mgpuRunAll = { ok: false, error: String(e) }; });
  });
  const during = hooks.during ? hooks.during(ctx) : null;  // watches the page until window.__mgpuDone
  await page.waitForFunction(() => window.__mgpuRunAll !== null, null, { timeout: T, polling: 250 });
  // Run All settles at the first error (even in a cell tagged raises-exception) while the kernel goes on
  // with the queued cells: a silent request queued after them is answered once they all ran (or were
  // aborted after an untagged error)
  await page.evaluate(async (t) => {
    const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    const done = kernel.requestExecute({ code: '', silent: true, store_history: false, stop_on_error: false }).done;
    await Promise.race([done, new Promise((_, no) => setTimeout(() => no(new Error('cells still running')), t))]);
  }, T);
  const run = await page.evaluate(() => window.__mgpuRunAll);
  const seconds = (Date.now() - t0) / 1000;
  await page.evaluate(() => { window.__mgpuDone = true; });
  if (during) await during;
  // executed means a count; an error output outside cells tagged raises-exception is a failure
  const cells = await page.evaluate(() => window.jupyterapp.shell.currentWidget.content.widgets.map((c, i) => ({
    index: i, type: c.model.type, count: c.model.type === 'code' ? c.model.executionCount : null,
    ran: c.model.getMetadata('execution') || null,
    raises: (c.model.getMetadata('tags') || []).includes('raises-exception'),
    error: c.model.type === 'code' && Array.from({ length: c.model.outputs.length }, (_, k) => c.model.outputs.get(k))
      .some(o => o.type === 'error')
  })));
  report('ran', { ...run, seconds, cells });
  await page.waitForTimeout(1500);  // widgets that update from kernel threads settle
  if (hooks.after) await hooks.after(ctx);
  report('layout', await layout());
  const shots = [];
  for (const s of cfg.shots || []) shots.push(await shotCell(await cellIndex(s.cell), s.name));
  await page.evaluate(() => window.jupyterapp.shell.currentWidget.content.widgets[0].node.scrollIntoView());
  report('shots', { shots });
  await page.evaluate(async () => {
    const panel = window.jupyterapp.shell.currentWidget;
    await panel.context.save();
    await panel.sessionContext.shutdown();
  });
  report('done', { consoleErrors });
} catch (err) {
  await reportError(err, page, 'error.png', consoleErrors);
  await page.evaluate(() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()).catch(() => {});
} finally {
  await context.close();
}
