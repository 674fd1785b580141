// What every browser script shares: its JSON argument, the JSON-lines report, Debian's Chromium
// launched headless with the flags this closed network needs, and running a notebook cell via the UI.
import { chromium } from 'playwright-core';

export const cfg = JSON.parse(process.argv[2]);

export function report(step, data = {}) {
  process.stdout.write(JSON.stringify({ step, ...data }) + '\n');
}

// A fresh persistent context in cfg.profile; console errors and uncaught page errors of every page
// of the context are collected into consoleErrors (the tests fail on any).
export async function openBrowser({ viewport = { width: 1280, height: 900 }, extraArgs = [] } = {}) {
  const context = await chromium.launchPersistentContext(cfg.profile, {
    executablePath: cfg.chromium,
    headless: true,
    viewport,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage', ...extraArgs]
  });
  const consoleErrors = [];
  const watch = (p, tag) => {
    p.on('console', msg => {
      if (msg.type() === 'error') consoleErrors.push(`${tag}console: ${msg.text()} (${msg.location().url}:${msg.location().lineNumber}) at ${new Date().toISOString()}`);
    });
    p.on('pageerror', err => consoleErrors.push(`${tag}${String(err)} at ${new Date().toISOString()}`));
  };
  const page = context.pages()[0] ?? (await context.newPage());
  watch(page, '');
  context.on('page', p => { if (p !== page) watch(p, 'other page: '); });
  return { context, page, consoleErrors };
}

// Run cell `index` of the active notebook through JupyterLab's command; wait for it unless told not to.
export async function runCell(page, index, wait = true) {
  await page.evaluate(async ([i, w]) => {
    const panel = window.jupyterapp.shell.currentWidget;
    panel.content.activeCellIndex = i;
    const done = window.jupyterapp.commands.execute('notebook:run-cell');
    if (w) await done;
  }, [index, wait]);
}

// Open cfg.notebook in JupyterLab and wait until its kernel is idle and its cells are shown. Each run gets
// a workspace of its own: the shared server's default workspace would reopen the notebooks of earlier
// tests, whose saved widget outputs have no model any more (an error in the console).
export async function openNotebook(page, timeout) {
  const workspace = `t${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  await page.goto(`${cfg.url}lab/workspaces/${workspace}/tree/${cfg.notebook}?token=${cfg.token}`, { timeout });
  await page.waitForFunction(() => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    return !!(w && w.sessionContext?.session?.kernel?.status === 'idle' && w.content.widgets.length > 0);
  }, null, { timeout, polling: 200 });
}
