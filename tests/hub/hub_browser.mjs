// What the hub's browser scripts share: logging a hub user in on the hub's login page into JupyterLab
// (hub.ipynb, its kernel idle, the Multi-GPU panel open and live), and reading the panel's device rows
// and the layout of the panel and status item (the sidebar's clusters: chromium.mjs).
import path from 'node:path';

import { cfg, notebookReady, openBrowser, report, sidebar } from '../browser/chromium.mjs';

export const STEP = 150000; // login may include spawning the server on a loaded 2-core machine

// Where the panel, its cluster cards and the status item sit; whether anything overflows its box.
export async function layout(page) {
  return page.evaluate(() => {
    const box = el => {
      if (!el) return null;
      const r = el.getBoundingClientRect();
      return { x: r.x, y: r.y, w: r.width, h: r.height };
    };
    const panel = document.getElementById('jupyter-mgpu-panel');
    const overflowing = Array.from(panel.querySelectorAll('.jp-mgpu-cluster, .jp-mgpu-rank, .jp-mgpu-device'))
      .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.className);
    return {
      viewport: { w: window.innerWidth, h: window.innerHeight },
      panel: box(panel),
      status: box(document.querySelector('.jp-mgpu-status')),
      cards: Array.from(panel.querySelectorAll('.jp-mgpu-cluster')).map(box),
      overflowing
    };
  });
}

export async function login(key) {
  const user = cfg.users[key];
  cfg.profile = user.profile; // openBrowser launches a persistent context in cfg.profile
  const { context, page, consoleErrors, close } = await openBrowser({ viewport: { width: 1280, height: 800 } });
  const next = `/user/${user.name}/lab/tree/hub.ipynb`;
  await page.goto(`${cfg.hub}/hub/login?next=${encodeURIComponent(next)}`, { timeout: STEP });
  const loginTitle = await page.title();
  await page.fill('#username_input', user.name);
  await page.fill('#password_input', user.password);
  await page.click('#login_submit');
  await notebookReady(page, STEP, 250);
  await page.waitForSelector('.jp-mgpu-status', { timeout: STEP });
  await page.click('.jp-mgpu-status');
  await page.waitForSelector('#jupyter-mgpu-panel:not(.lm-mod-hidden)', { timeout: 20000 });
  await page.waitForFunction(
    () => (document.querySelector('#jupyter-mgpu-panel .jp-mgpu-live')?.textContent ?? '').startsWith('live'),
    null, { timeout: 30000, polling: 200 });
  const url = page.url();
  const before = await sidebar(page);
  await page.screenshot({ path: path.join(cfg.artifacts, `${key}_01_logged_in.png`) });
  report(`${key}:login`, { loginTitle, url, sidebar: before,
    plugin: await page.evaluate(() => window.jupyterapp.hasPlugin('jupyter-mgpu:plugin')) });
  return { user, context, page, consoleErrors, close };
}

// The panel's device rows: what each says and how its bar is split (this user's part, other users').
export async function devices(page) {
  return page.evaluate(() =>
    Array.from(document.querySelectorAll('#jupyter-mgpu-panel .jp-mgpu-device')).map(row => ({
      id: row.dataset.deviceId,
      label: row.querySelector('.jp-mgpu-label')?.textContent ?? null,
      figures: row.querySelector('.jp-mgpu-figures:not(.jp-mgpu-other-users)')?.textContent ?? null,
      otherUsers: row.querySelector('.jp-mgpu-other-users')?.textContent ?? null,
      otherUsersBytes: row.dataset.otherUsersBytes ?? null,
      fill: row.querySelector('.jp-mgpu-bar-fill')?.style.width ?? null,
      otherPart: row.querySelector('.jp-mgpu-bar-other')?.style.width ?? null,
      otherPartPx: row.querySelector('.jp-mgpu-bar-other')?.getBoundingClientRect().width ?? null,
      barPx: row.querySelector('.jp-mgpu-bar')?.getBoundingClientRect().width ?? null,
      text: row.innerText
    }))
  );
}
