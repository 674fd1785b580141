// A user of a shared GPU node in Debian's Chromium: c logs in on the hub's login page and opens the
// Multi-GPU sidebar; the GPU the hub gave c must show c's memory and, as a hatched end of its bar and a
// figure, other users' memory, and nothing about who they are. Argument: {hub, users: {c: {name,
// password, profile}}, chromium, artifacts}; prints one JSON line per step (test_hub_gpu_share.py).
import path from 'node:path';

import { cfg, report, runCell } from '../browser/chromium.mjs';
import { devices, layout, login } from './hub_browser.mjs';

let session = null;
try {
  session = await login('c');
  const { page } = session;
  await page.waitForFunction(
    () => !!document.querySelector('#jupyter-mgpu-panel .jp-mgpu-device[data-other-users-bytes]'),
    null, { timeout: 30000, polling: 200 });
  await runCell(page, 0); // the kernel sees the GPUs the hub gave c, as %mgpu_init will
  const kernelSees = await page.evaluate(() => window.jupyterapp.shell.currentWidget.content.widgets[0].node.innerText);
  await page.screenshot({ path: path.join(cfg.artifacts, 'c_01_shared_gpu.png') });
  report('c:devices', {
    kernelSees,
    devices: await devices(page),
    status: await page.textContent('.jp-mgpu-status'),
    panelText: await page.innerText('#jupyter-mgpu-panel'),
    layout: await layout(page)
  });
  report('done', { consoleErrors: [...session.consoleErrors] });
} catch (err) {
  if (session) {
    await session.page.screenshot({ path: path.join(cfg.artifacts, 'c_99_failure.png') }).catch(() => {});
  }
  report('error', { message: String(err && err.stack ? err.stack : err), consoleErrors: session?.consoleErrors });
  process.exitCode = 1;
} finally {
  if (session) {
    await session.close().catch(() => {});
  }
}
